#!/usr/bin/env bash
# Makes tests/fixtures/tool-templates-llama-cpp.json: llama-server's renderings (/apply-template,
# --jinja) of conversations with `tools`, assistant `tool_calls` and `tool` results, through
# Qwen2.5-Instruct's chat template (tests/fixtures/qwen2.5-chat-template.jinja). engine/src/chat.rs
# renders the same with rocky and must give the same bytes.
#
# Usage: tools/tool-template-fixture.sh [LLAMA_SERVER]  (default /tmp/llama/bin/llama-server; the
# shared folder's prebuilt one, unpacked by ../shared/tools/llama.cpp/build.sh). Needs python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${ROCKY_SHARED:-$PWD/../shared}
SERVER_BIN=${1:-/tmp/llama/bin/llama-server}
PORT=${PORT:-18434}
OUT=tests/fixtures/tool-templates-llama-cpp.json
[ -x "$SERVER_BIN" ] || { bash "$SHARED/tools/llama.cpp/build.sh" /tmp/llama; SERVER_BIN=/tmp/llama/bin/llama-server; }
WORK=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
"$SERVER_BIN" -m "$SHARED/models/qwen2-tiny-q8_0.gguf" -ngl 0 -t 1 -c 256 --host 127.0.0.1 \
  --port "$PORT" --jinja --chat-template-file tests/fixtures/qwen2.5-chat-template.jinja \
  >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/server.log"; exit 1; }
python3 - "$PORT" "$OUT" "$("$SERVER_BIN" --version 2>&1 | grep -m1 version || echo unknown)" <<'PY'
import json, sys, urllib.request
port, out, version = sys.argv[1], sys.argv[2], sys.argv[3]
weather = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now in a city (°C) <fast>",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}
add = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99},
        "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"],
        "additionalProperties": False}}}
call = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}
cases = [
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [weather, add]},
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "2+3?"}], "tools": [add]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}],
     "tools": [weather]},
    {"messages": [{"role": "user", "content": "Two cities"},
                  {"role": "assistant", "content": "Checking.", "tool_calls": [call, call]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "21"},
                  {"role": "tool", "tool_call_id": "call_1", "content": "22"},
                  {"role": "assistant", "content": "Both warm."},
                  {"role": "user", "content": "Thanks"}], "tools": [weather, add]},
    {"messages": [{"role": "user", "content": "No tools here"}]},
]
for case in cases:
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/apply-template", data=json.dumps(case).encode(),
        headers={"Content-Type": "application/json"}))
    case["prompt"] = json.load(r)["prompt"]
json.dump({"llama_cpp": version + " (llama-server --jinja, /apply-template)",
           "template": "tests/fixtures/qwen2.5-chat-template.jinja",
           "cases": cases}, open(out, "w"), indent=1, ensure_ascii=False)
print(f"wrote {out} ({len(cases)} cases)")
PY
