# Call AG (2026-12-06, fourth session): the new defaults (N0) against variants on one host:
# N1 output back to f32 (t128 c4 chunks 4), N2 also gate/up back to f32 (only down int8),
# N3 = N1 + gate/up int8 t128 c4. Per-op profile, then 3B decode tok/s, three rounds.
# Run: OUT=$OUT bash .device/callAG.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
sg() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":$3,\"reduce\":\"subgroup\",\"math\":\"fma_f32\",\"vector_width\":4,\"dot_first\":true"; }
i8() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"reduce\":\"subgroup\",\"math\":\"int8_dot\",\"vector_width\":1,\"dot_first\":false"; }
O='{"when":{"n":151936}'; G='{"when":{"epilogue":"swiglu"}'
L=(N0 N1 N2 N3)
V=(''
 "[$O,$(sg 128 4 4)}]"
 "[$O,$(sg 128 4 4)},$G,$(sg 128 4 4)}]"
 "[$O,$(sg 128 4 4)},$G,$(i8 128 4)}]"
)
prof() { env ROCKY_DB=/tmp/none.sled ROCKY_GEMV_SCHEDULE="$2" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | grep -E "^(ffn_gate|output)" | awk -v l=$1 '{printf "%s %-12s %3s %7s ms  %s\n", l, $1, $2, $3, $7}'; }
gen() { env ROCKY_DB=/tmp/none.sled ROCKY_GEMV_SCHEDULE="$2" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 129 --temp 0 --seed 1 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('%-4s' % '$1', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'first', d['token_ids'][:5])" || echo "$1 failed: $(tail -2 $OUT/gen.err)"; }
gen warm ''
for i in 0 1 2 3; do prof ${L[$i]} "${V[$i]}"; done
for r in 1 2 3; do t "round $r"; for i in 0 1 2 3; do gen ${L[$i]} "${V[$i]}"; done; done
for i in 0 1 2 3; do prof ${L[$i]} "${V[$i]}"; done
t done
