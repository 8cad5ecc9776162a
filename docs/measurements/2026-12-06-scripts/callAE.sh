# Call AE (2026-12-06, fourth session): int8 GEMVs where the RMSNorm is not folded
# (ROCKY_FUSE without "norm": a norm dispatch before the q/k/v, gate/up and output GEMVs, which
# may then take int8 math), against call AD's best per-shape patch (B0), 3B decode.
# Run: OUT=$OUT bash .device/callAE.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
sg() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":$3,\"reduce\":\"$4\",\"units_per_thread\":${5:-1}"; }
i8() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"reduce\":\"subgroup\",\"math\":\"int8_dot\",\"vector_width\":1,\"dot_first\":false,\"units_per_thread\":${3:-1}"; }
O='{"when":{"n":151936}'; G='{"when":{"epilogue":"swiglu"}'; D='{"when":{"k":11008}'; A='{"when":{"k":2048}'
NF=swiglu,residual,rope,stack
L=(B0 B1 B2 B3 B4 B5)
F=(''  $NF $NF $NF $NF $NF)
V=(
 "[$O,$(sg 128 4 4 subgroup)},$D,$(i8 128 4)}]"
 "[$O,$(sg 128 4 4 subgroup)},$G,$(i8 128 4)},$D,$(i8 128 4)}]"
 "[$O,$(sg 128 4 4 subgroup)},$G,$(i8 64 8)},$D,$(i8 128 4)}]"
 "[$O,$(i8 128 4)},$G,$(i8 128 4)},$D,$(i8 128 4)},$A,$(i8 128 4)}]"
 "[$O,$(sg 128 4 4 subgroup)},$D,$(i8 128 4)}]"
 "[$O,$(i8 64 4)},$G,$(i8 128 8)},$D,$(i8 128 4)},$A,$(i8 64 2)}]"
)
prof() { # LABEL FUSE PATCH
  env ROCKY_DB=/tmp/none.sled ${2:+ROCKY_FUSE=$2} ROCKY_GEMV_SCHEDULE="$3" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | grep -E "^(ffn|output|attn|norm|rms)" | awk -v l=$1 '{printf "%s %-12s %3s %7s ms  %s\n", l, $1, $2, $3, $7}'
}
gen() { # LABEL FUSE PATCH
  env ROCKY_DB=/tmp/none.sled ${2:+ROCKY_FUSE=$2} ROCKY_GEMV_SCHEDULE="$3" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 129 --temp 0 --seed 1 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('%-6s' % '$1', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:6])" || echo "$1 failed: $(tail -2 $OUT/gen.err)"
}
gen warm "" ""
for i in "${!V[@]}"; do echo "${L[$i]} fuse=${F[$i]} ${V[$i]}"; prof ${L[$i]} "${F[$i]}" "${V[$i]}"; done
for r in 1 2; do t "round $r"; lb -m q3.gguf -p 0 -n 128 -r 2; gen V0 "" ""; for i in "${!V[@]}"; do gen ${L[$i]} "${F[$i]}" "${V[$i]}"; done; done
t done
