# Call B (2026-12-03, session 3): split GEMMs whose last group per tile reduces (no reduce
# kernel; the new default) against fd15661 (levelled recording, separate reduce) as
# .device/rocky-old; then tuned tables for both models at ubatch 512 and 64 (the 3B's ubatch-64
# database of call A imported and searched further).
source .device/common.sh
OLD=$D/rocky-old; chmod +x $OLD
rbo() { $OLD bench "$@" --md 2>&1 | grep -E "^\| qwen"; }
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "defaults: old (separate reduce) / new (last group reduces)"
for i in 1 2; do
  rbo q3.gguf -p 512 -ub 512,64 -r 3 --backends default | sed "s/^/old /"
  rb q3.gguf -p 512 -ub 512,64 -r 3 --backends default | sed "s/^/new /"
done
rb q3.gguf -p 4096 -ub 512 -r 3 --backends default | sed "s/^/new /"
rbo q05.gguf -p 512 -ub 512,64 -r 3 --backends default | sed "s/^/old /"
rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default | sed "s/^/new /"; rb q05.gguf -p 512 -ub 64 -r 3 --backends default | sed "s/^/new /"
prof 3b-ub64-default q3.gguf --token-ids $IDS --ubatch 64
t "correctness: 0.5B 72 tokens at ubatch 64 (a split prefill and a partial ubatch): GPU new, GPU old, CPU reference"
IDS72=$(echo $IDS | cut -d, -f1-72)
for b in "$R prefill q05.gguf --ubatch 64" "$OLD prefill q05.gguf --ubatch 64" "$R prefill q05.gguf --backend cpu"; do $b --token-ids $IDS72 2>&1 | sed -n 2,5p | tr -s ' ' | tr '\n' ';'; echo; done
t "tune 3B ub512"; timeout 130 $R tune q3.gguf --ubatch 512 --trials 30 --time 110 --graph-time 0 --db t3.sled > $OUT/tune3-512.txt 2>&1; tail -12 $OUT/tune3-512.txt
t "tune 3B ub64 (call A's db imported)"; $R db import $D/tuned3-64-h200.jsonl --db t3.sled 2>&1 | tail -1
timeout 110 $R tune q3.gguf --ubatch 64 --trials 60 --time 95 --graph-time 0 --attention-kv 128,512 --db t3.sled > $OUT/tune3-64.txt 2>&1; tail -12 $OUT/tune3-64.txt
t "tune 0.5B ub512+64"; timeout 60 $R tune q05.gguf --ubatch 512 --trials 16 --time 50 --graph-time 0 --db t05.sled > $OUT/tune05-512.txt 2>&1; tail -3 $OUT/tune05-512.txt
timeout 50 $R tune q05.gguf --ubatch 64 --trials 16 --time 40 --graph-time 0 --attention-kv 128,512 --db t05.sled > $OUT/tune05-64.txt 2>&1; tail -3 $OUT/tune05-64.txt
t "3B tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
t "0.5B tuned"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t05.sled; rb q05.gguf -p 512 -ub 64 -r 3 --backends tuned --db t05.sled
prof 3b-ub64-tuned q3.gguf --token-ids $IDS --ubatch 64 --db t3.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned3-h200.jsonl --db t3.sled > /dev/null 2>&1; $R db export -o $OUT/tuned05-h200.jsonl --db t05.sled > /dev/null 2>&1; t done
