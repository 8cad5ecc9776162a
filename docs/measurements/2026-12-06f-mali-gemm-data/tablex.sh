#!/bin/sh
# tablex.sh X86BIN TAG: per-kernel statistics, SPIR-V dumped on x86 (--caps mali-g610), compiled by vkc under the Mesa 26.1.6 shim
S26=~/.cache/rocky/mali-shim26-26.1.6; BIN=$1; TAG=$2; D=/tmp/m3/spv-$TAG; mkdir -p $D; i=0
sed -n '/^q[0-9]/p' /tmp/m3/table.sh | while read wt n k extra m; do [ "$extra" = "-" ] && extra=""; i=$((i+1))
  W="{\"gemm\":{\"m\":$m,\"n\":$n,\"k\":$k,\"act\":\"f32\",\"weight\":\"$wt\",\"bias\":false$extra}}"
  W=$(echo "$W" | sed -E 's/"bias":false,(.*)"bias":true/\1"bias":true/')
  kn=$($BIN kernel --caps mali-g610 --workload "$W" --dump-spirv $D/$i.spv 2>&1 | grep "^kernel" | awk '{print $2}' | tr -d :)
  out=$(BIFROST_MESA_DEBUG=shaderdb XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh /tmp/m3/vkc $D/$i.spv 2>&1)
  st=$(echo "$out" | grep "MESA_SHADER_COMPUTE shader" | head -1 | sed -E 's/.*: ([0-9]+) instrs, ([0-9.]+) cycles, ([0-9.]+) fma, ([0-9.]+) cvt, ([0-9.]+) sfu.* ([0-9.]+) ls,.* ([0-9]+):([0-9]+) spills:fills.* ([0-9]+) registers used.*/fma \3 cvt \4 sfu \5 ls \6 spills \7 regs \9/')
  echo "$TAG m$m $wt $n x $k $extra :: $kn :: $st"
done
