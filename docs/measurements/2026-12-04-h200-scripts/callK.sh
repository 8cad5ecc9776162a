# Call K (2026-12-04): tuning for the final measurement. Imports call F's 3B records (separate
# and fused gate/up, GGUF-layout Q6_K) and call D's 0.5B ones, tunes what changed since
# (Q6_K in the aligned layout, the 0.5B's fused gate/up), then the graph step per ubatch.
source .device/common.sh
L=$OUT/tune-logs.txt
tn() { echo "== $*" >> $L; s=$1; shift; timeout $s $R tune "$@" >> $L 2>&1; echo "rc $?"; }
W="--seed 5 --warmup-ms 150"
t "import"; $R db import $D/tuned-3b-f.jsonl --db t3.sled 2>&1 | tail -1; $R db import $D/tuned-05b-d.jsonl --db t05.sled 2>&1 | tail -1
t "3B q6_k ub512"; tn 85 q3.gguf --ubatch 512 --workload q6_k --trials 80 --time 75 $W --graph-time 0 --attention-kv 0
t "3B q6_k ub64"; tn 50 q3.gguf --ubatch 64 --workload q6_k --trials 60 --time 40 $W --graph-time 0 --attention-kv 0
t "0.5B ub512"; tn 70 q05.gguf --ubatch 512 --trials 16 --time 60 $W --graph-time 0
t "0.5B ub64"; tn 50 q05.gguf --ubatch 64 --trials 16 --time 40 $W --graph-time 0 --attention-kv 128,512
t "3B graph ub512"; tn 70 q3.gguf --ubatch 512 --trials 1 --time 5 --attention-kv 0 --graph-time 50 --graph-tokens 512
t "3B graph ub64"; tn 50 q3.gguf --ubatch 64 --trials 1 --time 5 --attention-kv 0 --graph-time 35 --graph-tokens 512
t "0.5B graph ub512"; tn 40 q05.gguf --ubatch 512 --trials 1 --time 3 --attention-kv 0 --graph-time 25 --graph-tokens 512
t "0.5B graph ub64"; tn 35 q05.gguf --ubatch 64 --trials 1 --time 3 --attention-kv 0 --graph-time 20 --graph-tokens 512
$R db list --db t3.sled 2>&1 | grep -i graph | head; $R db list --db t05.sled 2>&1 | grep -i graph | head
$R db export -o $OUT/tuned-3b-k.jsonl --db t3.sled > /dev/null 2>&1; $R db export -o $OUT/tuned-05b-k.jsonl --db t05.sled > /dev/null 2>&1; t done
