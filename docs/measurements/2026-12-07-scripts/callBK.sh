# Call BK (2026-12-07, eighth session): the short form of call BJ for a nearly spent device
# budget: the replayed decode step ordered by counters (ROCKY_DECODE_CHAIN=1) against barriers
# (=0), the same greedy ids either way, llama.cpp's tg128 beside, the barrier-free bound
# (ROCKY_DIAG_UNORDERED=1, wrong results) and counters with coherent weights
# (ROCKY_DIAG_CHAIN_COHERENT_MODEL=1) once; then two more rounds. Priority-ordered: whatever
# ran before a timeout comes back.
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
CHAIN_BAD=0
gen() { # LABEL MODEL
  l=$1 m=$2
  case "$l" in *counters*) [ $CHAIN_BAD = 1 ] && { echo "$l skipped (counters failed before)"; return; }; lim=30;; *) lim=60;; esac
  ROCKY_DB=/tmp/none.sled timeout $lim $R generate $m.gguf --token-ids $(ids 8) -n 129 --temp 0 --seed 1 --ctx 1024 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-24s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), d.get('decode_ordered_by'), 'sum', sum(d['token_ids']))" || { echo "$l failed: $(tail -2 $OUT/gen.err)"; case "$l" in *counters*) CHAIN_BAD=1;; esac; }
  grep -h warning $OUT/gen.err | head -2
}
{
gen warm q05
t "round 1"
for m in q05 q3; do
  ROCKY_DECODE_CHAIN=0 gen "$m barriers" $m
  ROCKY_DECODE_CHAIN=1 gen "$m counters" $m
done
lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
for m in q05 q3; do
  ROCKY_DIAG_UNORDERED=1 ROCKY_DECODE_CHAIN=0 gen "$m unordered (wrong)" $m
  ROCKY_DIAG_CHAIN_COHERENT_MODEL=1 ROCKY_DECODE_CHAIN=1 gen "$m counters coh-weights" $m
done
for r in 2 3; do
  t "round $r"
  lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for m in q05 q3; do ROCKY_DECODE_CHAIN=0 gen "$m barriers" $m; ROCKY_DECODE_CHAIN=1 gen "$m counters" $m; done
done
t done
} 2>&1 | tee $OUT/log.txt
