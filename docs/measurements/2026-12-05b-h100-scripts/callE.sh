# Call E (2026-12-05b): decode again with more repetitions, alternating rocky and llama.cpp
# (call C's llama-bench tg64 spread was ±134 tok/s at depth 0), on the 0.5B and 3B shapes, then
# the agent turns once more with their tables copied flat into OUT.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callE.sh, carry [".gl", ".device"].
source .device/common.sh
gen() { # LABEL MODEL PROMPT_TOKENS ENV...
  l=$1 m=$2 n=$3; shift 3
  env "$@" ROCKY_DB=/tmp/none.sled timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen-$l.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'prefill %.0f tok/s' % d['prefill_tokens_per_second'], 'decode %.1f tok/s' % d['decode_tokens_per_second'])" || echo "$l failed: $(tail -2 $OUT/gen-$l.err)"
}
for round in 1 2 3; do
  for m in q05 q3; do
    t "round $round $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0 $m 8; gen $m-d2048 $m 2048; gen $m-d2048-nosplit $m 2048 ROCKY_KV_SPLITS=0
  done
done
t "agent turns"; cd $ROOT; ROCKY=$R LLAMA=/tmp THREADS=16 timeout 220 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns /tmp/q05.gguf > $OUT/turns.log 2>&1; echo "rc $?"
for f in rocky.md llama.md setup.txt turns.jsonl; do cp /tmp/turns/$f $OUT/turns-$f; done; tail -c 3000 /tmp/turns/rocky-server.log > $OUT/turns-rocky-server.log; cat $OUT/turns-rocky.md $OUT/turns-llama.md; cd /tmp
t done
