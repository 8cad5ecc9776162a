# Call L (2026-12-04): the final side-by-side measurement on call K's tuning (imported), with
# llama.cpp before and after; overlap depth A/B at ubatch 64; profiles; tuned per-GEMM table
# against the FMA ceiling; llama.cpp's buffer sizes at pp4096 for the memory column.
source .device/common.sh
$R db import $D/tuned-3b-k.jsonl --db t3.sled 2>&1 | tail -1; $R db import $D/tuned-05b-k.jsonl --db t05.sled 2>&1 | tail -1
t "llama.cpp round 1"; for m in q3 q05; do lb -m $m.gguf -p 512,4096 -ub 512 -r 3; lb -m $m.gguf -p 512 -ub 64 -r 3; done
t "rocky round 1"; for m in q3:t3 q05:t05; do f=${m%%:*}.gguf; d=${m##*:}.sled; rb $f -p 512,4096 -ub 512 -r 3 --backends tuned,default --db $d; rb $f -p 512 -ub 64 -r 3 --backends tuned,default --db $d; done
t "overlap depth at ubatch 64, 3B tuned"; for s in 2 4 8; do echo "sets $s: $(ROCKY_OVERLAP_SETS=$s rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled)"; done; echo "off: $(ROCKY_OVERLAP=0 rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled)"
t "profiles"; prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled; prof 3b-ub64-tuned q3.gguf --token-ids $IDS --ubatch 64 --db t3.sled; prof 3b-pp4096-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db t3.sled
t "bench-gemm"; timeout 90 $R bench-gemm --db t3.sled --md > $OUT/bench-gemm.md 2>&1; echo "rc $?"; grep -E "ceiling|tuned" $OUT/bench-gemm.md | head -20
t "llama.cpp buffers at pp4096"; $LB -m q3.gguf -p 4096 -n 0 -ub 512 -r 1 -ngl 99 -v 2>&1 | grep -iE "buffer size|pp4096" | head; $LB -m q05.gguf -p 4096 -n 0 -ub 512 -r 1 -ngl 99 -v 2>&1 | grep -iE "buffer size" | head
t "rocky round 2"; for m in q3:t3 q05:t05; do f=${m%%:*}.gguf; d=${m##*:}.sled; rb $f -p 512,4096 -ub 512 -r 3 --backends tuned,default --db $d; rb $f -p 512 -ub 64 -r 3 --backends tuned,default --db $d; done
t "llama.cpp round 2"; for m in q3 q05; do lb -m $m.gguf -p 512,4096 -ub 512 -r 3; lb -m $m.gguf -p 512 -ub 64 -r 3; done
t done
