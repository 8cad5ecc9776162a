# Call F (2026-12-03, session 2): main with the repack merge; where the 3B's time goes at ubatch 64 and at pp4096
source .device/common.sh
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
t "3B default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
prof 3b-pp512-ub512 q3.gguf --token-ids $IDS --ubatch 512
prof 3b-pp512-ub64 q3.gguf --token-ids $IDS --ubatch 64
prof 3b-pp4096-ub512 q3.gguf --token-ids $IDS4K --ubatch 512
t "bench-attention 3B kv4096"; timeout 90 $R bench-attention --kv 4096 --sample 24 > $OUT/ba-3b-4096.txt 2>&1; tail -8 $OUT/ba-3b-4096.txt
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; t done
