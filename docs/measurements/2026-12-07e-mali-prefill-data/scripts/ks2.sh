#!/bin/sh
# ks2.sh WORKLOAD_JSON default|default+packed TAG: stats line + loop LS count (26.1.6 shim)
D=/work/target-mali/release/examples/mali_dump; S26=~/.cache/rocky/mali-shim26-26.1.6
$D "$1" "$2" /tmp/m9/$3.spv > /tmp/m9/$3.name 2>&1 || { cat /tmp/m9/$3.name; exit 1; }
BIFROST_MESA_DEBUG=shaderdb,shaders XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh /tmp/m3/vkc /tmp/m9/$3.spv > /tmp/m9/$3.txt 2>&1
lp=$(sh /work/main/docs/measurements/2026-12-07b-mali-predict-data/scripts/lscount.sh /tmp/m9/$3.txt | awk '/^loop/ && $2 !~ /BARRIER/ {s+=$3} END{print s}')
echo "$3 $(grep '^name' /tmp/m9/$3.name | cut -d' ' -f2) :: $(grep 'MESA_SHADER_COMPUTE shader' /tmp/m9/$3.txt | head -1| sed 's/.*shader: //; s/, 0.000000 v, 0.000000 t//; s/ code size.*threads/ thr/; s/, 0 spill cost//; s/ uniforms used//') :: loop LS $lp"
