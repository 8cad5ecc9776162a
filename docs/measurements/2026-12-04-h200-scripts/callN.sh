# Call N (2026-12-04): call K's tuning again, this time into the databases the benchmarks read
# (call K's tunes went to the machine's default database: its script had no --db), then the
# final side-by-side measurement against llama.cpp on this one machine.
source .device/common.sh
L=$OUT/tune-logs.txt
tn() { echo "== $*" >> $L; s=$1; shift; timeout $s $R tune "$@" >> $L 2>&1; echo "rc $?"; }
W="--seed 5 --warmup-ms 150"
t "import"; $R db import $D/tuned-3b-f.jsonl --db t3.sled 2>&1 | tail -1; $R db import $D/tuned-05b-d.jsonl --db t05.sled 2>&1 | tail -1
t "3B q6_k ub512"; tn 85 q3.gguf --ubatch 512 --workload q6_k --trials 80 --time 75 $W --graph-time 0 --attention-kv 0 --db t3.sled
t "3B q6_k ub64"; tn 50 q3.gguf --ubatch 64 --workload q6_k --trials 60 --time 40 $W --graph-time 0 --attention-kv 0 --db t3.sled
t "0.5B ub512"; tn 70 q05.gguf --ubatch 512 --trials 16 --time 60 $W --graph-time 0 --db t05.sled
t "0.5B ub64"; tn 50 q05.gguf --ubatch 64 --trials 16 --time 40 $W --graph-time 0 --attention-kv 128,512 --db t05.sled
t "3B graph ub512"; tn 70 q3.gguf --ubatch 512 --trials 1 --time 5 --attention-kv 0 --graph-time 50 --graph-tokens 512 --db t3.sled
t "3B graph ub64"; tn 50 q3.gguf --ubatch 64 --trials 1 --time 5 --attention-kv 0 --graph-time 35 --graph-tokens 512 --db t3.sled
t "0.5B graph ub512"; tn 40 q05.gguf --ubatch 512 --trials 1 --time 3 --attention-kv 0 --graph-time 25 --graph-tokens 512 --db t05.sled
t "0.5B graph ub64"; tn 35 q05.gguf --ubatch 64 --trials 1 --time 3 --attention-kv 0 --graph-time 20 --graph-tokens 512 --db t05.sled
grep -E "^graph: ubatch .*(uses it|at ubatch)" $L | head
$R db export -o $OUT/tuned-3b-n.jsonl --db t3.sled > /dev/null 2>&1; $R db export -o $OUT/tuned-05b-n.jsonl --db t05.sled > /dev/null 2>&1
t "llama.cpp round 1"; for m in q3 q05; do lb -m $m.gguf -p 512,4096 -ub 512 -r 3; lb -m $m.gguf -p 512 -ub 64 -r 3; done
t "rocky round 1"; for m in q3:t3 q05:t05; do f=${m%%:*}.gguf; d=${m##*:}.sled; rb $f -p 512,4096 -ub 512 -r 3 --backends tuned,default --db $d; rb $f -p 512 -ub 64 -r 3 --backends tuned,default --db $d; done
t "overlap A/B at ubatch 64, 3B tuned"; echo "4 sets: $(ROCKY_OVERLAP_SETS=4 rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled)"; echo "off: $(ROCKY_OVERLAP=0 rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled)"
t "profiles"; prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled; prof 3b-pp4096-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db t3.sled
t "bench-gemm"; timeout 150 $R bench-gemm --db t3.sled --md > $OUT/bench-gemm.md 2>&1; echo "rc $?"; grep -E "ceiling|\| 512" $OUT/bench-gemm.md | cut -d'|' -f2-5,7-9
t "rocky round 2"; for m in q3:t3 q05:t05; do f=${m%%:*}.gguf; d=${m##*:}.sled; rb $f -p 512,4096 -ub 512 -r 3 --backends tuned,default --db $d; rb $f -p 512 -ub 64 -r 3 --backends tuned,default --db $d; done
t "llama.cpp round 2"; for m in q3 q05; do lb -m $m.gguf -p 512,4096 -ub 512 -r 3; lb -m $m.gguf -p 512 -ub 64 -r 3; done
t done
