# Call BW (prepared 2026-12-07, tenth session, for the next one): the defaults after call BV
# (barriers, device picks, RoPE-and-KV-write kernel of its own) in three interleaved rounds
# against llama.cpp's tg128, with the host's picks beside (ROCKY_DEVICE_GREEDY=0); round 1 adds
# the barrier-free bound; then agent turns (3B, 0.5B), depth 2048, issue 34's constrained speed
# (the host-cost work merged this session). Priority-ordered: whatever ran before a timeout
# comes back.
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  ROCKY_DB=/tmp/none.sled timeout 90 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-30s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), d.get('decode_ordered_by'), 'picks', d.get('decode_device_picks'), 'sum', sum(d['token_ids']))" || echo "$l failed: $(tail -2 $OUT/gen.err)"
  grep -h warning $OUT/gen.err | head -2
}
two() { # MODEL DEPTH: the defaults, and the host's picks
  gen "$1 d$2 default" $1 $2
  ROCKY_DEVICE_GREEDY=0 gen "$1 d$2 host-pick" $1 $2
}
{
gen warm q05 8; gen warm q3 8
turns() { # MODEL
  t "agent turns $1"; cd $ROOT; MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 100 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$1 /tmp/$1.gguf > /tmp/turns-$1.log 2>&1; echo "rc $?"
  cat /tmp/turns-$1/rocky.md /tmp/turns-$1/llama.md 2>/dev/null; cp /tmp/turns-$1/turns.jsonl $OUT/turns-$1.jsonl 2>/dev/null; cd /tmp
}
for r in 1 2 3; do
  t "round $r"
  lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for m in q3 q05; do
    two $m 8
    [ $r = 1 ] && ROCKY_DIAG_UNORDERED=1 ROCKY_DECODE_CHAIN=0 gen "$m d8 unordered (wrong)" $m 8
  done
  [ $r = 2 ] && turns q3
done
t "depth 2048"
lb -m q3.gguf -p 0 -n 128 -d 2048 -r 2; lb -m q05.gguf -p 0 -n 128 -d 2048 -r 2
for m in q3 q05; do two $m 2048; done
turns q05
t "issue 34: json_schema vs unconstrained decode (serve-agents --speed 10, 0.5B)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT; timeout 60 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; cut -c1-230 $OUT/speed.txt | tail -14
kill $SP; wait $SP 2>/dev/null; cd /tmp
t done
} 2>&1 | tee $OUT/log.txt
