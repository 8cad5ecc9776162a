#!/bin/sh
# kstat.sh WORKLOAD_JSON SCHEDULE_JSON|default TAG -> one stats line
D=/tmp/mali2/dumper/target/release/dumper; S26=~/.cache/rocky/mali-shim26-26.1.6
$D "$1" "$2" /tmp/mali2/$3.spv 2>/tmp/mali2/$3.name || { cat /tmp/mali2/$3.name; exit 1; }
BIFROST_MESA_DEBUG=shaderdb,shaders $S26/run-26.sh /tmp/mali2/vkc /tmp/mali2/$3.spv > /tmp/mali2/$3.txt 2>&1
echo "$3 $(grep '^name' /tmp/mali2/$3.name | cut -d' ' -f2-) :: $(grep 'MESA_SHADER_COMPUTE shader' /tmp/mali2/$3.txt | sed 's/.*shader: //; s/, 0.000000 v, 0.000000 t//; s/ code size.*threads/ thr/; s/, 0 spill cost//; s/ uniforms used//')"
