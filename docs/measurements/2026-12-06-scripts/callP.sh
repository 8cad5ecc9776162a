# Call P (2026-12-06): where a decode step's GPU time goes, op by op (`generate --profile`:
# each step recorded with timestamps), 0.5B and 3B Q4_K_M at depth 0 and the 3B at 2048; decode
# tg128 against llama.cpp (new binary with the folded norm, and without it), interleaved rounds;
# the 3B's decode at depth 2048 and 8192 with f16 and q8_0 KV caches (issue 37); bench-gemv with
# dot_first and quad_loads at the default tiles (new: RoPE folded into the KV write and split-KV pieces merged in their last piece; nofc: separate combine; norope: neither; nofold: nor the norm fold), then a seeded sweep of 16 schedules per 3B GEMV,
# cold. Run: OUT=$OUT bash .device/callP.sh, carry [".gl", ".device"] (ROUNDS=n, default 2).
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV/ARGS...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 8448 --json ${ARGS:-} 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], ' '.join('%s %.3f' % kv for kv in d['decode_step_ms'].items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:6])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
for m in q05 q3; do ROCKY_DB=/tmp/none.sled timeout 60 $R generate $m.gguf --token-ids $(ids 8) -n 17 --temp 0 --profile > $OUT/profile-$m-d0.txt 2>&1; done
ROCKY_DB=/tmp/none.sled timeout 60 $R generate q3.gguf --token-ids $(ids 2048) -n 17 --temp 0 --ctx 4096 --profile > $OUT/profile-q3-d2048.txt 2>&1
t profiles
for f in $OUT/profile-*.txt; do echo "== $f"; grep -E "^(decode|GPU time|attention:)" $f; head -40 $f | grep -E "^[a-z_.]+ +[0-9]+ +[0-9.]+" | head -14; done
gen warm q05 8; gen warm q3 8
round() {
  for m in q05 q3; do
    t "round $1 $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0 $m 8; gen $m-d0-nofc $m 8 ROCKY_FUSED_COMBINE=0; gen $m-d0-norope $m 8 ROCKY_FUSE=swiglu,residual,norm ROCKY_FUSED_COMBINE=0; gen $m-d0-nofold $m 8 ROCKY_FUSE=swiglu,residual ROCKY_FUSED_COMBINE=0; gen $m-d2048 $m 2048; gen $m-d2048-nofc $m 2048 ROCKY_FUSED_COMBINE=0
  done
}
for r in $(seq 1 ${ROUNDS:-2}); do round $r; done
t kv
[ -n "${NOKV:-}" ] || for d in 2048 8192; do for ty in f16 q8_0; do ARGS="--cache-type-k $ty --cache-type-v $ty" gen q3-kv$ty-d$d q3 $d; done; done
t gemv
dfonly='{"gemv":{"threads":64,"cols":2,"chunks_per_thread":8,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32","dot_first":true}}'
quads='{"gemv":{"threads":64,"cols":2,"chunks_per_thread":8,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32","quad_loads":true}}'
if [ -z "${NOGEMV:-}" ]; then
timeout 90 $R bench-gemv --runs 5 --norm --schedule "$dfonly" --md > $OUT/gemv-df.md 2>&1
timeout 60 $R bench-gemv --runs 5 --schedule "$quads" --md > $OUT/gemv-quads.md 2>&1
fi
t sweep
if [ -z "${NOSWEEP:-}" ]; then
timeout 170 $R bench-gemv --runs 5 --shapes 3B --formats Q4_K,Q6_K --sweep 16 --json > $OUT/gemv-sweep.json 2>$OUT/gemv-sweep.err
python3 - <<'PY' $OUT/gemv-sweep.json > $OUT/sweep-best.txt
import json,sys
d=json.load(open(sys.argv[1])); print('copy GB/s %.0f' % d['copy_gbps'])
by={}
for r in d['rows']: by.setdefault((r['model'],r['role'],r['weight']),[]).append(r)
for k,rows in by.items():
    dflt=[r for r in rows if r['variant']=='default'][0]
    rows.sort(key=lambda r: r['cold']['median_ms'])
    print(*k, 'default %.1f us %.0f%%' % (dflt['cold']['median_ms']*1e3, dflt['percent_of_copy']))
    for r in rows[:4]: print('   best %.1f us %.0f%%' % (r['cold']['median_ms']*1e3, r['percent_of_copy']), json.dumps(r['schedule']))
PY
cat $OUT/sweep-best.txt
fi
t done
