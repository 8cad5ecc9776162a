#!/usr/bin/env bash
# Issue 37, the f32 cache: llama.cpp's log-probabilities over the whole vocabulary with
# `-fa off -ctk f32 -ctv f32` (llama-server /completion, n_probs = the vocabulary size) against
# rocky's CPU reference and GPU path with an f32 cache (and the GPU's f16 cache, for scale), on
# an all-f32 model with the Qwen2 vocabulary: by default the Qwen2.5-0.5B shape with random
# weights (`rocky synth --shape qwen2.5-0.5b --quant f32 --seed 1`), or MODEL (the tiny test
# file's F32 copy, target/test-assets/qwen2-tiny-f32.gguf); prompts of 9 and 120 ordinary token
# ids as tests/fixtures/llama-kv-types has them.
# Usage: [MODEL=F.gguf] f32-cache.sh ROCKY OUTDIR [LLAMA_BIN]
set -euo pipefail
ROCKY=$1; OUT=$2; BIN=${3:-$HOME/.cache/rocky/llama.cpp/bin}
PORT=${PORT:-18441}
mkdir -p "$OUT"
if [ -z "${MODEL:-}" ]; then
  MODEL=$OUT/qwen2.5-0.5b-f32.gguf
  [ -f "$MODEL" ] || "$ROCKY" synth --shape qwen2.5-0.5b --quant f32 --seed 1 -o "$MODEL" >/dev/null
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
"$BIN/llama-server" -m "$MODEL" -ngl 0 -t 2 -c 1024 -b 1024 -ub 1024 -fa off -ctk f32 -ctv f32 \
  --host 127.0.0.1 --port "$PORT" >"$OUT/llama-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
for n in 9 120; do
  ids=$(python3 -c "print(','.join(str(100 + i * 7919 % 150000) for i in range($n)))")
  python3 - "$PORT" "$ids" "$OUT/llama-$n.f64" <<'PY'
import json, struct, sys, urllib.request
port, ids, out = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], sys.argv[3]
n_vocab = 151936
req = {"prompt": ids, "n_predict": 1, "n_probs": n_vocab, "temperature": 0,
       "cache_prompt": False, "post_sampling_probs": False}
d = json.load(urllib.request.urlopen(urllib.request.Request(
    f"http://127.0.0.1:{port}/completion", data=json.dumps(req).encode(),
    headers={"Content-Type": "application/json"})))
assert d["tokens_evaluated"] == len(ids)
lp = [float("nan")] * n_vocab
for t in d["completion_probabilities"][0]["top_logprobs"]:
    lp[t["id"]] = t["logprob"]
open(out, "wb").write(struct.pack(f"<{n_vocab}d", *lp))
print(f"n={len(ids)}: llama.cpp gave {sum(1 for x in lp if x == x)} log-probabilities")
PY
  "$ROCKY" prefill "$MODEL" --token-ids "$ids" --backend cpu -ctk f32 -ctv f32 \
    --logits-out "$OUT/cpu-$n.f32" >/dev/null
  "$ROCKY" prefill "$MODEL" --token-ids "$ids" -ctk f32 -ctv f32 --math f32 --ubatch 64 \
    --db /nonexistent.sled --logits-out "$OUT/gpu-$n.f32" >/dev/null
  "$ROCKY" prefill "$MODEL" --token-ids "$ids" -ctk f16 -ctv f16 --math f32 --ubatch 64 \
    --db /nonexistent.sled --logits-out "$OUT/gpu-f16-$n.f32" >/dev/null
done
kill $SERVER; wait $SERVER 2>/dev/null || true
python3 - "$OUT" <<'PY'
import sys, numpy as np
out = sys.argv[1]
def lsm(path):
    l = np.fromfile(path, dtype="<f4").astype(np.float64)
    m = l.max()
    return l - (m + np.log(np.exp(l - m).sum()))
for n in (9, 120):
    ref = np.fromfile(f"{out}/llama-{n}.f64", dtype="<f8")
    have = ~np.isnan(ref)
    top = np.argsort(-np.where(have, ref, -np.inf))[:64]
    for name in ("cpu", "gpu", "gpu-f16"):
        d = np.abs(lsm(f"{out}/{name}-{n}.f32") - ref)
        print(f"n={n} {name:8s} vs llama.cpp f32 cache: max|Δ logprob| over {have.sum()} tokens "
              f"{np.nanmax(d[have]):.2e}, over its top 64 {d[top].max():.2e}")
PY
