# Call AI (2026-12-06, fourth session): main after this session's decode defaults and the KV
# rotation merge. (1) tg128 at depth 0 and 2048, 0.5B and 3B Q4_K_M, rocky vs llama.cpp, three
# interleaved rounds (two: device time was short) (+ rocky sampled at temperature 0.8); (2) decode at depth 2048
# and 8192 with a q8_0 KV cache against f16 (issue 37), q8_0 rotated at 8192; (3) issue 34: json_schema vs
# unconstrained decode speed (serve-agents.py --speed).
# Run: OUT=$OUT bash .device/callAI.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS TEMP [ARGS...]
  l=$1 m=$2 n=$3 temp=$4; shift 4
  ROCKY_DB=/tmp/none.sled timeout 90 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp $temp --seed 1 --ctx 9000 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-22s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:4])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
gen warm q05 8 0; gen warm q3 8 0
for r in 1 2; do for m in q3 q05; do
  t "round $r $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
  gen "$m d0" $m 8 0; gen "$m d2048" $m 2048 0; gen "$m d0 t0.8" $m 8 0.8
done; done
t "kv types"
for m in q05 q3; do for d in 2048 8192; do
  gen "$m d$d f16" $m $d 0
  gen "$m d$d q8_0" $m $d 0 -ctk q8_0 -ctv q8_0
done; gen "$m d8192 q8_0 rot" $m 8192 0 -ctk q8_0 -ctv q8_0 --kv-rotation; done
t "issue 34"
mkdir -p /tmp/pylib && xz -dc $D/pylib311.tar.xz | tar -C /tmp/pylib -xf -
export PYTHONPATH=/tmp/pylib
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 60 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; tail -14 $OUT/speed.txt
kill $SP
t done
