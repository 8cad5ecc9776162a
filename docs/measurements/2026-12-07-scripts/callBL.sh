# Call BL (2026-12-07, eighth session): the smallest form of call BK for ~4 minutes of device
# budget: the 0.5B only (no 3B synthesis), counters against barriers, llama.cpp's tg128,
# the barrier-free bound; a second round if time is left.
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
t start
gen() { # LABEL
  ROCKY_DB=/tmp/none.sled timeout 30 $R generate q05.gguf --token-ids $(ids 8) -n 129 --temp 0 --seed 1 --ctx 1024 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-24s' % '$1', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), d.get('decode_ordered_by'), 'sum', sum(d['token_ids']))" || echo "$1 failed: $(tail -2 $OUT/gen.err)"
  grep -h warning $OUT/gen.err | head -2
}
{
ROCKY_DECODE_CHAIN=0 gen "warm barriers"
ROCKY_DECODE_CHAIN=1 gen "q05 counters"
ROCKY_DECODE_CHAIN=0 gen "q05 barriers"
lb -m q05.gguf -p 0 -n 128 -r 2
ROCKY_DIAG_UNORDERED=1 ROCKY_DECODE_CHAIN=0 gen "q05 unordered (wrong)"
ROCKY_DIAG_CHAIN_COHERENT_MODEL=1 ROCKY_DECODE_CHAIN=1 gen "q05 counters coh-weights"
t "round 2"
ROCKY_DECODE_CHAIN=1 gen "q05 counters"
ROCKY_DECODE_CHAIN=0 gen "q05 barriers"
lb -m q05.gguf -p 0 -n 128 -r 2
t done
} 2>&1 | tee $OUT/log.txt
