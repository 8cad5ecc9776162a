# Call BJ (2026-12-06, seventh session): the replayed decode step ordered by counters instead of
# barriers (ROCKY_DECODE_CHAIN=1, rocky_compiler::ir::chain) against barriers (=0), 3B and 0.5B
# Q4_K_M, interleaved rounds with llama.cpp's tg128 beside; the greedy tokens must be the same
# either way; the barrier-free bound (ROCKY_DIAG_UNORDERED=1, wrong results) in round 1; agent
# turns with counters against llama-server; depth 2048 last. Ordered by priority (the device
# budget was short: whatever ran before a timeout comes back).
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
CHAIN_BAD=0
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  # counters that hang (a wait never met) would eat the call: after one failure, skip them
  case "$l" in *counters*|*chain=1*) [ $CHAIN_BAD = 1 ] && { echo "$l skipped (counters failed before)"; return; }; lim=40;; *) lim=90;; esac
  ROCKY_DB=/tmp/none.sled timeout $lim $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-26s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'ids', d['token_ids'][:4], 'sum', sum(d['token_ids']))" || { echo "$l failed: $(tail -2 $OUT/gen.err)"; case "$l" in *counters*|*chain=1*) CHAIN_BAD=1;; esac; }
  grep -h warning $OUT/gen.err | head -2
}
round() {
  t "round $1"; lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for m in q3 q05; do
    ROCKY_DECODE_CHAIN=0 gen "$m d0 barriers" $m 8
    ROCKY_DECODE_CHAIN=1 gen "$m d0 counters" $m 8
    [ $1 = 1 ] && ROCKY_DIAG_CHAIN_COHERENT_MODEL=1 ROCKY_DECODE_CHAIN=1 gen "$m d0 counters coh-weights" $m 8
    [ $1 = 1 ] && ROCKY_DIAG_UNORDERED=1 ROCKY_DECODE_CHAIN=0 gen "$m d0 unordered" $m 8
  done
}
{
gen warm q05 8; gen warm q3 8
round 1
for m in q3 q05; do
  [ $CHAIN_BAD = 1 ] && break
  t "agent turns $m (counters)"; cd $ROOT; ROCKY_DECODE_CHAIN=1 MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 110 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$m /tmp/$m.gguf > /tmp/turns-$m.log 2>&1; echo "rc $?"
  cat /tmp/turns-$m/rocky.md /tmp/turns-$m/llama.md 2>/dev/null; cp /tmp/turns-$m/turns.jsonl $OUT/turns-$m.jsonl 2>/dev/null; cd /tmp
done
round 2
round 3
t "depth 2048"
lb -m q3.gguf -p 0 -n 128 -d 2048 -r 2; lb -m q05.gguf -p 0 -n 128 -d 2048 -r 2
for m in q3 q05; do for c in 0 1; do ROCKY_DECODE_CHAIN=$c gen "$m d2048 chain=$c" $m 2048; done; done
t "issue 34: json_schema vs unconstrained decode (serve-agents --speed 10, 0.5B, barriers then counters)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
for c in 0 1; do
  ROCKY_DECODE_CHAIN=$c ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve$c.log 2>&1 &
  SP=$!
  for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
  cd $ROOT; echo "chain=$c"
  timeout 60 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed$c.txt 2>&1; cut -c1-230 $OUT/speed$c.txt | tail -14
  kill $SP; wait $SP 2>/dev/null; cd /tmp
done
t done
} 2>&1 | tee $OUT/log.txt
