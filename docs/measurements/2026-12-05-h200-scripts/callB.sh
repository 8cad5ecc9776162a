# Call B (2026-12-05): issue 14's static-versus-measured rank correlation on the H200
# (docs/measurements/2026-12-04-static-ranking/h200.sh, shortened to fit one call: 24
# candidates per workload, 5 timed runs each).
source .device/common.sh
S=$D/spearman.py
t "statistics the driver reports for one GEMM"
$R kernel --m 64 --n 896 --k 896 --weight q5_0 --stats --json 2>&1 | python3 -c 'import json,sys; v=json.load(sys.stdin); print(json.dumps(v.get("driver_statistics"))[:1500])'
for ub in 64 512; do
  t "0.5B ubatch $ub: rank 24 candidates per workload, time them all (5 runs)"
  timeout 230 python3 $S --rocky $R --model q05.gguf --ubatch $ub --sample 24 --runs 5 --seed 1 \
    --workloads "n=896 k=896 q5_0 +bias,n=4864 k=896 q5_0,n=896 k=4864 q6_k,n=128 k=896 q8_0 +bias" \
    --db /tmp/static-$ub.sled --out $OUT/static-ranking-h200-ub$ub.json 2> $OUT/static-ranking-h200-ub$ub.log
  echo "rc $?"
done
t done
