# Call BH (2026-12-06, sixth session): issue 34 after the sampler's -inf skip: json_schema vs
# unconstrained decode on the 0.5B (serve-agents --speed 8: eval and rest per step).
# Run: OUT=$OUT bash .device/callBH.sh, carry [".gl", ".device"].
set -o pipefail
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
t start
{
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl && export PYTHONPATH=/tmp/site
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 2048 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
cd $ROOT
timeout 90 python3 tools/serve-agents.py http://127.0.0.1:8391 --speed 10 > $OUT/speed.txt 2>&1; cut -c1-230 $OUT/speed.txt
kill $SP
t done
} 2>&1 | tee $OUT/log.txt
