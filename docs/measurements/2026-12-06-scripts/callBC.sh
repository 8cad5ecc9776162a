# Call BC (2026-12-06, fifth session): main after this session's decode changes (the un-split
# twin at one piece; the constraint's accept off the critical path): (1) tg128 at depth 0 and 2048,
# 0.5B and 3B Q4_K_M, rocky against llama.cpp, two interleaved rounds (device time); (2) issue 34:
# json_schema vs unconstrained decode (serve-agents --speed 10).
# Run: OUT=$OUT bash .device/callBC.sh, carry [".gl", ".device"].
# (Call BD, its short form when device time ran low, was this script with the 3B, the warm-up
# run of the 3B and round 2 left out; neither ran: the device starts were refused.)
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
t "issue 34"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 90 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; tail -3 $OUT/speed.txt
t "json_object sweep"
timeout 75 python3 tools/serve-agents.py http://127.0.0.1:8391 --sweep 100 --kinds json_object --max-tokens 128 > $OUT/sweep-json-object.txt 2>&1; echo "rc $?"; tail -4 $OUT/sweep-json-object.txt
kill $SP; cd /tmp
gen warm q05 8; gen warm q3 8
for r in 1 2; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0" $m 8; gen "$m d2048" $m 2048
done; done
t done
} 2>&1 | tee $OUT/log.txt
