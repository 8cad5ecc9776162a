# Call AA (2026-12-06, fourth session): where llama.cpp's 3B decode step goes
# (GGML_VK_PERF_LOGGER per-op GPU times, tg at depth 0) next to rocky's --profile of the same
# file, and NVIDIA's statistics + warm times of int8 GEMV variants on the 3B gate/up and down.
# Run: OUT=$OUT bash .device/callAA.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
GGML_VK_PERF_LOGGER=1 $LB -m q3.gguf -p 0 -n 16 -r 1 -ngl 99 > $OUT/perf3.txt 2>&1
python3 - $OUT/perf3.txt <<'PY' | tail -60
import sys,re,collections
lines=open(sys.argv[1]).read().splitlines()
print(len(lines),'lines'); 
# print the last timing block
idx=[i for i,l in enumerate(lines) if 'Vulkan Timings' in l]
if idx:
    for l in lines[idx[-1]:idx[-1]+60]: print(l)
else:
    print('\n'.join(lines[-40:]))
PY
t profile
ROCKY_DB=/tmp/none.sled timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | tail -32
t kernels
W() { echo "{\"gemv\":{\"m\":1,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false$4}}"; }
for spec in "gate/up q4_k 11008 2048 swiglu" "down q6_k 2048 11008 residual" "q q4_k 2048 2048 none"; do
  set -- $spec; ep=""; [ $5 = none ] || ep=",\"epilogue\":\"$5\""
  wl=$(W $3 $4 $2 "$ep")
  for v in default "64 2 1" "64 4 1" "64 8 1" "128 8 1" "32 8 2" "64 4 2" "256 8 1"; do
    s=""; if [ "$v" != default ]; then set -- $v; s="{\"gemv\":{\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"units_per_thread\":$3,\"vector_width\":1,\"reduce\":\"subgroup\",\"accumulate\":\"f32\",\"math\":\"int8_dot\"}}"; fi
    out=$($R kernel --workload "$wl" ${s:+--schedule "$s"} --stats --run --runs 20 --json 2>&1)
    echo "$out" | python3 -c "
import json,sys
t=sys.stdin.read()
try: d=json.loads(t)
except Exception: print('$v failed:', t[-300:]); sys.exit()
st={}
for e in (d.get('driver_statistics') or {}).get('executables',[]):
    for s in e['statistics']: st[s['name']]=s['value']
tm=((d.get('run') or {}).get('timing') or {})
print(d['kernel']['name'], {k:v for k,v in st.items() if 'egister' in k or 'inary' in k}, 'median %.1f us' % (tm.get('median_ms',0)*1e3))"
  done
done
t done
