# Call G (2026-12-03, session 2): tiled attention and the vectorized split-K reduce (branch tiled-attn), SwiGLU fusion A/B
source .device/common.sh
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
T='"threads_per_row":1,"stage_kv":true,"lane_reduce":"shuffle"'
for s in '"rows":8,"kv_block":32,"group_heads":true,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":4' \
         '"rows":4,"kv_block":32,"group_heads":true,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":4' \
         '"rows":8,"kv_block":16,"group_heads":true,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
         '"rows":8,"kv_block":32,"group_heads":true,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
         '"rows":4,"kv_block":32,"group_heads":true,"f16_qk":false,"f16_pv":true,"tile_rows":4,"tile_keys":4' \
         '"rows":4,"kv_block":32,"group_heads":true,"f16_qk":false,"f16_pv":false,"tile_rows":4,"tile_keys":4'; do
  echo "schedule {$s}"; timeout 60 $R bench-attention --kv 512,4096 --schedule "{$T,$s}" 2>&1 | grep -E "^ +(512|4096)" | grep -v "default+" 
done
t "tune attention only (3B ub512)"; timeout 120 $R tune q3.gguf --ubatch 512 --workload attention --trials 48 --time 100 --graph-time 0 --db ta.sled > $OUT/tune-attn.txt 2>&1; tail -6 $OUT/tune-attn.txt
t "3B attention-tuned vs default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned,default --db ta.sled
prof 3b-pp4096-attn-tuned q3.gguf --token-ids $IDS4K --ubatch 512 --db ta.sled
prof 3b-pp512-ub64-default q3.gguf --token-ids $IDS --ubatch 64
t "3B ROCKY_FUSE=1 default"; ROCKY_FUSE=1 rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; ROCKY_FUSE=1 rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "3B default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default
t "llama.cpp round 2"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3
$R db export -o $OUT/tuned-attn-h200.jsonl --db ta.sled > /dev/null 2>&1; t done
