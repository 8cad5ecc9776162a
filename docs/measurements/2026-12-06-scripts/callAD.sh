# Call AD (2026-12-06, fourth session): more rows per workgroup for the 3B's output projection,
# gate/up and down GEMVs (per-op GPU times with --profile), and decode tok/s of the best
# per-shape combination against the default, interleaved rounds, llama.cpp tg128 beside.
# Run: OUT=$OUT bash .device/callAD.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
sg() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":$3,\"reduce\":\"$4\",\"units_per_thread\":${5:-1}"; }
i8() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"reduce\":\"subgroup\",\"math\":\"int8_dot\",\"vector_width\":1,\"dot_first\":false,\"units_per_thread\":${3:-1}"; }
O='{"when":{"n":151936}'; G='{"when":{"epilogue":"swiglu"}'; D='{"when":{"k":11008}'
V=(
 ''
 "[$O,$(sg 128 4 4 subgroup)},$D,$(i8 128 4)}]"
 "[$O,$(sg 128 8 4 subgroup)},$G,$(sg 128 8 4 subgroup)},$D,$(i8 128 8)}]"
 "[$O,$(sg 256 4 2 subgroup)},$G,$(sg 64 4 4 subgroup)},$D,$(i8 256 4)}]"
 "[$O,$(sg 64 8 8 subgroup)},$G,$(sg 64 8 4 subgroup)},$D,$(i8 128 4 2)}]"
 "[$O,$(sg 256 8 2 subgroup)},$G,$(sg 256 8 2 subgroup)},$D,$(i8 256 8)}]"
 "[$O,$(sg 128 4 4 subgroup)},$G,$(sg 128 4 8 subgroup 2)},$D,$(i8 64 8)}]"
)
prof() { # LABEL [ENV...]
  l=$1; shift
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | grep -E "^(ffn|output)" | awk -v l=$l '{printf "%s %-12s %3s %7s ms  %s\n", l, $1, $2, $3, $7}'
}
gen() { # LABEL [ENV...]
  l=$1; shift
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 129 --temp 0 --seed 1 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('%-6s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'first', d['token_ids'][:6])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
for i in "${!V[@]}"; do echo "V$i = ${V[$i]}"; done
for i in "${!V[@]}"; do prof V$i ROCKY_GEMV_SCHEDULE="${V[$i]}"; done
for r in 1 2 3; do t "round $r"; lb -m q3.gguf -p 0 -n 128 -r 2; for i in "${!V[@]}"; do gen V$i ROCKY_GEMV_SCHEDULE="${V[$i]}"; done; done
t done
