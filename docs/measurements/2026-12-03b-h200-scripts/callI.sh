# Call I (2026-12-03, session 2): main with tiled attention, the vector split-K reduce and the tuner warm-up fix: default and tuned, both models, against llama.cpp; peak memory of pp4096
source .device/common.sh
mem() { name=$1; shift; nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > $OUT/mem-$name.txt 2>/dev/null & P=$!; "$@" > /dev/null 2>&1; kill $P; echo "$name: idle $(head -1 $OUT/mem-$name.txt) MiB, peak $(sort -n $OUT/mem-$name.txt | tail -1) MiB"; }
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "3B default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "0.5B default"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
t "tune 3B ub512"; timeout 130 $R tune q3.gguf --ubatch 512 --trials 30 --time 110 --graph-time 10 --db t3.sled > $OUT/tune3-512.txt 2>&1; tail -12 $OUT/tune3-512.txt
t "tune 3B ub64"; timeout 50 $R tune q3.gguf --ubatch 64 --trials 10 --time 35 --graph-time 5 --attention-kv 0 --db t3.sled > $OUT/tune3-64.txt 2>&1; tail -3 $OUT/tune3-64.txt
t "tune 0.5B ub512"; timeout 55 $R tune q05.gguf --ubatch 512 --trials 16 --time 40 --graph-time 5 --db t05.sled > $OUT/tune05-512.txt 2>&1; tail -3 $OUT/tune05-512.txt
t "3B tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
t "0.5B tuned"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t05.sled; rb q05.gguf -p 512 -ub 64 -r 3 --backends tuned --db t05.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
prof 3b-pp4096-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db t3.sled
t "peak memory, 3B pp4096 ub512"; mem llama $LB -m q3.gguf -ngl 99 -n 0 -p 4096 -ub 512 -r 1; mem rocky $R bench q3.gguf -p 4096 -ub 512 -r 1 --backends tuned --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned05-h200.jsonl --db t05.sled > /dev/null 2>&1; t done
