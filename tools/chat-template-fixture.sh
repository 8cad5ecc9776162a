#!/usr/bin/env bash
# Makes tests/fixtures/chat-templates-llama-cpp.json: llama.cpp's own renderings (llama-server's
# /apply-template, its Jinja engine, add_generation_prompt on) of a few conversations with the
# Qwen2 vocabulary's template (in every `rocky synth` file) and with Llama 3's
# (tests/fixtures/llama3-chat-template.jinja, from Meta-Llama-3-8B-Instruct's
# tokenizer_config.json), and of llama.cpp's built-in formats chatml, llama3 and gemma (its C++
# renderer, `--no-jinja --chat-template NAME`), which rocky's built-in formats for files without
# a template reproduce (models/src/chat/builtin.rs). models/tests/chat_template.rs renders the
# same with rocky.
#
# Usage: tools/chat-template-fixture.sh [LLAMA_PREFIX]  (default /tmp/llama; made by
# ../shared/tools/llama.cpp/build.sh PREFIX when missing). Needs python3 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=${1:-/tmp/llama}
SHARED=${ROCKY_SHARED:-$PWD/../shared}
PORT=${PORT:-18433}
OUT=tests/fixtures/chat-templates-llama-cpp.json
[ -x "$LLAMA/bin/llama-server" ] || bash "$SHARED/tools/llama.cpp/build.sh" "$LLAMA"
[ -x target/release/rocky ] || cargo build --release
WORK=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
MODEL=$WORK/llama-tiny.gguf
./target/release/rocky synth --shape llama-tiny --quant q8_0 --seed 1 -o "$MODEL" 2>/dev/null
render() { # NAME [SERVER ARGS...]: one server per template, every conversation through it
  local name=$1
  shift
  "$LLAMA/bin/llama-server" -m "$MODEL" -ngl 0 -t 1 -c 256 --host 127.0.0.1 \
    --port "$PORT" "$@" >"$WORK/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/server.log"; exit 1; }
  python3 - "$PORT" "$name" >>"$WORK/cases.jsonl" <<'PY'
import json, sys, urllib.request
port, name = sys.argv[1], sys.argv[2]
conversations = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?\nSay it."}],
    [{"role": "system", "content": "  padded  "}, {"role": "user", "content": " ünïcode 你好 "}],
    [{"role": "system", "content": "One."}, {"role": "system", "content": " Two. "},
     {"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! "},
     {"role": "user", "content": "Again\n"}],
]
for messages in conversations:
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/apply-template", data=json.dumps({"messages": messages}).encode(),
        headers={"Content-Type": "application/json"}))
    print(json.dumps({"template": name, "messages": messages, "prompt": json.load(r)["prompt"]}))
PY
  kill $SERVER
  wait $SERVER 2>/dev/null || true
  SERVER=
}
render gguf --jinja
render llama3 --jinja --chat-template-file tests/fixtures/llama3-chat-template.jinja
for name in chatml llama3 gemma; do
  render "builtin-$name" --no-jinja --chat-template "$name"
done
python3 - "$WORK/cases.jsonl" "$OUT" "$(head -n 1 "$LLAMA/BUILDINFO" 2>/dev/null || echo unknown)" <<'PY'
import json, sys
cases = [json.loads(l) for l in open(sys.argv[1])]
json.dump({
    "llama_cpp": sys.argv[3] + " (llama-server, /apply-template)",
    "model": "rocky synth --shape llama-tiny --quant q8_0 --seed 1 (the Qwen2 vocabulary and its template)",
    "templates": {"gguf": "the model's tokenizer.chat_template",
                  "llama3": "tests/fixtures/llama3-chat-template.jinja",
                  "builtin-NAME": "llama.cpp's built-in format NAME (--no-jinja --chat-template NAME)"},
    "cases": cases,
}, open(sys.argv[2], "w"), indent=1, ensure_ascii=False)
print(f"wrote {sys.argv[2]} ({len(cases)} cases)")
PY
