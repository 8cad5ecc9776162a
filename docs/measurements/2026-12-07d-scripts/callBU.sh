# Call BU (2026-12-07, tenth session; the shortest form: one round, the barrier-free bound, then a second round if time is left). Call BR: (callBQ reordered so a cut run keeps the most: rounds 1-2, 3B agent turns, round 3, depth 2048, 0.5B turns): callBM plus the device-side greedy pick (ROCKY_DEVICE_GREEDY=0 picks on the host). Call BM's text: two changes to the replayed decode step, A/B in
# interleaved rounds with llama.cpp's tg128 beside: (1) the Q/K/V GEMV rotating q and k and
# writing the KV cache itself (Epilogue::RopeKv; ROCKY_ROPE_IN_PROJECTION=0 keeps the separate
# RoPE-and-KV-write kernel): one dispatch and one dependency level fewer per layer; (2) the
# step ordered by counters (ROCKY_DECODE_CHAIN=1) instead of barriers. Same greedy ids in every
# variant (sum printed). Round 1 adds the barrier-free bound (ROCKY_DIAG_UNORDERED=1, wrong
# results). Then agent turns, depth 2048, issue 34's constrained speed. Priority-ordered:
# whatever ran before a timeout comes back.
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
CHAIN_BAD=0
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  case "$l" in *counters*) [ $CHAIN_BAD = 1 ] && { echo "$l skipped (counters failed before)"; return; }; lim=40;; *) lim=90;; esac
  ROCKY_DB=/tmp/none.sled timeout $lim $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-30s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), d.get('decode_ordered_by'), 'picks', d.get('decode_device_picks'), 'sum', sum(d['token_ids']))" || { echo "$l failed: $(tail -2 $OUT/gen.err)"; case "$l" in *counters*) CHAIN_BAD=1;; esac; }
  grep -h warning $OUT/gen.err | head -2
}
four() { # MODEL DEPTH: barriers/counters x greedy pick on device/host (+ rope kernel A/B in round 1)
  for c in 0 1; do
    o=barriers; [ $c = 1 ] && o=counters
    ROCKY_DECODE_CHAIN=$c gen "$1 d$2 $o" $1 $2
    ROCKY_DEVICE_GREEDY=0 ROCKY_DECODE_CHAIN=$c gen "$1 d$2 $o host-pick" $1 $2
    [ "${r:-0}" = 1 ] && ROCKY_ROPE_IN_PROJECTION=0 ROCKY_DECODE_CHAIN=$c gen "$1 d$2 $o rope-kernel" $1 $2
  done
}
{
gen warm q05 8; gen warm q3 8
CH=1
turns() { # MODEL
  t "agent turns $1 (chain $CH)"; cd $ROOT; ROCKY_DECODE_CHAIN=$CH MAX_TOKENS=128 ROCKY=$R LLAMA=/tmp THREADS=16 timeout 100 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh /tmp/turns-$1 /tmp/$1.gguf > /tmp/turns-$1.log 2>&1; echo "rc $?"
  cat /tmp/turns-$1/rocky.md /tmp/turns-$1/llama.md 2>/dev/null; cp /tmp/turns-$1/turns.jsonl $OUT/turns-$1.jsonl 2>/dev/null; cd /tmp
}
for r in 1 2 3; do
  t "round $r"
  lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for m in q3 q05; do
    four $m 8
    [ $r = 1 ] && ROCKY_DIAG_UNORDERED=1 ROCKY_DECODE_CHAIN=0 gen "$m d8 unordered (wrong)" $m 8
  done
  [ $CHAIN_BAD = 1 ] && CH=0
done
t done
} 2>&1 | tee $OUT/log.txt
