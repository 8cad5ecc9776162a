# Call AF (2026-12-06, fourth session): the new desktop decode GEMV defaults (int8 for the deep
# down GEMV, the wide gate/up and the vocabulary projection, the norm folded into int8) against
# the previous main (rocky-old: f7868f9 + the patch list), llama.cpp tg128 beside, depth 0 and
# 2048, 0.5B and 3B Q4_K_M, three interleaved rounds; then one --profile of each model.
# Run: OUT=$OUT bash .device/callAF.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
xz -dc .device/rocky-old.xz > .device/rocky-old; chmod +x .device/rocky-old
export NEED_Q3=1
source .device/common.sh
OLD=$D/rocky-old
t start
gen() { # LABEL BIN MODEL PROMPT_TOKENS
  env ROCKY_DB=/tmp/none.sled timeout 60 $2 generate $3.gguf --token-ids $(ids $4) -n 129 --temp 0 --seed 1 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-14s' % '$1', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:5])" || echo "$1 failed: $(tail -2 $OUT/gen.err)"
}
gen warm $R q05 8; gen warm $R q3 8
for r in 1 2 3; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0 old" $OLD $m 8; gen "$m d0 new" $R $m 8
  gen "$m d2048 old" $OLD $m 2048; gen "$m d2048 new" $R $m 2048
done; done
for m in q3 q05; do t "profile $m"; ROCKY_DB=/tmp/none.sled timeout 60 $R generate $m.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | grep -E "^(ffn|output|attn|op )" | cut -c1-120; done
t done
