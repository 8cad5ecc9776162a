# Call D (2026-12-05b): issue 14's static-versus-measured rank correlation on the lent NVIDIA GPU (an H100 on 2026-12-05)
# (docs/measurements/2026-12-04-static-ranking/h200.sh shortened to fit: 16 candidates per
# workload, 5 timed runs each), then GEMV against GEMM per kernel at 1-8 rows.
# Run right after call C on the warm machine: OUT=$OUT bash .device/callD.sh.
source .device/common.sh
S=$D/spearman.py
t "statistics the driver reports for one GEMM"
$R kernel --m 64 --n 896 --k 896 --weight q5_0 --stats --json 2>&1 | python3 -c 'import json,sys; v=json.load(sys.stdin); print(json.dumps(v.get("driver_statistics"))[:1500])'
for ub in 512 64; do
  t "0.5B ubatch $ub: rank 16 candidates per workload, time them all (5 runs)"
  timeout 170 python3 $S --rocky $R --model q05.gguf --ubatch $ub --sample 16 --runs 5 --seed 1 \
    --workloads "n=896 k=896 q5_0 +bias,n=4864 k=896 q5_0,n=896 k=4864 q6_k" \
    --db /tmp/static-$ub.sled --out $OUT/static-ranking-nvidia-ub$ub.json 2> $OUT/static-ranking-nvidia-ub$ub.log
  echo "rc $?"
done
t "GEMV vs GEMM per kernel (median of 20 runs, ms)"
for s in "896 896 q5_0" "4864 896 q5_0" "896 4864 q6_k"; do
  set -- $s; for m in 1 2 4 8; do
    a=$(timeout 20 $R kernel --workload "{\"gemv\":{\"m\":$m,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false}}" --runs 20 2>&1 | grep -oE "median [0-9.]+ ms|differs.*" | head -1)
    b=$(timeout 20 $R kernel --m $m --n $1 --k $2 --weight $3 --runs 20 2>&1 | grep -oE "median [0-9.]+ ms|differs.*" | head -1)
    echo "n=$1 k=$2 $3 m=$m gemv: $a gemm: $b"; done; done | tee $OUT/gemv-vs-gemm.txt
t done
