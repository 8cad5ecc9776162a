# Call D (2026-12-03, session 4): rocky 3b4a8d6. llama.cpp, rocky defaults, then a longer search
# of the 3B's gate/up GEMM (N 11008, K 2048, Q4_K) at ubatch 512 and 64 resuming from call C's
# database (2026-12-03c), its ffn_down GEMMs, the 0.5B; a graph-level step on a copy of the 3B
# database; tuned rows, profiles, llama.cpp again; the databases exported.
source .device/common.sh
L=$OUT/tune-logs.txt
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "defaults"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
t "import call C's 3B db"; $R db import $D/tuned-3b-prev.jsonl --db t3.sled 2>&1 | tail -1
tn() { echo "== $*" >> $L; s=$1; shift; timeout $s $R tune "$@" >> $L 2>&1; echo "rc $?"; }
t "tune 3B ub512 gate/up"; tn 160 q3.gguf --ubatch 512 --workload "n=11008 k=2048" --trials 400 --time 150 --seed 2 --graph-time 0 --attention-kv 0 --db t3.sled; tail -2 $L
t "tune 3B ub512 ffn_down"; tn 50 q3.gguf --ubatch 512 --workload "k=11008" --trials 60 --time 40 --seed 2 --graph-time 0 --attention-kv 0 --db t3.sled; tail -3 $L
t "tune 3B ub64 gate/up"; tn 60 q3.gguf --ubatch 64 --workload "n=11008 k=2048" --trials 200 --time 52 --seed 2 --graph-time 0 --attention-kv 0 --db t3.sled; tail -2 $L
t "tune 0.5B ub512, ub64"; tn 45 q05.gguf --ubatch 512 --trials 16 --time 36 --graph-time 0 --db t05.sled; tail -2 $L
tn 35 q05.gguf --ubatch 64 --trials 16 --time 27 --graph-time 0 --attention-kv 128,512 --db t05.sled; tail -2 $L
t "3B tuned (kernels)"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
t "graph step on a copy"; cp -r t3.sled t3g.sled; tn 60 q3.gguf --ubatch 512 --trials 1 --time 5 --attention-kv 0 --graph-time 20 --graph-tokens 512 --db t3g.sled; grep "^graph" $L | tail -8
t "3B tuned (kernels + graph)"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3g.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3g.sled
t "0.5B tuned"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t05.sled; rb q05.gguf -p 512 -ub 64 -r 3 --backends tuned --db t05.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
prof 3b-ub64-tuned q3.gguf --token-ids $IDS --ubatch 64 --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-3b-h200.jsonl --db t3g.sled > /dev/null 2>&1; $R db export -o $OUT/tuned-05b-h200.jsonl --db t05.sled > /dev/null 2>&1; t done
