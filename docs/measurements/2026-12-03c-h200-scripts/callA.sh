# Call A (2026-12-03, session 3): dispatches recorded by level (ROCKY_REORDER=1, the new default)
# against call order with a barrier per hazard (ROCKY_REORDER=0), split-K scratch per sibling
# GEMM; then a longer ubatch-64 tune of the 3B file, its DB exported for later calls.
source .device/common.sh
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
t "3B default, reorder on/off"
for r in 1 0 1 0; do
  ROCKY_REORDER=$r rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default | sed "s/^/reorder=$r /"
  ROCKY_REORDER=$r rb q3.gguf -p 512 -ub 64 -r 3 --backends default | sed "s/^/reorder=$r /"
done
t "0.5B default, reorder on/off"
for r in 1 0; do ROCKY_REORDER=$r rb q05.gguf -p 512 -ub 512,64 -r 3 --backends default | sed "s/^/reorder=$r /"; done
t "tune 3B ub64"; timeout 230 $R tune q3.gguf --ubatch 64 --trials 40 --time 210 --graph-time 0 --attention-kv 128,512 --db t3.sled > $OUT/tune3-64.txt 2>&1; tail -16 $OUT/tune3-64.txt
t "3B tuned ub64"; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned,default --db t3.sled
prof 3b-ub64-tuned-reorder0 q3.gguf --token-ids $IDS --ubatch 64 --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned3-64-h200.jsonl --db t3.sled > /dev/null 2>&1; t done
