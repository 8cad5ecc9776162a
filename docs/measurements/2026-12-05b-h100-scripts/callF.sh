# Call F (2026-12-05b): where a decode step's time goes on this host (rocky generate's new
# decode_step_ms: executor wall, setup before the first dispatch, recording + submitting,
# waiting for the GPU, logits readback), 0.5B at depth 8 and 2048, and a one-token
# prefill profile (GPU time per op against wall time).
# Run: OUT=$OUT bash .device/callF.sh, carry [".gl", ".device"].
source .device/common.sh
gen() { # LABEL MODEL PROMPT_TOKENS ENV...
  l=$1 m=$2 n=$3; shift 3
  env "$@" ROCKY_DB=/tmp/none.sled timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen-$l.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], ' '.join('%s %.3f' % kv for kv in d['decode_step_ms'].items()), 'dispatches', d['decode_dispatches_per_step'])" || echo "$l failed: $(tail -2 $OUT/gen-$l.err)"
}
for m in q05; do t $m; lb -m $m.gguf -p 0 -n 128 -r 2; gen $m-d8 $m 8; gen $m-d2048 $m 2048; gen $m-d8-fuse $m 8 ROCKY_FUSE=1; gen $m-d8b $m 8; done
for m in q05; do t "$m one-token prefill profile"
  ROCKY_DB=/tmp/none.sled $R prefill $m.gguf --token-ids $(ids 1) --ubatch 1 --profile > $OUT/profile-$m-1tok.txt 2>&1; grep -iE "wall|busy|kernels|dispatch" $OUT/profile-$m-1tok.txt | head -12; done
t done
