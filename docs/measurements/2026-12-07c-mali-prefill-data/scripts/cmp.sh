#!/bin/sh
# cmp.sh: default-schedule statistics, main (base) against this branch, Mesa 26.1.6 shim
# BASE_TARGET, BRANCH_TARGET: cargo target dirs holding the mali_dump example (../../2026-12-06g-mali-gemm-data/mali_dump.rs,
# copied to compiler/examples/) built from main and from this branch; vkc: 2026-12-06e's vkc.c; lscount.sh: 2026-12-07b's
S26=~/.cache/rocky/mali-shim26-26.1.6
for spec in \
 'm64 q4_k 11008x2048 (gate/up)|{"m":64,"n":11008,"k":2048,"act":"f32","weight":"q4_k","bias":false}' \
 'm64 q4_k 2048x2048 bias (q)|{"m":64,"n":2048,"k":2048,"act":"f32","weight":"q4_k","bias":true}' \
 'm64 q4_k 2048x11008 residual (down)|{"m":64,"n":2048,"k":11008,"act":"f32","weight":"q4_k","bias":false,"epilogue":"residual"}' \
 'm64 q6_k aligned 2048x11008 residual (down)|{"m":64,"n":2048,"k":11008,"act":"f32","weight":"q6_k","layout":"aligned","bias":false,"epilogue":"residual"}' \
 'm64 q6_k aligned 256x2048 bias (v)|{"m":64,"n":256,"k":2048,"act":"f32","weight":"q6_k","layout":"aligned","bias":true}' \
 'm512 q4_k 11008x2048|{"m":512,"n":11008,"k":2048,"act":"f32","weight":"q4_k","bias":false}' \
 'm64 q5_0 aligned 4864x896 (0.5B gate/up)|{"m":64,"n":4864,"k":896,"act":"f32","weight":"q5_0","layout":"aligned","bias":false}' \
 'm64 q5_0 aligned 896x896 bias (0.5B q)|{"m":64,"n":896,"k":896,"act":"f32","weight":"q5_0","layout":"aligned","bias":true}' \
 'm64 q4_k 896x4864 residual (0.5B down)|{"m":64,"n":896,"k":4864,"act":"f32","weight":"q4_k","bias":false,"epilogue":"residual"}' \
 'm32 q4_k 2048x2048|{"m":32,"n":2048,"k":2048,"act":"f32","weight":"q4_k","bias":false}' \
 'm64 q5_k 2048x2048|{"m":64,"n":2048,"k":2048,"act":"f32","weight":"q5_k","bias":false}' \
 'm64 q4_0 2048x2048|{"m":64,"n":2048,"k":2048,"act":"f32","weight":"q4_0","bias":false}' \
 'm64 iq4_xs 2048x2048|{"m":64,"n":2048,"k":2048,"act":"f32","weight":"iq4_xs","bias":false}' \
 'm64 q4_1 2048x2048|{"m":64,"n":2048,"k":2048,"act":"f32","weight":"q4_1","bias":false}' \
 'm64 q5_1 2048x2048|{"m":64,"n":2048,"k":2048,"act":"f32","weight":"q5_1","bias":false}' \
 ; do t=${spec%%|*}; w=${spec#*|}
 for v in base:BASE_TARGET new:BRANCH_TARGET; do tag=${v%%:*}; D=${v#*:}/release/examples/mali_dump
  $D "$w" default /tmp/m9/c-$tag.spv > /tmp/m9/c-$tag.name 2>&1
  BIFROST_MESA_DEBUG=shaderdb,shaders XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh /tmp/m3/vkc /tmp/m9/c-$tag.spv > /tmp/m9/c-$tag.txt 2>&1
  st=$(grep "MESA_SHADER_COMPUTE shader" /tmp/m9/c-$tag.txt | head -1 | sed -E 's/.*: ([0-9]+) instrs, ([0-9.]+) cycles, ([0-9.]+) fma, ([0-9.]+) cvt, ([0-9.]+) sfu.* ([0-9.]+) ls,.* ([0-9]+):([0-9]+) spills:fills.* ([0-9]+) threads, ([0-9]+) registers used.*/\3 \/ \4 \/ \5 \/ \6, \7:\8, \9 thr, \10 regs/')
  lp=$(sh ../../2026-12-07b-mali-predict-data/scripts/lscount.sh /tmp/m9/c-$tag.txt | awk '/^loop/ && $2 !~ /BARRIER/ {s+=$3} END{print s}')
  echo "$t | $tag | $(grep '^name' /tmp/m9/c-$tag.name | awk '{print $2}') | $st | loop LS $lp"
 done; done
