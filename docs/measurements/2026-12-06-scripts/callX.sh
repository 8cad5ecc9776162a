# Call X (2026-12-06, third session): what NVIDIA's compiler makes of the decode GEMVs (the
# driver's pipeline statistics: registers, instructions...) for the new desktop default, the old
# one and int8, on the 3B's shapes; and where a 3B decode step's GPU time goes now
# (`rocky generate --profile`, steps recorded with timestamps).
# Run: OUT=$OUT bash .device/callX.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
W() { echo "{\"gemv\":{\"m\":1,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false$4}}"; }
OLDS='{"gemv":{"threads":64,"cols":COLS,"chunks_per_thread":8,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32"}}'
INT8='{"gemv":{"threads":64,"cols":COLS,"chunks_per_thread":8,"vector_width":1,"reduce":"subgroup","accumulate":"f32","math":"int8_dot"}}'
for spec in "gate/up q4_k 11008 2048 4 swiglu" "gate/up q6_k 11008 2048 4 swiglu" "down q4_k 2048 11008 2 residual" "down q6_k 2048 11008 2 residual" "q q4_k 2048 2048 2 none" "output q6_k 151936 2048 2 none"; do
  set -- $spec; ep=""; [ $6 = none ] || ep=",\"epilogue\":\"$6\""
  wl=$(W $3 $4 $2 "$ep")
  for v in new old int8; do
    case $v in new) s="";; old) s=$(echo $OLDS | sed "s/COLS/$5/");; int8) s=$(echo $INT8 | sed "s/COLS/$5/");; esac
    out=$($R kernel --workload "$wl" ${s:+--schedule "$s"} --stats --run --runs 20 --json 2>&1)
    echo "$out" | python3 -c "
import json,sys
t=sys.stdin.read()
try: d=json.loads(t)
except Exception: print('$1 $2 $v failed:', t[-300:]); sys.exit()
st={}
for e in (d.get('driver_statistics') or {}).get('executables',[]):
    for s in e['statistics']: st[s['name']]=s['value']
tm=((d.get('run') or {}).get('timing') or {})
print('%-8s %-5s %-5s' % ('$1','$2','$v'), d['kernel']['name'], json.dumps(st), 'median %.1f us' % (tm.get('median_ms',0)*1e3))"
  done
done
t profile
ROCKY_DB=/tmp/none.sled timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | tail -30
t done
