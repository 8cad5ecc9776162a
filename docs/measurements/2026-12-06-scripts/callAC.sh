# Call AC (2026-12-06, fourth session): the 3B's FFN GEMVs per op on one host: llama.cpp's
# (GGML_VK_PERF_LOGGER) and rocky's (--profile) per-op GPU times, and rocky variants for down
# (k 11008) and gate/up (swiglu) through ROCKY_GEMV_SCHEDULE "when" filters.
# Run: OUT=$OUT bash .device/callAC.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
GGML_VK_PERF_LOGGER=1 $LB -m q3.gguf -p 0 -n 16 -r 1 -ngl 99 > $OUT/perf3.txt 2>&1
python3 - $OUT/perf3.txt <<'PY'
import sys
lines=open(sys.argv[1]).read().splitlines()
idx=[i for i,l in enumerate(lines) if 'Vulkan Timings' in l]
for l in lines[idx[-1]:idx[-1]+22]: print(l[:150])
PY
sg() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":$3,\"reduce\":\"$4\",\"units_per_thread\":${5:-1}"; }
i8() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"reduce\":\"subgroup\",\"math\":\"int8_dot\",\"vector_width\":1,\"dot_first\":false,\"units_per_thread\":${3:-1}"; }
V=(
 ''
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 32 2 4 one_subgroup)},{\"when\":{\"k\":11008},$(sg 32 2 4 one_subgroup)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 32 4 8 one_subgroup)},{\"when\":{\"k\":11008},$(sg 32 2 8 one_subgroup)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 64 4 8 subgroup)},{\"when\":{\"k\":11008},$(sg 64 2 8 subgroup)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 128 2 4 subgroup)},{\"when\":{\"k\":11008},$(i8 128 4)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 256 4 2 subgroup)},{\"when\":{\"k\":11008},$(i8 64 4)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 128 4 8 subgroup)},{\"when\":{\"k\":11008},$(sg 128 4 8 subgroup)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 128 1 4 subgroup)},{\"when\":{\"k\":11008},$(sg 128 1 8 subgroup)}]"
 "[{\"when\":{\"epilogue\":\"swiglu\"},$(sg 128 4 4 subgroup)},{\"when\":{\"k\":11008},$(i8 128 2)}]"
)
prof() { # LABEL [ENV...]
  l=$1; shift
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | grep -E "^(ffn|output|attn)" | awk -v l=$l '{printf "%s %-12s %3s %7s ms  %s\n", l, $1, $2, $3, $7}'
}
for i in "${!V[@]}"; do echo "V$i = ${V[$i]}"; done
prof V0
for i in "${!V[@]}"; do [ $i = 0 ] || prof V$i ROCKY_GEMV_SCHEDULE="${V[$i]}" | grep ffn; done
t done
