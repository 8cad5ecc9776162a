# Call Z (for the next session with device time): main at the end of the 2026-12-06 third
# session (GEMV default t128/dot-first, the norm folded at every width, the one-pass sampler)
# against llama.cpp tg128 at depth 0 and 2048, 0.5B and 3B Q4_K_M, three interleaved rounds,
# greedy and sampled (temperature 0.8, llama.cpp's defaults; llama-bench does not sample, so the
# sampled rows are rocky's only); then the agent turns, greedy and at temperature 0.8, against
# llama-server (ignore_eos keeps the reply lengths equal).
# Run: OUT=$OUT bash .device/callZ.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS TEMP [ENV...]
  l=$1 m=$2 n=$3 temp=$4; shift 4
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp $temp --seed 1 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-16s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q05 8 0; gen warm q3 8 0
for r in 1 2 3; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0" $m 8 0; gen "$m d0 t0.8" $m 8 0.8; gen "$m d2048" $m 2048 0
done; done
for temp in 0 0.8; do for m in q05 q3; do
  t "agent turns $m temperature $temp"; cd $ROOT; TEMPERATURE=$temp MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 150 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$m-$temp /tmp/$m.gguf > /tmp/turns-$m-$temp.log 2>&1; echo "rc $?"
  cat /tmp/turns-$m-$temp/rocky.md /tmp/turns-$m-$temp/llama.md 2>/dev/null; cp /tmp/turns-$m-$temp/turns.jsonl $OUT/turns-$m-$temp.jsonl 2>/dev/null; cd /tmp
done; done
t done
