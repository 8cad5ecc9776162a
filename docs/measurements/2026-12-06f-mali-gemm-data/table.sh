#!/bin/sh
# table.sh BIN TAG: per-kernel Valhall statistics (Mesa 26.1.6 shim), default schedule
S26=~/.cache/rocky/mali-shim26-26.1.6; BIN=$1; TAG=$2
while read wt n k extra m; do [ "$extra" = "-" ] && extra="";
  W="{\"gemm\":{\"m\":$m,\"n\":$n,\"k\":$k,\"act\":\"f32\",\"weight\":\"$wt\",\"bias\":false$extra}}"
  W=$(echo "$W" | sed -E 's/"bias":false,(.*)"bias":true/\1"bias":true/')
  out=$(XDG_CACHE_HOME=$(mktemp -d) BIFROST_MESA_DEBUG=shaderdb $S26/run-26.sh $BIN kernel --workload "$W" --stats 2>&1)
  st=$(echo "$out" | grep "MESA_SHADER_COMPUTE shader" | head -1 | sed -E 's/.*: ([0-9]+) instrs, ([0-9.]+) cycles, ([0-9.]+) fma, ([0-9.]+) cvt, ([0-9.]+) sfu.* ([0-9.]+) ls,.* ([0-9]+):([0-9]+) spills:fills.* ([0-9]+) registers used.*/fma \3 cvt \4 sfu \5 ls \6 spills \7 regs \9/')
  kn=$(echo "$out" | grep "^kernel" | awk '{print $2}' | tr -d :)
  echo "$TAG m$m $wt $n x $k $extra :: $kn :: $st"
done <<LIST
q4_k 11008 2048 - 512
q4_k 11008 2048 - 64
q4_k 2048 2048 ,"bias":true 512
q4_k 2048 2048 ,"epilogue":"residual" 512
q4_k 256 2048 ,"bias":true 512
q4_k 2048 11008 ,"epilogue":"residual" 512
q6_k 2048 11008 ,"layout":"aligned","epilogue":"residual" 512
q6_k 256 2048 ,"layout":"aligned","bias":true 512
q4_k 11008 2048 ,"epilogue":"swiglu" 64
q6_k 2048 11008 ,"layout":"aligned","epilogue":"residual" 64
q4_k 2048 2048 ,"bias":true 64
q5_0 4864 896 ,"layout":"aligned" 512
q5_0 896 896 ,"layout":"aligned","bias":true 512
q8_0 2048 2048 ,"layout":"aligned","bias":true 512
q8_0 2048 2048 ,"layout":"aligned","bias":true 64
q8_0 11008 2048 ,"layout":"aligned" 512
q4_k 2048 2048 - 32
LIST
