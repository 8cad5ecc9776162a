#!/usr/bin/env bash
# Makes tests/fixtures/llama-kv-types/qwen2-tiny.json: llama.cpp's next-token
# log-probabilities on the synthetic Qwen2 tiny model (`rocky synth --shape tiny --quant f32
# --seed 1`: 4 layers, 4/2 heads of 64) with each KV cache type, for
# models/tests/reference_kv_types.rs and tests/gpu_kv_types.rs (issue 37).
#
# All-f32 weights, so llama.cpp computes in f32; with `-fa off -ctk f32 -ctv f32` nothing on its
# side rounds to f16 either: the exact target of rocky's f32 cache. f16 is llama.cpp's default
# cache (also -fa off). llama.cpp refuses a quantized V cache without flash attention, so the
# q8_0 run has `-fa on` (its CPU flash attention then also quantizes Q to q8_0 for q·k, and
# accumulates V in f32): it gives the distance llama.cpp's own q8_0 cache puts between its
# answer and the f32 one, the bound rocky's q8_0 cache is held to.
#
# llama.cpp also rotates Q, K and V by a Walsh-Hadamard matrix around a quantized cache (PR
# 21038, on by default); rocky does not, so a second q8_0 run, "q8_0-norot", has it turned off
# (LLAMA_ATTN_ROT_DISABLE=1): the same arithmetic as rocky's q8_0 cache but for Q's rounding to
# q8_0. Each run records whether the server logged the rotation on (`attn_rot_k`/`attn_rot_v`,
# lines it prints from `-lv 4` on).
#
# llama.cpp's prebuilt tools have no logits dump, so this asks llama-server's /completion for
# the top N_PROBS tokens' log-probabilities before sampling (a softmax over all logits of the
# last prompt position), with the prompt given as token ids (nothing added), as
# tools/llama-rope-fixture.sh does.
#
# Usage: tools/llama-kv-types-fixture.sh [LLAMA_BIN]  (default ~/.cache/rocky/llama.cpp/bin,
# llama.cpp 0c1e570). Needs python3 and a built rocky (target/debug or target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-$HOME/.cache/rocky/llama.cpp/bin}
PORT=${PORT:-18437}
N_PROBS=${N_PROBS:-64}
OUT=tests/fixtures/llama-kv-types/qwen2-tiny.json
ROCKY=target/release/rocky
[ -x "$ROCKY" ] || ROCKY=target/debug/rocky
WORK=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
MODEL=$WORK/qwen2-tiny-f32.gguf
"$ROCKY" synth --shape tiny --quant f32 --seed 1 -o "$MODEL" >/dev/null 2>&1
BUILD=$(head -n 1 "$BIN/../BUILDINFO" 2>/dev/null || echo unknown)
SHA=$(sha256sum "$MODEL" | cut -d' ' -f1)
for run in "f32 f32 off f32 0" "f16 f16 off f16 0" "q8_0 q8_0 on q8_0 0" "q8_0 q8_0 on q8_0-norot 1"; do
  set -- $run
  NAME=$4
  LLAMA_ATTN_ROT_DISABLE=$5 "$BIN/llama-server" -m "$MODEL" -ngl 0 -t 2 -c 1024 -b 1024 -ub 1024 -fa "$3" -ctk "$1" -ctv "$2" -lv 4 \
    --host 127.0.0.1 --port "$PORT" >"$WORK/server-$NAME.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/server-$NAME.log"; exit 1; }
  ROT_K=$(grep -o 'attn_rot_k = [01]' "$WORK/server-$NAME.log" | head -n 1 | cut -d' ' -f3)
  ROT_V=$(grep -o 'attn_rot_v = [01]' "$WORK/server-$NAME.log" | head -n 1 | cut -d' ' -f3)
  python3 - "$PORT" "$N_PROBS" "$WORK/run-$NAME.json" "$1" "$2" "$3" "$NAME" "$ROT_K" "$ROT_V" <<'PY'
import json, sys, urllib.request
port, n_probs, out, ctk, ctv, fa = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
run_name, rot_k, rot_v = sys.argv[7], sys.argv[8] == "1", sys.argv[9] == "1"
def ask(ids):
    req = {"prompt": ids, "n_predict": 1, "n_probs": n_probs, "temperature": 0,
           "cache_prompt": False, "post_sampling_probs": False}
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", data=json.dumps(req).encode(),
        headers={"Content-Type": "application/json"}))
    d = json.load(r)
    assert d["tokens_evaluated"] == len(ids), d["tokens_evaluated"]
    return [[t["id"], t["logprob"]] for t in d["completion_probabilities"][0]["top_logprobs"]]
# Ordinary token ids spread over the vocabulary (no control tokens): one short prompt and
# two past the GPU kernels' key blocks and ubatch tiles. (Not 100 tokens: the greedy next
# token there is an incomplete UTF-8 piece, for which the server reports no probabilities.)
prompts = []
for name, n in [("ids_len009", 9), ("ids_len120", 120), ("ids_len300", 300)]:
    ids = [100 + i * 7919 % 150000 for i in range(n)]
    prompts.append({"name": name, "token_ids": ids, "top_logprobs": ask(ids)})
json.dump({"run": run_name, "cache_type_k": ctk, "cache_type_v": ctv, "flash_attention": fa,
           "attn_rot_k": rot_k, "attn_rot_v": rot_v, "prompts": prompts}, open(out, "w"))
PY
  kill $SERVER; wait $SERVER 2>/dev/null || true; SERVER=
done
mkdir -p "$(dirname "$OUT")"
python3 - "$WORK" "$OUT" "$BUILD" "$SHA" <<'PY'
import json, sys, glob
work, out, build, sha = sys.argv[1:5]
runs = [json.load(open(f"{work}/run-{k}.json")) for k in ["f32", "f16", "q8_0", "q8_0-norot"]]
json.dump({
    "model": "rocky synth --shape tiny --quant f32 --seed 1",
    "model_sha256": sha,
    "llama_cpp": build + " (llama-server /completion, CPU backend, 2 threads, n_ubatch 1024)",
    "what": "per cache type run: top_logprobs = [token id, log-probability] of the next token "
            "after the prompt, best first",
    "runs": runs,
}, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
