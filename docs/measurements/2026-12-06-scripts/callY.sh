# Call Y (2026-12-06, third session): with the new GEMV default, does folding the RMSNorm into
# the 3B's GEMVs (hidden 2048; off by default since call P/Q: -4 % then) pay now? Two
# interleaved rounds, 3B depth 0 and 2048, default against ROCKY_FUSE with `norm`.
# Run: OUT=$OUT bash .device/callY.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-16s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'wait %.3f' % s.get('wait',0), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q3 8
for r in 1 2; do
  gen "d0 default" q3 8; gen "d0 norm" q3 8 ROCKY_FUSE=swiglu,residual,norm,rope,stack
  gen "d2048 default" q3 2048; gen "d2048 norm" q3 2048 ROCKY_FUSE=swiglu,residual,norm,rope,stack
done
t done
