# Call BE (2026-12-06, sixth session): (1) GEMV quants made floats by bit operations
# (`bit_floats`, no int-to-float conversion per weight) against the default over whole decode
# steps, 3B and 0.5B Q4_K_M at depth 0, three interleaved rounds with llama.cpp's tg128 beside,
# a --profile of both on the 3B, depth 2048 once; (2) issue 34: json_schema vs unconstrained decode
# (serve-agents --speed) and the json_object sweep on the 0.5B; (3) issue 36: rocky bench --math
# f32/int8/auto on the 3B pp512 with llama.cpp's pp512 beside.
# Run: OUT=$OUT bash .device/callBE.sh, carry [".gl", ".device"].
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
declare -A V
V[default]=''
V[bf]='{"bit_floats":true}'
{
gen warm q05 8; gen warm q3 8
for r in 1 2 3; do
  t "round $r"; lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for v in default bf; do
    for m in q3 q05; do ROCKY_GEMV_SCHEDULE="${V[$v]}" gen "$m d0 $v" $m 8; done
  done
done
t "depth 2048"
lb -m q3.gguf -p 0 -n 128 -d 2048 -r 2; lb -m q05.gguf -p 0 -n 128 -d 2048 -r 2
for v in default bf; do for m in q3 q05; do ROCKY_GEMV_SCHEDULE="${V[$v]}" gen "$m d2048 $v" $m 2048; done; done
t profile
for v in default bf; do
  ROCKY_DB=/tmp/none.sled ROCKY_GEMV_SCHEDULE="${V[$v]}" timeout 120 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --profile > $OUT/profile-$v.txt 2>&1
  echo "== profile $v"; sed -n '/decode step in the executor/,$p' $OUT/profile-$v.txt | head -18 | cut -c1-120
done
t "issue 36: forced math on the 3B"
lb -m q3.gguf -p 512 -n 0 -r 3
for math in auto f32 int8; do rb q3.gguf -p 512 -r 3 --backends default --math $math || echo "math $math failed"; done
t "issue 34"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 90 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; tail -8 $OUT/speed.txt
t "json_object sweep"
timeout 75 python3 tools/serve-agents.py http://127.0.0.1:8391 --sweep 100 --kinds json_object --max-tokens 128 > $OUT/sweep-json-object.txt 2>&1; echo "rc $?"; tail -4 $OUT/sweep-json-object.txt
kill $SP
t done
} 2>&1 | tee $OUT/log.txt
