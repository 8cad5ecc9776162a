# Call O (2026-12-05e): the decode GEMVs with the RMSNorm folded in, quantized weights dotted
# before scaling (dot_first) and Q4_K read with 16-byte loads (quad_loads), against the binary
# before them (main at 19:36, the same decode path as 2822804) and llama.cpp: decode tg128 at
# depth 0 and 2048, 0.5B and 3B Q4_K_M, new / new without the norm fold
# (ROCKY_FUSE=swiglu,residual, depth 0) / old, two interleaved rounds after a warm-up run each;
# between the rounds bench-gemv cold, new (default; --norm: folded rows; custom*: dot_first
# without quad loads at the old default's tiles) and old.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callO.sh, carry [".gl", ".device"] (SHORT=1: one round).
xz -dc .device/rocky.xz > .device/rocky; xz -dc .device/rocky-old.xz > /tmp/rocky-old; chmod +x /tmp/rocky-old
source .device/common.sh
t start
gen() { # LABEL BIN MODEL PROMPT_TOKENS [ENV...]
  l=$1 bin=$2 m=$3 n=$4; shift 4
  env "$@" ROCKY_DB=/tmp/none.sled timeout 40 $bin generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], ' '.join('%s %.3f' % kv for kv in d['decode_step_ms'].items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:8])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
round() {
  for m in q05 q3; do
    t "round $1 $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0-new $R $m 8; gen $m-d0-nofold $R $m 8 ROCKY_FUSE=swiglu,residual; gen $m-d0-old /tmp/rocky-old $m 8
    gen $m-d2048-new $R $m 2048; gen $m-d2048-old /tmp/rocky-old $m 2048
  done
}
t warm; for m in q05 q3; do gen warm-new $R $m 8; gen warm-old /tmp/rocky-old $m 8; done
round 1
t gemv
dfonly='{"gemv":{"threads":64,"cols":2,"chunks_per_thread":8,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32","dot_first":true}}'
timeout 100 $R bench-gemv --runs 5 --norm --schedule "$dfonly" --json > $OUT/gemv-new.json 2>&1
timeout 60 /tmp/rocky-old bench-gemv --runs 5 --json > $OUT/gemv-old.json 2>&1
python3 - <<'PY' $OUT/gemv-old.json $OUT/gemv-new.json
import json,sys
o=json.load(open(sys.argv[1])); n=json.load(open(sys.argv[2]))
print('copy GB/s old run %.0f new run %.0f' % (o['copy_gbps'], n['copy_gbps']))
old={(r['model'],r['role'],r['weight']):r for r in o['rows'] if r['variant']=='default'}
for r in n['rows']:
    p=old.get((r['model'],r['role'],r['weight']))
    if p: print(r['model'], r['role'], r['weight'], r['variant'], 'cold us old %.1f new %.1f' % (p['cold']['median_ms']*1e3, r['cold']['median_ms']*1e3), 'warm old %.1f new %.1f' % (p['warm']['median_ms']*1e3, r['warm']['median_ms']*1e3), 'of copy %.0f%% -> %.0f%%' % (p['percent_of_copy'], r['percent_of_copy']))
PY
[ -z "${SHORT:-}" ] && round 2
t done
