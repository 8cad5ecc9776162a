# Call E (2026-12-03): main after the merge (a042c92 + test fix): default and tuned, both models, against llama.cpp
source .device/common.sh
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "0.5B default"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
t "3B default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "tune 3B ub512"; timeout 185 $R tune q3.gguf --ubatch 512 --trials 30 --time 150 --graph-time 20 --db t3.sled > $OUT/tune3-512.txt 2>&1; tail -4 $OUT/tune3-512.txt
t "tune 3B ub64"; timeout 75 $R tune q3.gguf --ubatch 64 --trials 12 --time 50 --graph-time 10 --attention-kv 0 --db t3.sled > $OUT/tune3-64.txt 2>&1; tail -3 $OUT/tune3-64.txt
t "tune 0.5B ub512"; timeout 75 $R tune q05.gguf --ubatch 512 --trials 20 --time 50 --graph-time 10 --db t05.sled > $OUT/tune05-512.txt 2>&1; tail -3 $OUT/tune05-512.txt
t "tune 0.5B ub64"; timeout 35 $R tune q05.gguf --ubatch 64 --trials 10 --time 20 --graph-time 5 --attention-kv 0 --db t05.sled > $OUT/tune05-64.txt 2>&1; tail -3 $OUT/tune05-64.txt
t "3B tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
t "0.5B tuned"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t05.sled; rb q05.gguf -p 512 -ub 64 -r 3 --backends tuned --db t05.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned3-h200.jsonl --db t3.sled > /dev/null 2>&1; $R db export -o $OUT/tuned05-h200.jsonl --db t05.sled > /dev/null 2>&1; t done
