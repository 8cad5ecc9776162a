# Call AB (2026-12-06, fourth session): GEMV schedules per shape over whole 3B decode steps.
# ROCKY_GEMV_SCHEDULE as a list with "when" filters: each run patches the output projection
# (n 151936), gate/up (swiglu), down (k 11008) and the other k-2048 GEMVs with one variant
# each; --profile gives each op's GPU time per step, a plain run the decode tok/s.
# Run: OUT=$OUT bash .device/callAB.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
sg() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":$3,\"reduce\":\"$4\",\"units_per_thread\":${5:-1}"; }
i8() { echo "\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"reduce\":\"subgroup\",\"math\":\"int8_dot\",\"vector_width\":1,\"dot_first\":false"; }
V=(
 ''
 "[{\"when\":{\"n\":151936},$(sg 32 2 8 one_subgroup)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 32 4 8 one_subgroup)},{\"when\":{\"k\":11008},$(sg 32 2 8 one_subgroup)},{\"when\":{\"k\":2048},$(sg 32 2 8 one_subgroup)}]"
 "[{\"when\":{\"n\":151936},$(sg 64 2 8 subgroup)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 64 4 8 subgroup)},{\"when\":{\"k\":11008},$(sg 64 2 8 subgroup)},{\"when\":{\"k\":2048},$(sg 64 2 8 subgroup)}]"
 "[{\"when\":{\"n\":151936},$(sg 64 4 8 subgroup)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 64 8 8 subgroup)},{\"when\":{\"k\":11008},$(sg 64 4 8 subgroup)},{\"when\":{\"k\":2048},$(sg 64 4 8 subgroup)}]"
 "[{\"when\":{\"n\":151936},$(sg 32 4 8 one_subgroup)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 32 2 8 one_subgroup)},{\"when\":{\"k\":11008},$(sg 32 4 8 one_subgroup)},{\"when\":{\"k\":2048},$(sg 32 4 8 one_subgroup)}]"
 "[{\"when\":{\"n\":151936},$(sg 32 2 8 one_subgroup 2)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 128 8 4 subgroup)},{\"when\":{\"k\":11008},$(sg 256 2 8 subgroup)},{\"when\":{\"k\":2048},$(sg 32 1 8 one_subgroup)}]"
 "[{\"when\":{\"n\":151936},$(sg 128 4 4 subgroup)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 128 2 4 subgroup)},{\"when\":{\"k\":11008},$(i8 128 4)},{\"when\":{\"k\":2048},$(i8 64 4)}]"
 "[{\"when\":{\"n\":151936},$(sg 32 1 8 one_subgroup)},{\"when\":{\"epilogue\":\"swiglu\"},$(sg 64 2 8 subgroup)},{\"when\":{\"k\":11008},$(i8 64 4)},{\"when\":{\"k\":2048},$(i8 64 2)}]"
)
gen() { # LABEL [ENV...]
  l=$1; shift
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 129 --temp 0 --seed 1 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('%-6s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:6])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
prof() { # LABEL [ENV...]
  l=$1; shift
  env ROCKY_DB=/tmp/none.sled "$@" timeout 60 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --ctx 4096 --profile 2>&1 | grep -E "^(ffn|output|attn_output|attn_qkv|attn_qk |attn_v) " | awk -v l=$l '{printf "%s %-12s %7s ms  %s\n", l, $1, $3, $7}'
}
lb -m q3.gguf -p 0 -n 128 -r 2
for i in "${!V[@]}"; do echo "V$i = ${V[$i]}"; done
for i in "${!V[@]}"; do t "variant $i"; prof V$i ROCKY_GEMV_SCHEDULE="${V[$i]}"; done
for r in 1 2; do for i in "${!V[@]}"; do gen V$i ROCKY_GEMV_SCHEDULE="${V[$i]}"; done; done
t done
