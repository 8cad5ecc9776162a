# Call J (2026-12-05c): what lands: decode (replayed step) against llama.cpp's tg128, 0.5B and 3B
# Q4_K_M, depth 0 and 2048, three interleaved rounds after a warm-up generate per file; then the
# agent turns (6 turns to ~3k tokens, a 128-token reply each) against llama-server with its
# prompt cache, on the 0.5B and the 3B.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callJ.sh, carry [".gl", ".device"].
source .device/common.sh
gen() { # LABEL MODEL PROMPT_TOKENS ENV...
  l=$1 m=$2 n=$3; shift 3
  env "$@" ROCKY_DB=/tmp/none.sled timeout 90 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'prefill %.0f tok/s' % d['prefill_tokens_per_second'], 'decode %.1f tok/s' % d['decode_tokens_per_second'], ' '.join('%s %.3f' % kv for kv in d['decode_step_ms'].items()), 'disp', d.get('decode_dispatches_per_step'))" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
t start; gen warm-q05 q05 8; gen warm-q3 q3 8
for round in 1 2 3; do
  for m in q05 q3; do
    t "round $round $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0 $m 8; gen $m-d2048 $m 2048
  done
done
for m in q05 q3; do
  t "agent turns $m"; cd $ROOT; MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 200 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$m /tmp/$m.gguf > /tmp/turns-$m.log 2>&1; echo "rc $?"
  cat /tmp/turns-$m/rocky.md /tmp/turns-$m/llama.md; cp /tmp/turns-$m/turns.jsonl $OUT/turns-$m.jsonl; cd /tmp
done
t done
