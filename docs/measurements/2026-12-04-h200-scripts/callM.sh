# Call M (2026-12-04): the overlap depth rule at 512 rows in flight (8 sets of 64) as the
# default, against llama.cpp; bench-gemm's tuned rows with the clocks settled before timing.
source .device/common.sh
$R db import $D/tuned-3b-k.jsonl --db t3.sled 2>&1 | tail -1; $R db import $D/tuned-05b-k.jsonl --db t05.sled 2>&1 | tail -1
t "llama.cpp round 1"; for m in q3 q05; do lb -m $m.gguf -p 512 -ub 512 -r 3; lb -m $m.gguf -p 512 -ub 64 -r 3; done
t "rocky round 1"; for m in q3:t3 q05:t05; do f=${m%%:*}.gguf; d=${m##*:}.sled; rb $f -p 512 -ub 512,64 -r 3 --backends tuned,default --db $d; done
t "profile"; prof 3b-ub64-tuned q3.gguf --token-ids $IDS --ubatch 64 --db t3.sled; echo "tuned GEMM rows: $(grep -c ' tuned ' $OUT/profile-3b-ub64-tuned.txt)"
t "bench-gemm"; timeout 150 $R bench-gemm --db t3.sled --md > $OUT/bench-gemm.md 2>&1; echo "rc $?"; grep -E "ceiling|\| 512" $OUT/bench-gemm.md | cut -d'|' -f2-5,7-9
t "rocky round 2"; for m in q3:t3 q05:t05; do f=${m%%:*}.gguf; d=${m##*:}.sled; rb $f -p 512 -ub 512,64 -r 3 --backends tuned,default --db $d; done
t "llama.cpp round 2"; for m in q3 q05; do lb -m $m.gguf -p 512 -ub 512 -r 3; lb -m $m.gguf -p 512 -ub 64 -r 3; done
t done
