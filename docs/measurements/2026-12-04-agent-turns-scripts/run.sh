#!/usr/bin/env bash
# Agent turns (issue 16): the same 6-turn conversation, growing to ~3k tokens, against
# `rocky serve` and then llama.cpp's `llama-server` (prompt cache on) on the same file, back
# to back; each server's per-turn prompt tokens, reused tokens, evaluated tokens and prefill
# time go to OUT/{rocky,llama}.md (tables) and OUT/turns.jsonl (raw).
#
# Usage (from the repository root):
#   docs/measurements/2026-12-04-agent-turns-scripts/run.sh OUT [MODEL]
# Environment (defaults for this 2-core machine with lavapipe):
#   ROCKY=target/release/rocky   LLAMA=/tmp/llama/bin   TURNS=6   WORDS=200 (≈500 tokens/turn)
#   MAX_TOKENS=4   CTX=4096   NGL=99 (llama.cpp layers on the Vulkan device)   THREADS=2
#   TEMPERATURE=0 (greedy; e.g. 0.8 to time each server's sampler too)
#   ROCKY_ARGS=""  LLAMA_ARGS=""  (extra flags, e.g. a device selection)
# On an H200: ROCKY=target/release/rocky LLAMA=/path/to/llama/bin THREADS=16 run.sh out
set -euo pipefail
OUT=${1:?usage: run.sh OUT [MODEL]}
MODEL=${2:-target/test-assets/synth-qwen2.5-0.5b-q4_k_m-seed1.gguf}
ROCKY=${ROCKY:-target/release/rocky}
LLAMA=${LLAMA:-/tmp/llama/bin}
TURNS=${TURNS:-6}
WORDS=${WORDS:-200}
MAX_TOKENS=${MAX_TOKENS:-4}
CTX=${CTX:-4096}
NGL=${NGL:-99}
THREADS=${THREADS:-2}
TEMPERATURE=${TEMPERATURE:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
TURNS_PY=$HERE/../../../tools/serve-turns.py
mkdir -p "$OUT"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
# lavapipe is a CPU-type Vulkan device, which llama.cpp skips unless made visible.
export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}
export GGML_VK_DISABLE_COOPMAT=1 GGML_VK_DISABLE_COOPMAT2=1

wait_up() { # URL LOG PID
    for _ in $(seq 1 600); do
        curl -sf "$1/health" >/dev/null 2>&1 && return 0
        kill -0 "$3" 2>/dev/null || { echo "server died:"; tail -20 "$2"; return 1; }
        sleep 1
    done
    echo "server not up after 600 s"; return 1
}

turns() { # URL LABEL
    python3 "$TURNS_PY" "$1" --turns "$TURNS" --words "$WORDS" --max-tokens "$MAX_TOKENS" \
        --format chatml --temperature "$TEMPERATURE" --label "$2" --json-out "$OUT/turns.jsonl"
}

{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -srm), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rocky: $(git rev-parse --short HEAD) $ROCKY"
    echo "llama.cpp: $(head -1 "$LLAMA/../BUILDINFO" 2>/dev/null || echo "$LLAMA")"
    echo "model: $MODEL"
    echo "turns $TURNS, words $WORDS, max_tokens $MAX_TOKENS, ctx $CTX, temperature $TEMPERATURE"
} | tee "$OUT/setup.txt"

PORT=18441
"$ROCKY" serve "$MODEL" --host 127.0.0.1 --port $PORT --ctx "$CTX" ${ROCKY_ARGS:-} \
    2>"$OUT/rocky-server.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
wait_up "http://127.0.0.1:$PORT" "$OUT/rocky-server.log" $PID
echo "load at rocky start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/setup.txt"
turns "http://127.0.0.1:$PORT" rocky | tee "$OUT/rocky.md"
kill $PID; wait $PID 2>/dev/null || true

PORT=18442
"$LLAMA/llama-server" -m "$MODEL" --host 127.0.0.1 --port $PORT -c "$CTX" -np 1 \
    -ngl "$NGL" -t "$THREADS" ${LLAMA_ARGS:-} 2>"$OUT/llama-server.log" >/dev/null &
PID=$!
wait_up "http://127.0.0.1:$PORT" "$OUT/llama-server.log" $PID
echo "load at llama-server start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/setup.txt"
turns "http://127.0.0.1:$PORT" llama | tee "$OUT/llama.md"
kill $PID; wait $PID 2>/dev/null || true
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/setup.txt"
