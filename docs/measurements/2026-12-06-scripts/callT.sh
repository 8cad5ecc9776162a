# Call T (2026-12-06, third session): one round of the current decode (Q/K/V stacked, d03d828)
# against llama.cpp tg128, then a wide cold sweep of the decode GEMVs' search space (which
# schedules reach the copy bandwidth), as JSON for the analysis.
# Run: OUT=$OUT bash .device/callT.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json ${ARGS:-} 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'step', d.get('decode_step_ms'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q05 8; gen warm q3 8
for m in q05 q3; do
  t "round 1 $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen $m-d0 $m 8; gen $m-d2048 $m 2048
done
t "sweep 3B"
timeout 260 $R bench-gemv --shapes 3B --formats Q4_K,Q6_K --sweep 120 --runs 5 --json > $OUT/sweep3b.json 2>$OUT/sweep3b.err; echo rc $?
t "sweep 0.5B"
timeout 150 $R bench-gemv --shapes 0.5B --sweep 60 --runs 5 --json > $OUT/sweep05.json 2>$OUT/sweep05.err; echo rc $?
t done
