# Call F (2026-12-03, session 4): gate and up as one GEMM with SwiGLU in its epilogue
# (ROCKY_FUSE=1), tuned, against the separate GEMMs (the default fusion, call E's database);
# llama.cpp before and after.
source .device/common.sh
L=$OUT/tune-logs.txt
tn() { echo "== $*" >> $L; s=$1; shift; timeout $s $R tune "$@" >> $L 2>&1; echo "rc $?"; }
W="--seed 4 --warmup-ms 150 --graph-time 0 --attention-kv 0 --db t3.sled"
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
t "import call E's 3B db"; $R db import $D/tuned-3b-e.jsonl --db t3.sled 2>&1 | tail -1
t "tuned, separate gate/up"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
export ROCKY_FUSE=1
t "fused: default"; rb q3.gguf -p 512 -ub 512,64 -r 3 --backends default
t "tune fused gate/up ub512"; tn 125 q3.gguf --ubatch 512 --workload "n=11008 k=2048" --trials 300 --time 115 $W; tail -4 $L
t "tune fused gate/up ub64"; tn 70 q3.gguf --ubatch 64 --workload "n=11008 k=2048" --trials 300 --time 60 $W; tail -4 $L
t "tuned, fused gate/up"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
prof 3b-pp512-tuned-fused q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
unset ROCKY_FUSE
t "tuned, separate gate/up (again)"; rb q3.gguf -p 512 -ub 512,64 -r 3 --backends tuned --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-3b-h200.jsonl --db t3.sled > /dev/null 2>&1; t done
