# Call BA (2026-12-06, fifth session): GEMV column groups (several one-subgroup column groups per
# workgroup) against the default over whole decode steps, 3B and 0.5B Q4_K_M at depth 0, two
# interleaved rounds, with llama.cpp's tg128 beside; a --profile of the default and G4 on the 3B;
# bench-gemv cold table with a grouped custom schedule.
# Run: OUT=$OUT bash .device/callBA.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
export NEED_Q3=1
source .device/common.sh
t start
gen() { # LABEL MODEL PROMPT_TOKENS [ARGS...]
  l=$1 m=$2 n=$3; shift 3
  ROCKY_DB=/tmp/none.sled timeout 90 $R generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --seed 1 --ctx 4096 --json "$@" 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('decode_step_ms') or {}; print('%-26s' % '$l', 'decode %6.1f tok/s' % d['decode_tokens_per_second'], 'step', ' '.join('%s %.3f' % kv for kv in s.items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:6])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
G='"reduce":"one_subgroup","chunks_per_thread":8,"units_per_thread":1'
declare -A V
V[default]=''
V[g4]="{$G,\"threads\":128,\"column_groups\":4}"
V[g4c2]="{$G,\"threads\":128,\"column_groups\":4,\"cols\":2}"
V[g4c1]="{$G,\"threads\":128,\"column_groups\":4,\"cols\":1}"
V[g2]="{$G,\"threads\":64,\"column_groups\":2}"
V[g8]="{$G,\"threads\":256,\"column_groups\":8}"
V[g4p4]="[{\"when\":{\"k\":11008},$G,\"threads\":128,\"column_groups\":4},{\"reduce\":\"one_subgroup\",\"chunks_per_thread\":4,\"threads\":128,\"column_groups\":4}]"
gen warm q05 8; gen warm q3 8
for r in 1 2; do
  t "round $r"; lb -m q3.gguf -p 0 -n 128 -r 2; lb -m q05.gguf -p 0 -n 128 -r 2
  for v in default g4 g4c2 g4c1 g2 g8 g4p4; do
    for m in q3 q05; do ROCKY_GEMV_SCHEDULE="${V[$v]}" gen "$m $v" $m 8; done
  done
done
t profile
for v in default g4; do
  ROCKY_DB=/tmp/none.sled ROCKY_GEMV_SCHEDULE="${V[$v]}" timeout 120 $R generate q3.gguf --token-ids $(ids 8) -n 33 --temp 0 --profile > $OUT/profile-$v.txt 2>&1
  echo "== profile $v"; sed -n '/GPU time per decode step/,$p' $OUT/profile-$v.txt | head -40
done
t bench-gemv
$R bench-gemv --runs 10 --md --schedule '{"gemv":{"threads":128,"cols":4,"chunks_per_thread":8,"vector_width":4,"reduce":"one_subgroup","accumulate":"f32","math":"fma_f32","dot_first":true,"column_groups":4}}' 2>&1 | tail -40
t done
