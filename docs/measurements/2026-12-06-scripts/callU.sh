# Call U (2026-12-06, third session): which GEMV schedule options speed a whole decode step on
# this card. Per-GEMV sweeps mislead here (call T: an H100's clocks fall between a sweep's rows,
# later rows 2-4x slower than the same schedules early), so every option is set on all the
# step's GEMVs at once (ROCKY_GEMV_SCHEDULE, where the patched schedule is valid) and timed as
# decode tok/s, greedy, same tokens expected; two interleaved rounds, llama.cpp tg128 in each.
# Run: OUT=$OUT bash .device/callU.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-28s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'wait %.3f ms' % s.get('wait',0), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
V=(
 'default|'
 'quad|{"quad_loads":true}'
 'dot|{"dot_first":true}'
 'quad+dot|{"quad_loads":true,"dot_first":true}'
 't128|{"threads":128}'
 't256|{"threads":256}'
 't32-onesg|{"threads":32,"reduce":"one_subgroup"}'
 'u2|{"units_per_thread":2}'
 'u2+quad|{"units_per_thread":2,"quad_loads":true}'
 'f16|{"math":"fma_f16_packed"}'
 'int8|{"math":"int8_dot","vector_width":1}'
 'c1|{"cols":1}'
 'v1|{"vector_width":1}'
)
gen warm q05 8; gen warm q3 8
for r in 1 2; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -r 2
  for v in "${V[@]}"; do
    name=${v%%|*} patch=${v#*|}
    if [ -z "$patch" ]; then gen "$m $name" $m 8; else gen "$m $name" $m 8 ROCKY_GEMV_SCHEDULE="$patch"; fi
  done
done; done
t done
