# Call Q (2026-12-06): which fusions a decode step should default to on an H100, from call P's
# finding (the fused combine slower; the norm fold +10 % on the 0.5B, -7 % on the 3B): every
# variant with the combine kernel (ROCKY_FUSED_COMBINE=0), all fusions against all but the norm
# fold, the 0.5B and 3B at depth 0, two interleaved rounds. Run: OUT=$OUT bash .device/callQ.sh
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled ROCKY_FUSED_COMBINE=0 "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q05 8; gen warm q3 8
for r in 1 2; do for m in q05 q3; do
  gen $m-all $m 8 ROCKY_FUSE=1; gen $m-nonorm $m 8 ROCKY_FUSE=swiglu,residual,rope
done; done
t done
