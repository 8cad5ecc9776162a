# Call A: fusion modes side by side, attention share at pp4096, the attention schedules
source .device/common.sh
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
for round in 1 2; do for F in 0 residual 1; do
  t "rocky default ROCKY_FUSE=$F round $round"
  ROCKY_FUSE=$F rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; ROCKY_FUSE=$F rb q3.gguf -p 512 -ub 64 -r 3 --backends default
done; done
for F in 0 residual 1; do t "0.5B ROCKY_FUSE=$F"; ROCKY_FUSE=$F rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; ROCKY_FUSE=$F rb q05.gguf -p 512 -ub 64 -r 3 --backends default; done
t "profiles"
for F in 0 residual 1; do ROCKY_FUSE=$F prof 3b-pp512-fuse$F q3.gguf --token-ids $IDS --ubatch 512; ROCKY_FUSE=$F prof 3b-ub64-fuse$F q3.gguf --token-ids $IDS --ubatch 64; done
prof 3b-pp4096 q3.gguf --token-ids $IDS4K --ubatch 512
t "bench-attention"; timeout 150 $R bench-attention --m 512 --kv 512,4096 --sample 12 > $OUT/bench-attention.txt 2>&1; tail -25 $OUT/bench-attention.txt
t "llama.cpp round 2"; lb -m q3.gguf -p 512 -ub 512,64 -r 3; t done
