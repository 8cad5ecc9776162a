#!/usr/bin/env bash
# Makes tests/fixtures/llama-tiny-rope.json: llama.cpp's next-token log-probabilities for two
# prompts on the synthetic Llama 3-shaped model (`rocky synth --shape llama-tiny --quant f32
# --seed 1`), which models/tests/reference_llama.rs compares the CPU reference with. All-f32
# weights, so llama.cpp computes in f32 (its KV cache is f16, which the reference imitates).
#
# llama.cpp's prebuilt tools have no logits dump, so this asks llama-server's /completion for
# the top N_PROBS tokens' log-probabilities before sampling (a softmax over all logits of the
# last prompt position), with the prompt given as token ids (nothing added). Flash attention
# is off (FA=auto to compare): with it the 40-token prompt's log-probabilities moved by 1e-3.
#
# Usage: tools/llama-rope-fixture.sh [LLAMA_PREFIX]  (default /tmp/llama; made by
# ../shared/tools/llama.cpp/build.sh PREFIX when missing). Needs python3 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=${1:-/tmp/llama}
SHARED=${ROCKY_SHARED:-$PWD/../shared}
PORT=${PORT:-18431}
N_PROBS=${N_PROBS:-64}
OUT=tests/fixtures/llama-tiny-rope.json
[ -x "$LLAMA/bin/llama-server" ] || bash "$SHARED/tools/llama.cpp/build.sh" "$LLAMA"
[ -x target/release/rocky ] || cargo build --release
WORK=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
MODEL=$WORK/llama-tiny-f32.gguf
./target/release/rocky synth --shape llama-tiny --quant f32 --seed 1 -o "$MODEL" 2>/dev/null
"$LLAMA/bin/llama-server" -m "$MODEL" -ngl 0 -t 2 -c 1024 -b 1024 -ub 1024 -fa ${FA:-off} \
  --host 127.0.0.1 --port "$PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/server.log"; exit 1; }
FA=${FA:-off} python3 - "$PORT" "$N_PROBS" "$OUT" "$(head -n 1 "$LLAMA/BUILDINFO" 2>/dev/null || echo unknown)" \
  "$(sha256sum "$MODEL" | cut -d' ' -f1)" <<'PY'
import json, sys, urllib.request
port, n_probs, out, build, sha = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
FA = __import__("os").environ["FA"]
def ask(ids):
    req = {"prompt": ids, "n_predict": 1, "n_probs": n_probs, "temperature": 0,
           "cache_prompt": False, "post_sampling_probs": False}
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", data=json.dumps(req).encode(),
        headers={"Content-Type": "application/json"}))
    d = json.load(r)
    assert d["tokens_evaluated"] == len(ids), d["tokens_evaluated"]
    return [[t["id"], t["logprob"]] for t in d["completion_probabilities"][0]["top_logprobs"]]
# Ordinary token ids spread over the vocabulary (no control tokens); 160 tokens reach well past
# the 64-position original context of the model's llama3 frequency factors.
prompts = []
for name, n in [("ids_len040", 40), ("ids_len160", 160)]:
    ids = [100 + i * 7919 % 150000 for i in range(n)]
    prompts.append({"name": name, "token_ids": ids, "top_logprobs": ask(ids)})
json.dump({
    "model": "rocky synth --shape llama-tiny --quant f32 --seed 1",
    "model_sha256": sha,
    "llama_cpp": build + f" (llama-server /completion, CPU backend, 2 threads, n_ubatch 1024, flash attention {FA})",
    "what": "top_logprobs: [token id, log-probability] of the next token after the prompt, best first",
    "prompts": prompts,
}, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
