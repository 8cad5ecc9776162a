# Call R (2026-12-06): the decode defaults after calls P and Q (RoPE with the KV write; the
# split-KV pieces merged by the combine kernel; the norm folded only where the hidden width is
# at most 1024) against llama.cpp's tg128 at depth 0 and 2048, 0.5B and 3B Q4_K_M, two
# interleaved rounds; the 3B at depth 2048 and 8192 with f16 and q8_0 caches.
# Run: OUT=$OUT bash .device/callR.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 8448 --json ${ARGS:-} 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q05 8; gen warm q3 8
for r in 1 2; do for m in q05 q3; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen $m-d0 $m 8; gen $m-d2048 $m 2048
done; done
t kv
for d in 2048 8192; do for ty in f16 q8_0; do ARGS="--cache-type-k $ty --cache-type-v $ty" gen q3-kv$ty-d$d q3 $d; done; done
t done
