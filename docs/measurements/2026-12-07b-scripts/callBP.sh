# Call BP (2026-12-07, ninth session; call BM's first round, 0.5B first, for a device budget of ~3 min): two changes to the replayed decode step, A/B in
# interleaved rounds with llama.cpp's tg128 beside: (1) the Q/K/V GEMV rotating q and k and
# writing the KV cache itself (Epilogue::RopeKv; ROCKY_ROPE_IN_PROJECTION=0 keeps the separate
# RoPE-and-KV-write kernel): one dispatch and one dependency level fewer per layer; (2) the
# step ordered by counters (ROCKY_DECODE_CHAIN=1) instead of barriers. Same greedy ids in every
# variant (sum printed). Round 1 adds the barrier-free bound (ROCKY_DIAG_UNORDERED=1, wrong
# results). Then agent turns, depth 2048, issue 34's constrained speed. Priority-ordered:
# whatever ran before a timeout comes back.
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
t start
CHAIN_BAD=0
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  case "$l" in *counters*) [ $CHAIN_BAD = 1 ] && { echo "$l skipped (counters failed before)"; return; }; lim=40;; *) lim=90;; esac
  ROCKY_DB=/tmp/none.sled timeout $lim $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-30s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), d.get('decode_ordered_by'), 'sum', sum(d['token_ids']))" || { echo "$l failed: $(tail -2 $OUT/gen.err)"; case "$l" in *counters*) CHAIN_BAD=1;; esac; }
  grep -h warning $OUT/gen.err | head -2
}
four() { # MODEL DEPTH: barriers/counters x rope in projection on/off
  for c in 0 1; do
    o=barriers; [ $c = 1 ] && o=counters
    ROCKY_DECODE_CHAIN=$c gen "$1 d$2 $o" $1 $2
    ROCKY_ROPE_IN_PROJECTION=0 ROCKY_DECODE_CHAIN=$c gen "$1 d$2 $o rope-kernel" $1 $2
  done
}
{
gen warm q05 8
t "0.5B"; lb -m q05.gguf -p 0 -n 128 -r 2; four q05 8
t "3B"; $R synth --shape qwen2.5-3b --quant q4_k_m --vocab $D/ggml-vocab-qwen2.gguf --seed 1 -o q3.gguf --force >/dev/null
lb -m q3.gguf -p 0 -n 128 -r 2; four q3 8
t done
} 2>&1 | tee $OUT/log.txt
