# Call D: the final rule on both models, then tune the 3B file (GEMMs, attention at KV 512 and 4096) at ubatch 512 and 64
source .device/common.sh
RO=$D/rocky-old; chmod +x $RO
rbo() { $RO bench "$@" --md 2>&1 | grep -E "^\| qwen"; }
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "0.5B old rule"; rbo q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rbo q05.gguf -p 512 -ub 64 -r 3 --backends default
t "0.5B final rule"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
t "3B final rule"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "tune ub512"; timeout 240 $R tune q3.gguf --ubatch 512 --trials 30 --time 200 --graph-time 20 --db t.sled > $OUT/tune512.txt 2>&1; tail -16 $OUT/tune512.txt
t "tune ub64"; timeout 80 $R tune q3.gguf --ubatch 64 --trials 12 --time 55 --graph-time 10 --attention-kv 0 --db t.sled > $OUT/tune64.txt 2>&1; tail -6 $OUT/tune64.txt
t "rocky tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t.sled
prof 3b-pp4096-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db t.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-h200.jsonl --db t.sled > /dev/null 2>&1; t done
