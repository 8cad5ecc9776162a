# big-micro-tile / deep-slab packed-f16 schedules on the main 3B shapes
sch() { echo "{\"gemm\":{\"bm\":$1,\"bn\":$2,\"bk\":$3,\"tm\":$4,\"tn\":$5,\"split_k\":1,\"vector_width\":2,\"stage_a\":true,\"stage_b\":true,\"accumulate\":\"${6:-f32}\",\"math\":\"fma_f16_packed\",\"k_groups\":${7:-1},\"wide_loads\":${8:-false},\"k_unroll\":${9:-1}}}"; }
SCHEDS=(default "$(sch 64 64 128 4 4)" "$(sch 128 64 64 8 4)" "$(sch 64 64 64 4 4 f16)" "$(sch 64 128 64 4 8)" "$(sch 64 128 64 4 8 f32 1 true)" "$(sch 64 128 64 8 4)" "$(sch 128 128 64 8 8 f16)" "$(sch 128 128 64 8 8 f16 1 true)" "$(sch 64 64 64 4 4 f32 1 true)" "$(sch 128 64 64 8 4 f32 1 true)" "$(sch 64 64 64 4 4 f32 1 false 2)" "$(sch 128 64 64 8 4 f32 1 false 2)")
for shape in "$@"; do
  set -- $shape
  for i in "${!SCHEDS[@]}"; do
    s=${SCHEDS[$i]}
    if [ "$s" = default ]; then a=(); else a=(--schedule "$s"); fi
    r=$($R kernel --m $1 --n $2 --k $3 --weight $4 $5 "${a[@]}" ${KARGS:---runs 30} --json 2>&1)
    echo "$shape | s$i | $(echo "$r" | python3 $D/kj.py)"
  done
done
