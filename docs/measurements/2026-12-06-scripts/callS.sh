# Call S (for the next session with device time): the decode with Q/K/V stacked (a118922) against
# llama.cpp's tg128 at depth 0 and 2048, 0.5B and 3B Q4_K_M, three interleaved rounds, with the
# stack on (default) and off (ROCKY_FUSE without stack) in every round; then the cold GEMV sweep
# of both models' decode GEMVs (bench-gemv --sweep), which says how far the default GEMVs are from
# the template's best and from the copy bandwidth.
# Run: OUT=$OUT bash .device/callS.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json ${ARGS:-} 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
NOSTACK=ROCKY_FUSE=swiglu,residual,norm,rope
gen warm q05 8; gen warm q3 8
for r in 1 2 3; do for m in q05 q3; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen $m-d0 $m 8; gen $m-d2048 $m 2048
  # The 3B's norm is not folded by default (hidden 2048 > 1024): keep it so without the stack.
  if [ $m = q3 ]; then gen $m-d0-nostack $m 8 ROCKY_FUSE=swiglu,residual,rope; else gen $m-d0-nostack $m 8 $NOSTACK; fi
done; done
t sweep
[ -n "${NOSWEEP:-}" ] || timeout 300 $R bench-gemv --sweep 24 --md 2>&1 | tail -80
t done
