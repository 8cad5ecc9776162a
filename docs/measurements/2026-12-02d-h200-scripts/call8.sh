# Call C: the new packed-f16 default rule (8x8 tiles, fold per slab) against the old one, both models
source .device/common.sh
RO=$D/rocky-old; chmod +x $RO
rbo() { $RO bench "$@" --md 2>&1 | grep -E "^\| qwen"; }
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
for round in 1 2; do
  t "old rule round $round"; rbo q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rbo q3.gguf -p 512 -ub 64 -r 3 --backends default
  t "new rule round $round"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
done
t "0.5B old"; rbo q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rbo q05.gguf -p 512 -ub 64 -r 3 --backends default
t "0.5B new"; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
prof 3b-pp512-new q3.gguf --token-ids $IDS --ubatch 512
prof 3b-ub64-new q3.gguf --token-ids $IDS --ubatch 64
prof 3b-pp4096-new q3.gguf --token-ids $IDS4K --ubatch 512
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; t done
