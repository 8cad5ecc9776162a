# per-kernel sweep of candidate default schedules on the 3B shapes
sch() { echo "{\"gemm\":{\"bm\":$1,\"bn\":$2,\"bk\":$3,\"tm\":$4,\"tn\":$5,\"split_k\":1,\"vector_width\":$6,\"stage_a\":true,\"stage_b\":true,\"accumulate\":\"$7\",\"math\":\"$8\"}}"; }
SCHEDS=(
 "default"
 "$(sch 64 64 64 4 4 2 f16 fma_f16_packed)"
 "$(sch 64 64 64 4 4 2 f32 fma_f16_packed)"
 "$(sch 64 64 32 4 4 2 f32 fma_f16_packed)"
 "$(sch 128 64 32 8 4 2 f32 fma_f16_packed)"
 "$(sch 64 128 32 4 8 2 f32 fma_f16_packed)"
 "$(sch 128 128 32 8 8 2 f16 fma_f16_packed)"
 "$(sch 32 32 64 2 2 2 f32 fma_f16_packed)"
 "$(sch 32 64 64 2 4 2 f32 fma_f16_packed)"
 "$(sch 64 64 32 4 4 4 int8_dot)"
)
SCHEDS[9]='{"gemm":{"bm":64,"bn":64,"bk":32,"tm":4,"tn":4,"split_k":1,"vector_width":4,"stage_a":true,"stage_b":true,"accumulate":"f32","math":"int8_dot"}}'
for shape in "$@"; do
  set -- $shape
  for i in "${!SCHEDS[@]}"; do
    s=${SCHEDS[$i]}
    if [ "$s" = default ]; then a=(); else a=(--schedule "$s"); fi
    r=$($R kernel --m $1 --n $2 --k $3 --weight $4 $5 "${a[@]}" --runs ${RUNS:-30} --json 2>&1)
    echo "$shape | s$i | $(echo "$r" | python3 $D/kj.py)"
  done
done
