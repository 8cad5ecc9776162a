#!/usr/bin/env bash
# Makes tests/fixtures/tool-templates-llama-cpp.json: llama-server's renderings (/apply-template,
# --jinja) of conversations with `tools`, assistant `tool_calls` and `tool` results, through
# Qwen2.5-Instruct's chat template (tests/fixtures/qwen2.5-chat-template.jinja) and Llama
# 3.1-Instruct's (tests/fixtures/llama3.1-chat-template.jinja, as published in
# Meta-Llama-3.1-8B-Instruct's tokenizer_config.json). serve/src/chat.rs renders the same
# requests with rocky and must give the same bytes.
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
for NAME in qwen2.5 llama3.1; do
"$SERVER_BIN" -m "$SHARED/models/qwen2-tiny-q8_0.gguf" -ngl 0 -t 1 -c 256 --host 127.0.0.1 \
  --port "$PORT" --jinja --chat-template-file "tests/fixtures/$NAME-chat-template.jinja" \
  >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/server.log"; exit 1; }
python3 - "$PORT" "$NAME" >>"$WORK/cases.jsonl" <<'PY'
import json, sys, urllib.request
port, name = sys.argv[1], sys.argv[2]
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
if name == "llama3.1":
    # One call per assistant turn (the template refuses more); tool results as given.
    cases[3]["messages"][1]["tool_calls"] = [call]
    del cases[3]["messages"][3]
for case in cases:
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/apply-template", data=json.dumps(case).encode(),
        headers={"Content-Type": "application/json"}))
    case["prompt"] = json.load(r)["prompt"]
    case["template"] = name
    print(json.dumps(case, ensure_ascii=False))
PY
kill $SERVER
wait $SERVER 2>/dev/null || true
SERVER=
done
python3 - "$WORK/cases.jsonl" "$OUT" "$("$SERVER_BIN" --version 2>&1 | grep -m1 version || echo unknown)" <<'PY'
import json, sys, time
cases = [json.loads(l) for l in open(sys.argv[1])]
json.dump({"llama_cpp": sys.argv[3] + " (llama-server --jinja, /apply-template)",
           "model": "../shared/models/qwen2-tiny-q8_0.gguf (bos_token <|endoftext|>)",
           # llama-server gives templates today's date (date_string, strftime_now): the test
           # renders with this time.
           "now": int(time.time()),
           "templates": {"qwen2.5": "tests/fixtures/qwen2.5-chat-template.jinja",
                         "llama3.1": "tests/fixtures/llama3.1-chat-template.jinja"},
           "cases": cases}, open(sys.argv[2], "w"), indent=1, ensure_ascii=False)
print(f"wrote {sys.argv[2]} ({len(cases)} cases)")
PY
