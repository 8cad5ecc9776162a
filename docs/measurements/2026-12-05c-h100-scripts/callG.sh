# Call G (2026-12-05c): decode with the step recorded once and replayed (default) against
# recording every step (ROCKY_DECODE_REPLAY=0) and llama.cpp's tg128, 0.5B and 3B Q4_K_M, depth
# 0 and 2048, three interleaved rounds; where a replayed step's time goes.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callG.sh, carry [".gl", ".device"].
source .device/common.sh
gen() { # LABEL MODEL PROMPT_TOKENS ENV...
  l=$1 m=$2 n=$3; shift 3
  env "$@" ROCKY_DB=/tmp/none.sled timeout 90 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen-$l.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'prefill %.0f tok/s' % d['prefill_tokens_per_second'], 'decode %.1f tok/s' % d['decode_tokens_per_second'], ' '.join('%s %.3f' % kv for kv in d['decode_step_ms'].items()), 'disp', d.get('decode_dispatches_per_step'), 'ids', d['token_ids'][:6])" || echo "$l failed: $(tail -2 $OUT/gen-$l.err)"
}
t start
for round in 1 2 3; do
  for m in q05 q3; do
    t "round $round $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0 $m 8; gen $m-d2048 $m 2048
    [ $round = 1 ] && { gen $m-d0-norep $m 8 ROCKY_DECODE_REPLAY=0; gen $m-d0-nofuse $m 8 ROCKY_FUSE=residual; gen $m-d2048-norep $m 2048 ROCKY_DECODE_REPLAY=0; }
  done
done
t "one-token prefill profile"
ROCKY_DB=/tmp/none.sled $R prefill q05.gguf --token-ids $(ids 1) --ubatch 1 --profile > $OUT/profile-q05-1tok.txt 2>&1
ROCKY_DB=/tmp/none.sled $R prefill q3.gguf --token-ids $(ids 1) --ubatch 1 --profile > $OUT/profile-q3-1tok.txt 2>&1
t done
