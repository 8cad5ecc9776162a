#!/bin/sh
# ks.sh WORKLOAD_JSON SCHEDULE_JSON|default TAG -> one stats line (Mesa 26.1.6 shim)
D=/work/wt-mali/target/release/examples/mali_dump; S26=~/.cache/rocky/mali-shim26-26.1.6
$D "$1" "$2" /tmp/m4/$3.spv > /tmp/m4/$3.name 2>&1 || { cat /tmp/m4/$3.name; exit 1; }
BIFROST_MESA_DEBUG=shaderdb,shaders XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh /tmp/m3/vkc /tmp/m4/$3.spv > /tmp/m4/$3.txt 2>&1
echo "$3 $(grep '^name' /tmp/m4/$3.name | cut -d' ' -f2-) :: $(grep 'MESA_SHADER_COMPUTE shader' /tmp/m4/$3.txt | head -1| sed 's/.*shader: //; s/, 0.000000 v, 0.000000 t//; s/ code size.*threads/ thr/; s/, 0 spill cost//; s/ uniforms used//')"
