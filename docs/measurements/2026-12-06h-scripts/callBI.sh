# Call BI (2026-12-06, seventh session): (1) what the barriers between dependent dispatches cost a
# decode step: ROCKY_DIAG_UNORDERED=1 records the replayed step without them (wrong results,
# timing only) against the default, 3B and 0.5B Q4_K_M at depth 0, three interleaved rounds with
# llama.cpp's tg128 beside; (2) a cold sweep of the 3B GEMVs' schedule space (bench-gemv).
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
gen warm q05 8; gen warm q3 8
for r in 1 2 3; do
  t "round $r"; lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for m in q3 q05; do
    gen "$m d0 default" $m 8
    ROCKY_DIAG_UNORDERED=1 gen "$m d0 unordered" $m 8
  done
done
t "depth 2048"
for m in q3 q05; do gen "$m d2048 default" $m 2048; ROCKY_DIAG_UNORDERED=1 gen "$m d2048 unordered" $m 2048; done
t "bench-gemv sweep"
ROCKY_DB=/tmp/none.sled timeout 400 $R bench-gemv --shapes 3B --formats Q4_K,Q6_K --int8 --sweep 32 --runs 5 --md > $OUT/bench-gemv.md 2>$OUT/bench-gemv.err; echo "rc $?"
head -c 6000 $OUT/bench-gemv.md
t done
} 2>&1 | tee $OUT/log.txt
