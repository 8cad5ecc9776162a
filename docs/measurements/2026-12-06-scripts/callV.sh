# Call V (2026-12-06, third session): the desktop GEMV default of 128 threads (chunks per
# thread filling them in one step) against the previous default (64 threads; rocky-old = 28740ef,
# with ROCKY_GEMV_SCHEDULE support), and with dot_first patched in, against llama.cpp
# tg128 at depth 0 and 2048, 0.5B and 3B Q4_K_M, three interleaved rounds; then the agent
# turns (6 turns to ~3k tokens, 128-token replies) of the new default against llama-server.
# Run: OUT=$OUT bash .device/callV.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
xz -dc .device/rocky-old.xz > .device/rocky-old; chmod +x .device/rocky-old
export NEED_Q3=1
source .device/common.sh
OLD=$D/rocky-old
t start
gen() { # LABEL BINARY MODEL PROMPT_TOKENS [ENV...]
  l=$1 b=$2 m=$3 n=$4; shift 4
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $b generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-22s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm $R q05 8; gen warm $R q3 8
for r in 1 2 3; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0 old" $OLD $m 8
  gen "$m d0 new" $R $m 8
  gen "$m d0 new+dot" $R $m 8 ROCKY_GEMV_SCHEDULE='{"dot_first":true}'
  gen "$m d2048 old" $OLD $m 2048
  gen "$m d2048 new" $R $m 2048
done; done
for m in q05 q3; do
  t "agent turns $m"; cd $ROOT; MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 110 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$m /tmp/$m.gguf > /tmp/turns-$m.log 2>&1; echo "rc $?"
  cat /tmp/turns-$m/rocky.md /tmp/turns-$m/llama.md 2>/dev/null; cp /tmp/turns-$m/turns.jsonl $OUT/turns-$m.jsonl 2>/dev/null; cd /tmp
done
t done
