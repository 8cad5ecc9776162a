# Call BB (2026-12-06, fifth session): (1) the vocabulary projection's GEMV cold, default against
# a seeded sweep and int8 (bench-gemv --shapes output); (2) tg128 at depth 0 and 2048, 0.5B and 3B
# Q4_K_M, rocky (split attention at one piece runs its un-split twin: new default; and
# ROCKY_SINGLE_PIECE=0) against llama.cpp, two interleaved rounds; (3) agent turns with 128-token
# replies against llama-server; (4) issue 34: json_schema vs unconstrained decode (serve-agents --speed).
# Run: OUT=$OUT bash .device/callBB.sh, carry [".gl", ".device"].
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  ROCKY_DB=/tmp/none.sled timeout 90 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-26s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:6])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
{
t "bench-gemv output"
$R bench-gemv --shapes output --formats Q6_K,Q8_0 --int8 --norm --sweep 24 --runs 5 --md 2>&1 | grep -E "^\|" | sort -t'|' -k9 -g | head -70
gen warm q05 8; gen warm q3 8
for r in 1 2; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0 twin" $m 8; ROCKY_SINGLE_PIECE=0 gen "$m d0 split" $m 8
  gen "$m d2048 twin" $m 2048; ROCKY_SINGLE_PIECE=0 gen "$m d2048 split" $m 2048
done; done
for m in q05 q3; do
  t "agent turns $m"; cd $ROOT; MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 120 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$m /tmp/$m.gguf > /tmp/turns-$m.log 2>&1; echo "rc $?"
  cat /tmp/turns-$m/rocky.md /tmp/turns-$m/llama.md 2>/dev/null; cp /tmp/turns-$m/turns.jsonl $OUT/turns-$m.jsonl 2>/dev/null; cd /tmp
done
t "issue 34"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 90 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; tail -14 $OUT/speed.txt
kill $SP
t done
} 2>&1 | tee $OUT/log.txt
