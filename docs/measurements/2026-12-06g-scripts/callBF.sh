# Call BF (2026-12-06, sixth session): (1) issue 34: json_schema vs unconstrained decode on the
# 0.5B with one preparing thread per generation and the grammar's exposed time reported
# (serve-agents --speed), and the constrained_overhead example (a fixed 1.3 ms wait standing in
# for the device step) on this host; (2) issue 31: does the 3B's gate/up GEMV scale with its
# columns (steady-state rate against fixed cost)? `rocky kernel --run` of the default schedule
# (and bit_floats) at n = 11008 .. 88064, the Q6_K vocabulary projection alone.
# Run: OUT=$OUT bash .device/callBF.sh, carry [".gl", ".device"].
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
xz -dc $D/constrained_overhead.xz > /tmp/co; chmod +x /tmp/co
t start
{
t "issue 34"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 90 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; tail -5 $OUT/speed.txt
kill $SP; cd /tmp
for sp in 0 1 0 1; do ROCKY_OVERHEAD_SPIN=$sp /tmp/co /tmp/vocab-tools.gguf 1300 10; done
nproc
t "gate/up scaling"
for n in 11008 22016 44032 88064; do
  for s in '' '{"gemv":{"threads":128,"cols":4,"chunks_per_thread":4,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32","dot_first":true,"bit_floats":true}}'; do
    W="{\"gemv\":{\"m\":1,\"n\":$n,\"k\":2048,\"act\":\"f32\",\"weight\":\"q4_k\",\"bias\":false,\"epilogue\":\"swiglu\"}}"
    echo "n $n ${s:+bf}: $($R kernel --workload "$W" ${s:+--schedule "$s"} --run --runs 20 2>&1 | grep -E '^(time|check|schedule|kernel)' | tr '\n' ' ' | cut -c1-300)"
  done
done
t "q4_k plain and q6_k vocabulary"
for wt in q4_k q6_k; do for n in 32768 151936; do
  W="{\"gemv\":{\"m\":1,\"n\":$n,\"k\":2048,\"act\":\"f32\",\"weight\":\"$wt\",\"bias\":false}}"
  echo "$wt n $n: $($R kernel --workload "$W" --run --runs 20 2>&1 | grep -E '^(time|check|schedule|kernel)' | tr '\n' ' ' | cut -c1-300)"
done; done
t done
} 2>&1 | tee $OUT/log.txt
