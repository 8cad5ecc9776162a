# fold_per_slab and 8x8 f32-accumulating packed-f16 tiles on the 3B shapes
# sch BM BN BK TM TN FOLD KGROUPS
sch() { echo "{\"gemm\":{\"bm\":$1,\"bn\":$2,\"bk\":$3,\"tm\":$4,\"tn\":$5,\"split_k\":1,\"vector_width\":2,\"stage_a\":true,\"stage_b\":true,\"accumulate\":\"f32\",\"math\":\"fma_f16_packed\",\"fold_per_slab\":$6,\"k_groups\":${7:-1}}}"; }
SCHEDS=(default "$(sch 64 64 64 4 4 true)" "$(sch 64 64 128 4 4 true)" "$(sch 128 128 64 8 8 false)" "$(sch 128 128 64 8 8 true)" "$(sch 128 64 64 8 4 true)" "$(sch 64 128 64 4 8 true)" "$(sch 128 128 64 8 8 true 2)" "$(sch 128 128 64 8 8 true 4)" "$(sch 64 64 64 4 4 true 2)" "$(sch 64 64 64 4 4 true 4)")
for shape in "$@"; do
  set -- $shape
  for i in "${!SCHEDS[@]}"; do
    s=${SCHEDS[$i]}
    if [ "$s" = default ]; then a=(); else a=(--schedule "$s"); fi
    r=$($R kernel --m $1 --n $2 --k $3 --weight $4 $5 "${a[@]}" ${KARGS:---runs 30} --json 2>&1)
    echo "$shape | s$i | $(echo "$r" | python3 $D/kj.py)"
  done
done
