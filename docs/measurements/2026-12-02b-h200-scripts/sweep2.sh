# split-K across the grid on the small-grid shapes
sch() { echo "{\"gemm\":{\"bm\":$1,\"bn\":$2,\"bk\":64,\"tm\":$3,\"tn\":$4,\"split_k\":1,\"vector_width\":2,\"stage_a\":true,\"stage_b\":true,\"accumulate\":\"f32\",\"math\":\"fma_f16_packed\",\"k_groups\":$5}}"; }
SCHEDS=(default "$(sch 32 32 2 2 1)" "$(sch 32 32 2 2 2)" "$(sch 32 32 2 2 4)" "$(sch 32 32 2 2 8)" "$(sch 16 32 1 2 4)" "$(sch 16 32 1 2 8)" "$(sch 64 64 4 4 2)" "$(sch 64 64 4 4 4)")
for shape in "$@"; do
  set -- $shape
  for i in "${!SCHEDS[@]}"; do
    s=${SCHEDS[$i]}
    if [ "$s" = default ]; then a=(); else a=(--schedule "$s"); fi
    r=$($R kernel --m $1 --n $2 --k $3 --weight $4 $5 "${a[@]}" --runs ${RUNS:-30} --json 2>&1)
    echo "$shape | s$i | $(echo "$r" | python3 $D/kj.py)"
  done
done
