# Call E (2026-12-03, session 4): resumes call D's 3B database (graph choice left out) and
# searches the 3B's other GEMMs longer: ffn_down (K 11008) and attn_q/attn_output (N 2048,
# K 2048) at ubatch 512, all GEMMs at ubatch 64; llama.cpp before and after, defaults, tuned.
source .device/common.sh
L=$OUT/tune-logs.txt
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
t "defaults"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "import call D's 3B db"; $R db import $D/tuned-3b-d1.jsonl --db t3.sled 2>&1 | tail -1
tn() { echo "== $*" >> $L; s=$1; shift; timeout $s $R tune "$@" >> $L 2>&1; echo "rc $?"; }
W="--seed 3 --warmup-ms 150 --graph-time 0 --attention-kv 0 --db t3.sled"
t "tune 3B ub512 ffn_down"; tn 125 q3.gguf --ubatch 512 --workload "k=11008" --trials 200 --time 115 $W; tail -3 $L
t "tune 3B ub512 attn_q/output"; tn 65 q3.gguf --ubatch 512 --workload "n=2048 k=2048" --trials 200 --time 56 $W; tail -3 $L
t "tune 3B ub64 all GEMMs"; tn 120 q3.gguf --ubatch 64 --trials 200 --time 110 $W; tail -10 $L
t "3B tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
prof 3b-ub64-tuned q3.gguf --token-ids $IDS --ubatch 64 --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-3b-h200.jsonl --db t3.sled > /dev/null 2>&1; t done
