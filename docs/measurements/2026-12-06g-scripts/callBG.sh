# Call BG (2026-12-06, sixth session): GEMV loads issued ahead of the products (`early_loads`):
# the 3B gate/up GEMV's rate as its columns grow (rocky kernel --run, default / early loads /
# early loads + bit floats), the vocabulary projections, then whole decode steps (3B and 0.5B at
# depth 0, two interleaved rounds, llama.cpp's tg128 beside) and a --profile of both on the 3B.
# Then issue 34: json_schema vs unconstrained decode with the evaluator's time apart (serve-agents
# --speed: eval and rest per step).
# Run: OUT=$OUT bash .device/callBG.sh, carry [".gl", ".device"].
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
krun() { # LABEL WORKLOAD [SCHEDULE]
  echo "$1: $($R kernel --workload "$2" ${3:+--schedule "$3"} --run --runs 20 2>&1 | grep -E '^time|rror' | cut -c1-120)"
}
G='"threads":128,"chunks_per_thread":4,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32","dot_first":true'
declare -A V
V[default]=''
V[el]='{"early_loads":true}'
V[elbf]='{"early_loads":true,"bit_floats":true}'
{
t "gate/up scaling"
for n in 11008 44032 88064; do
  W="{\"gemv\":{\"m\":1,\"n\":$n,\"k\":2048,\"act\":\"f32\",\"weight\":\"q4_k\",\"bias\":false,\"epilogue\":\"swiglu\"}}"
  krun "q4_k swiglu n $n default" "$W"
  krun "q4_k swiglu n $n el" "$W" "{\"gemv\":{$G,\"cols\":4,\"early_loads\":true}}"
  krun "q4_k swiglu n $n el bf" "$W" "{\"gemv\":{$G,\"cols\":4,\"early_loads\":true,\"bit_floats\":true}}"
done
for wt in q4_k q6_k; do
  W="{\"gemv\":{\"m\":1,\"n\":151936,\"k\":2048,\"act\":\"f32\",\"weight\":\"$wt\",\"bias\":false}}"
  krun "$wt n 151936 default" "$W"
  krun "$wt n 151936 el" "$W" "{\"gemv\":{$G,\"cols\":4,\"early_loads\":true}}"
  krun "$wt n 151936 el c2" "$W" "{\"gemv\":{$G,\"cols\":2,\"early_loads\":true}}"
done
gen warm q05 8; gen warm q3 8
for r in 1 2; do
  t "round $r"; lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for v in default el elbf; do
    for m in q3 q05; do ROCKY_GEMV_SCHEDULE="${V[$v]}" gen "$m d0 $v" $m 8; done
  done
done
t profile
for v in default el; do
  ROCKY_DB=/tmp/none.sled ROCKY_GEMV_SCHEDULE="${V[$v]}" timeout 120 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --profile > $OUT/profile-$v.txt 2>&1
  echo "== profile $v"; sed -n '/decode step in the executor/,$p' $OUT/profile-$v.txt | head -16 | cut -c1-110
done
t "issue 34"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 90 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 8 > $OUT/speed.txt 2>&1; cut -c1-250 $OUT/speed.txt | tail -9
kill $SP
t done
} 2>&1 | tee $OUT/log.txt
