# Call C (2026-12-03, session 3): the session's final binary (levelled recording, split-K
# scratch per sibling, separate reduce as the default, tiled attention seeded into the tuner):
# defaults and tuned for both models against llama.cpp. The 3B's ubatch-64 kernels come from
# call A's database (imported), the rest is tuned here. Few output files (the device returns 8).
source .device/common.sh
L=$OUT/tune-logs.txt
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "defaults"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
t "tune 3B ub512"; echo "== tune 3B ub512" >> $L; timeout 135 $R tune q3.gguf --ubatch 512 --trials 30 --time 115 --graph-time 0 --db t3.sled >> $L 2>&1; tail -11 $L
t "3B ub64: call A's db"; $R db import $D/tuned3-64-h200.jsonl --db t3.sled 2>&1 | tail -1
t "tune 0.5B ub512, ub64"; echo "== tune 0.5B ub512" >> $L; timeout 60 $R tune q05.gguf --ubatch 512 --trials 16 --time 50 --graph-time 0 --db t05.sled >> $L 2>&1; tail -3 $L
echo "== tune 0.5B ub64" >> $L; timeout 50 $R tune q05.gguf --ubatch 64 --trials 16 --time 40 --graph-time 0 --attention-kv 128,512 --db t05.sled >> $L 2>&1; tail -3 $L
t "3B tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t3.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t3.sled
t "0.5B tuned"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t05.sled; rb q05.gguf -p 512 -ub 64 -r 3 --backends tuned --db t05.sled
prof 3b-pp4096-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db t3.sled
prof 3b-pp512-tuned q3.gguf --token-ids $IDS --ubatch 512 --db t3.sled
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-3b-h200.jsonl --db t3.sled > /dev/null 2>&1; t done
