# Call BV (2026-12-07, tenth session; the last few device-seconds): the 0.5B first (no 3B synth
# in the setup), one round: llama.cpp tg128 beside rocky with barriers/counters x the greedy
# pick on the device/host, the barrier-free bound; then the 3B the same if time is left.
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
t start
CHAIN_BAD=0
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  ROCKY_DB=/tmp/none.sled timeout 40 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-28s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), d.get('decode_ordered_by'), 'picks', d.get('decode_device_picks'), 'sum', sum(d['token_ids']))" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
one() { # MODEL
  lb -m $1.gguf -p 0 -n 128 -r 2
  ROCKY_DECODE_CHAIN=0 gen "$1 barriers" $1 8
  ROCKY_DECODE_CHAIN=1 gen "$1 counters" $1 8
  ROCKY_DEVICE_GREEDY=0 ROCKY_DECODE_CHAIN=0 gen "$1 barriers host-pick" $1 8
  ROCKY_DEVICE_GREEDY=0 ROCKY_DECODE_CHAIN=1 gen "$1 counters host-pick" $1 8
  ROCKY_DIAG_UNORDERED=1 ROCKY_DECODE_CHAIN=0 gen "$1 unordered (wrong)" $1 8
  ROCKY_DECODE_CHAIN=1 gen "$1 counters again" $1 8
  ROCKY_DECODE_CHAIN=0 gen "$1 barriers again" $1 8
}
{
gen warm q05 8
one q05
t "3B"
$R synth --shape qwen2.5-3b --quant q4_k_m --vocab $D/ggml-vocab-qwen2.gguf --seed 1 -o q3.gguf --force >/dev/null
gen warm q3 8
one q3
t done
} 2>&1 | tee $OUT/log.txt
