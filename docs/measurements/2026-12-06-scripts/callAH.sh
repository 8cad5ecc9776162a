# Call AH (2026-12-06, fourth session): issue 34's 100 seeds per constrained kind on the 0.5B
# file, on the GPU: rocky serve (synthesized Qwen2.5-0.5B Q4_K_M, seed 1) and
# (Qwen2.5-Instruct's chat template put in the vocabulary, as 2026-12-06-serve-finish.md did) and
# tools/serve-agents.py --sweep 100 (openai + jsonschema carried as .device/pylib311.tar.xz).
# Run: OUT=$OUT bash .device/callAH.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
t start
python3 --version
mkdir -p /tmp/pylib && xz -dc $D/pylib311.tar.xz | tar -C /tmp/pylib -xf -
export PYTHONPATH=/tmp/pylib
python3 -c "import openai, jsonschema; print('openai', openai.__version__)" || exit 1
xz -dc $D/vocab-tools.gguf.xz > /tmp/vocab-tools.gguf
$R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab /tmp/vocab-tools.gguf --seed 1 -o /tmp/q05t.gguf --force > /dev/null
ROCKY_DB=/tmp/none.sled $R serve /tmp/q05t.gguf --ctx 1024 --port 8391 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8391/health >/dev/null && break; sleep 1; done
t serving
cd $ROOT
for kind in ${KINDS:-required named json_schema json_object}; do
  t "sweep $kind"
  timeout 200 python3 tools/serve-agents.py http://127.0.0.1:8391 --sweep 100 --kinds $kind --max-tokens 128 > $OUT/sweep-$kind.jsonl 2> $OUT/sweep-$kind.err
  echo "rc $?"; tail -3 $OUT/sweep-$kind.jsonl; tail -2 $OUT/sweep-$kind.err
done
kill $SP; head -5 $OUT/serve.log
t done
