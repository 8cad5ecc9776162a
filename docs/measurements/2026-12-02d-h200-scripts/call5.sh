# Call B: tune the 3B file (GEMMs and attention at KV 512 and 4096) at ubatch 512 and 64, then tuned vs llama.cpp
source .device/common.sh
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
t "tune ub512"; timeout 230 $R tune q3.gguf --ubatch 512 --trials 30 --time 200 --graph-time 20 --db t.sled > $OUT/tune512.txt 2>&1; tail -14 $OUT/tune512.txt
t "tune ub64"; timeout 80 $R tune q3.gguf --ubatch 64 --trials 12 --time 60 --graph-time 10 --attention-kv 0 --db t.sled > $OUT/tune64.txt 2>&1; tail -8 $OUT/tune64.txt
t "rocky default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "rocky tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t.sled
prof 3b-pp4096-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db t.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-h200.jsonl --db t.sled > /dev/null 2>&1; t done
