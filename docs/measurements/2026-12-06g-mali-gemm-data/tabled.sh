#!/bin/sh
# tabled.sh TAG: per-kernel statistics of the default schedules, SPIR-V dumped by the mali_dump example, compiled by vkc under the Mesa 26.1.6 shim
S26=~/.cache/rocky/mali-shim26-26.1.6; D=/work/wt-mali/target/release/examples/mali_dump; TAG=$1; O=/tmp/m4/spv-$TAG; mkdir -p $O; i=0
sed -n '/^q[0-9]/p' /tmp/m3/table.sh | while read wt n k extra m; do [ "$extra" = "-" ] && extra=""; i=$((i+1))
  W="{\"m\":$m,\"n\":$n,\"k\":$k,\"act\":\"f32\",\"weight\":\"$wt\",\"bias\":false$extra}"
  W=$(echo "$W" | sed -E 's/"bias":false,(.*)"bias":true/\1"bias":true/')
  kn=$($D "$W" default $O/$i.spv 2>&1 | grep "^name" | awk '{print $2}')
  out=$(BIFROST_MESA_DEBUG=shaderdb XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh /tmp/m3/vkc $O/$i.spv 2>&1)
  st=$(echo "$out" | grep "MESA_SHADER_COMPUTE shader" | head -1 | sed -E 's/.*: ([0-9]+) instrs, ([0-9.]+) cycles, ([0-9.]+) fma, ([0-9.]+) cvt, ([0-9.]+) sfu.* ([0-9.]+) ls,.* ([0-9]+):([0-9]+) spills:fills.* ([0-9]+) registers used.*/fma \3 cvt \4 sfu \5 ls \6 spills \7 regs \9/')
  echo "$TAG m$m $wt $n x $k $extra :: $kn :: $st"
done
