# Static-versus-measured rank correlation on the H200 (prepared 2026-12-04; NOT run: no H200
# was available in the session that wrote it). Same staging as docs/measurements/
# 2026-12-04-h200-scripts (setup.sh: .device/rocky built from this branch in release, the
# Vulkan .debs in .gl/, .device/ggml-vocab-qwen2.gguf), plus this directory's spearman.py
# copied to .device/. Run from the repository root of the device copy:
#   OUT=... bash docs/measurements/2026-12-04-static-ranking/h200.sh
# NVIDIA offers VK_KHR_pipeline_executable_properties, so every candidate's pipeline is created
# by the driver with its statistics captured: spills disqualify, registers break ties. Whether
# its statistics include a cycle estimate decides the score source (the ranking's `source`
# line and the table's footer say which); without one the analytic IR model (GPU traits) scores.
source docs/measurements/2026-12-04-h200-scripts/setup.sh > $OUT/setup.txt 2>&1
T0=$(date +%s); t() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
S=$D/spearman.py
t "statistics the driver reports for one GEMM"
$R kernel --m 64 --n 896 --k 896 --weight q5_0 --stats --json 2>&1 | python3 -c 'import json,sys; v=json.load(sys.stdin); print(json.dumps(v.get("driver_statistics"))[:2000])'
for ub in 64 512; do
  t "0.5B ubatch $ub: rank 32 candidates per workload, time them all (10 runs)"
  timeout 280 python3 $S --rocky $R --model q05.gguf --ubatch $ub --sample 32 --runs 10 --seed 1 \
    --workloads "n=896 k=896 q5_0 +bias,n=4864 k=896 q5_0,n=896 k=4864 q6_k,n=128 k=896 q8_0 +bias" \
    --db /tmp/static-$ub.sled --out $OUT/static-ranking-h200-ub$ub.json 2> $OUT/static-ranking-h200-ub$ub.log
done
t done
