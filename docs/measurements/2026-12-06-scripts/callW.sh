# Call W (2026-12-06, third session): the new desktop GEMV default (128 threads, chunks filling
# them, dot-first) against llama.cpp tg128 (one round, to confirm call V's "new+dot" is what the
# default now runs), then the agent turns (6 turns to ~3k tokens, 128-token replies, ignore_eos
# now accepted by rocky serve) against llama-server with its prompt cache, 0.5B and 3B.
# Run: OUT=$OUT bash .device/callW.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ENV...]
  l=$1 m=$2 n=$3; shift 3
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-14s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q05 8; gen warm q3 8
for m in q3 q05; do
  t "round 1 $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0" $m 8; gen "$m d2048" $m 2048
done
for m in q05 q3; do
  t "agent turns $m"; cd $ROOT; MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 150 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$m /tmp/$m.gguf > /tmp/turns-$m.log 2>&1; echo "rc $?"
  cat /tmp/turns-$m/rocky.md /tmp/turns-$m/llama.md 2>/dev/null; cp /tmp/turns-$m/turns.jsonl $OUT/turns-$m.jsonl 2>/dev/null; tail -5 /tmp/turns-$m.log; cd /tmp
done
t done
