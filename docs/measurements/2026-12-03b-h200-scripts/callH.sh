# Call H (2026-12-03, session 2): tiled attention shapes for a default rule (3B and 0.5B shapes, m 512 and 64); does a longer tuner warm-up fix its attention timings?
source .device/common.sh
T='"threads_per_row":1,"stage_kv":true,"lane_reduce":"shuffle","group_heads":true'
ba() { args=$1; shift; for s in "$@"; do echo "schedule {$s}"; timeout 60 $R bench-attention $args --schedule "{$T,$s}" 2>&1 | grep -E "^ +[0-9]+ " | grep -v "default+"; done; }
t "3B m512"; ba "--kv 512,4096" \
  '"rows":8,"kv_block":16,"f16_qk":false,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
  '"rows":8,"kv_block":16,"f16_qk":false,"f16_pv":false,"tile_rows":4,"tile_keys":2' \
  '"rows":8,"kv_block":32,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
  '"rows":8,"kv_block":16,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":1'
t "3B m64"; ba "--m 64 --kv 64,512" \
  '"rows":2,"kv_block":32,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
  '"rows":4,"kv_block":32,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
  '"rows":4,"kv_block":16,"f16_qk":false,"f16_pv":true,"tile_rows":4,"tile_keys":2'
t "0.5B m512"; ba "--heads 14 --kv-heads 2 --head-dim 64 --kv 512,4096" \
  '"rows":8,"kv_block":16,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":2' \
  '"rows":8,"kv_block":32,"f16_qk":true,"f16_pv":true,"tile_rows":4,"tile_keys":4' \
  '"rows":8,"kv_block":16,"f16_qk":false,"f16_pv":true,"tile_rows":4,"tile_keys":2'
t "tune attention only, 200 ms warm-up"; timeout 120 $R tune q3.gguf --ubatch 512 --workload attention --trials 48 --time 100 --graph-time 0 --warmup-ms 200 --db tb.sled > $OUT/tune-attn-w200.txt 2>&1; tail -4 $OUT/tune-attn-w200.txt
t "3B attention-tuned (200 ms warm-up) vs default"; rb q3.gguf -p 4096 -ub 512 -r 2 --backends tuned,default --db tb.sled; t done
