#!/usr/bin/env python3
"""An agent's tool loop through the official `openai` client (pip install openai), against any
OpenAI-compatible server: rocky serve, or llama-server --jinja on the same file, so the two
transcripts can be compared.

  1. a user question with two tools and tool_choice "required": the server must answer with a
     tool call (streamed too: the client's reassembled deltas must equal the plain call);
  2. the call is "executed" here and its result sent back as a role "tool" message, with the
     assistant's tool_calls in the history;
  3. the model answers in text (tool_choice "none").

usage: serve-agents.py URL [--seed 1] [--api-key KEY] [--model NAME]
                         [--sweep N [--kinds K,..] [--max-tokens 256] [--first-seed 1]
                          [--allow-cut]] [--speed N]

Prints the transcript as JSON lines (one per turn); exits non-zero if a step breaks the
OpenAI contract (no tool call, a call of an unknown tool, arguments that are not JSON,
streamed and plain calls that differ).

--sweep N instead sends seeds 1..N (--first-seed K: K..K+N-1; temperature 1) four ways: tool_choice "required" with the
two tools, a named function, response_format json_schema (strict), json_object; every reply
must be a call of a listed tool whose arguments validate against its schema, a JSON value
valid against the schema, or a JSON object (needs the jsonschema package). Prints the counts.
Every reply must end (finish_reason "stop" or "tool_calls"): rocky closes a json_object reply
within max_tokens (>= 2). --allow-cut also accepts a json_object reply cut by max_tokens where
it says so, as OpenAI's JSON mode documents (servers that do not close the object in time,
llama-server's): finish_reason "length" and text that is the start of a valid JSON object
(checked here by completing it, not by the server's grammar). A cut reply's row carries its
text either way.

--speed N instead sends N pairs of the same chat request (max_tokens 24, seed 3), unconstrained
and with a json_schema, interleaved, and prints each reply's decode tok/s (the server's
`timings`: llama-server's and rocky's) and, where the server reports it, the grammar's share.
"""
import argparse
import json
import sys

import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather now in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 99},
            "b": {"type": "integer", "minimum": 0, "maximum": 99}},
            "required": ["a", "b"], "additionalProperties": False}}},
]


def run_tool(name, args):
    if name == "add":
        return json.dumps({"sum": args.get("a", 0) + args.get("b", 0)})
    return json.dumps({"city": args.get("city"), "temperature": 21, "unit": args.get("unit", "c")})


PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 16},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}},
    "required": ["name", "age", "tags"], "additionalProperties": False}


def json_prefix_ok(text):
    """Whether `text` is the start of some valid JSON document: closed here (an open string,
    escape, literal, number, key or value completed, then the open brackets) and parsed."""
    stack, in_str, esc, uni = [], False, False, 0
    for ch in text:
        if in_str:
            if uni:
                if ch not in "0123456789abcdefABCDEF":
                    return False
                uni -= 1
            elif esc:
                if ch == "u":
                    uni = 4
                elif ch not in '"\\/bfnrt':
                    return False
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            elif ord(ch) < 0x20:
                return False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return False
    tail = ""
    if in_str:
        tail = ("0" * uni) + ("n" if esc and not uni else "") + '"'
    closers = "".join(reversed(stack))
    literal_tails = [w[k:] for w in ("true", "false", "null") for k in range(1, len(w))]
    for mid in ["", "0", ":0", '"k":0', "e0", ".0"] + literal_tails:
        for mid2 in ["", ":0"]:
            try:
                json.loads(text + tail + mid + mid2 + closers)
                return True
            except ValueError:
                pass
    return False


def speed(client, model, n):
    ask = [{"role": "user", "content": "Describe a person as JSON."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                  "schema": PERSON}}
    rates = {"unconstrained": [], "json_schema": []}
    for i in range(n):
        for kind in ("unconstrained", "json_schema"):
            extra = {"response_format": fmt} if kind == "json_schema" else {}
            r = client.chat.completions.create(model=model, messages=ask, seed=3, temperature=1,
                                               max_tokens=24, **extra)
            t = (r.model_extra or {}).get("timings") or {}
            steps = max(t.get("predicted_n", 0) - 1, 1)
            rate = steps / (t["predicted_ms"] / 1e3) if t.get("predicted_ms") else None
            rates[kind].append(rate)
            row = {"pair": i + 1, "kind": kind, "tokens": r.usage.completion_tokens,
                   "finish_reason": r.choices[0].finish_reason,
                   "decode_tok_s": rate and round(rate, 3),
                   "eval_ms_per_step": t.get("predicted_eval_ms") and round(
                       t["predicted_eval_ms"] / steps, 4),
                   "rest_ms_per_step": t.get("predicted_eval_ms") and round(
                       (t["predicted_ms"] - t["predicted_eval_ms"]) / steps, 4),
                   "draw_ms_per_step": t.get("predicted_draw_ms") and round(
                       t["predicted_draw_ms"] / steps, 4)}
            if "constraint_ms" in t:
                row["grammar_ms"] = round(t["constraint_ms"], 2)
                row["grammar_masks"] = t["constraint_masks"]
                row["grammar_exposed_ms"] = t.get("constraint_exposed_ms")
                if "predicted_constraint_exposed_ms" in t:
                    row["grammar_exposed_ms_per_step"] = round(
                        t["predicted_constraint_exposed_ms"] / steps, 4)
                row["grammar_share_of_decode"] = round(t["constraint_ms"] / (
                    t["predicted_ms"] + t["prompt_ms"]), 5)
            print(json.dumps(row), flush=True)
    mean = {k: sum(v) / len(v) for k, v in rates.items() if v and None not in v}
    if len(mean) == 2:
        print(json.dumps({"mean_decode_tok_s": mean,
                          "constrained_over_unconstrained": round(
                              mean["json_schema"] / mean["unconstrained"], 4)}))


def sweep(client, model, n, only, max_tokens, first=1, allow_cut=False):
    import jsonschema
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    ask = [{"role": "user", "content": "What is 2 + 3, and the weather in Paris?"}]
    kinds = {
        "required": dict(tools=TOOLS, tool_choice="required"),
        "named": dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}),
        "json_schema": dict(response_format={"type": "json_schema", "json_schema": {
            "name": "person", "strict": True, "schema": PERSON}}),
        "json_object": dict(response_format={"type": "json_object"}),
    }
    failures = 0
    for kind, extra in kinds.items():
        if kind not in only:
            continue
        good = cut = 0
        for seed in range(first, first + n):
            r = client.chat.completions.create(model=model, messages=ask, seed=seed, temperature=1,
                                               max_tokens=max_tokens, **extra)
            m = r.choices[0].message
            finish = r.choices[0].finish_reason
            try:
                if kind == "json_object" and finish == "length" and allow_cut:
                    # Cut by max_tokens: it must say so and be the start of a JSON object.
                    assert m.content.startswith("{") and json_prefix_ok(m.content), \
                        "cut, and not the start of a JSON object"
                    cut += 1
                    print(json.dumps({"kind": kind, "seed": seed, "ok": "cut, valid prefix",
                                      "tokens": r.usage.completion_tokens,
                                      "content": m.content}), flush=True)
                    continue
                assert finish in ("stop", "tool_calls"), f"finish_reason {finish}"
                if kind in ("required", "named"):
                    (call,) = m.tool_calls
                    assert kind == "required" or call.function.name == "add"
                    jsonschema.validate(json.loads(call.function.arguments),
                                        schemas[call.function.name])
                elif kind == "json_schema":
                    jsonschema.validate(json.loads(m.content), PERSON)
                else:
                    assert isinstance(json.loads(m.content), dict)
                good += 1
                row = {"kind": kind, "seed": seed, "ok": finish,
                       "tokens": r.usage.completion_tokens}
                if kind == "json_object":
                    row["content"] = m.content
                print(json.dumps(row), flush=True)
            except Exception as e:  # noqa: BLE001 - every way a reply can fail counts
                failures += 1
                print(json.dumps({"kind": kind, "seed": seed, "error": repr(e),
                                  "reply": m.model_dump(exclude_none=True)}))
        row = {"kind": kind, "valid": good, "of": n}
        if kind == "json_object" and allow_cut:
            row["cut_by_max_tokens_honestly"] = cut
        print(json.dumps(row), flush=True)
    sys.exit(1 if failures else 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", help="default: the first one /v1/models lists")
    p.add_argument("--sweep", type=int, help="validate N seeds of each constrained kind")
    p.add_argument("--kinds", default="required,named,json_schema,json_object",
                   help="which kinds --sweep sends (comma-separated)")
    p.add_argument("--max-tokens", type=int, default=256, help="max_tokens of --sweep's requests")
    p.add_argument("--first-seed", type=int, default=1, help="--sweep's seeds start here")
    p.add_argument("--allow-cut", action="store_true",
                   help="--sweep: accept a json_object reply cut by max_tokens that says so "
                        "(finish_reason length) and is the start of a JSON object")
    p.add_argument("--speed", type=int,
                   help="N interleaved pairs: decode tok/s unconstrained and with a json_schema")
    a = p.parse_args()
    client = openai.OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key=a.api_key)
    a.model = a.model or client.models.list().data[0].id
    if a.sweep:
        return sweep(client, a.model, a.sweep, a.kinds.split(","), a.max_tokens, a.first_seed,
                     a.allow_cut)
    if a.speed:
        return speed(client, a.model, a.speed)
    messages = [{"role": "developer", "content": "Use the tools."},
                {"role": "user", "content": "What is 2 + 3, and the weather in Paris?"}]
    common = dict(model=a.model, tools=TOOLS, seed=a.seed, temperature=1, max_tokens=128)

    first = client.chat.completions.create(messages=messages, tool_choice="required", **common)
    choice = first.choices[0]
    print(json.dumps({"turn": 1, "finish_reason": choice.finish_reason,
                      "message": choice.message.model_dump(exclude_none=True),
                      "usage": first.usage.model_dump(exclude_none=True)}))
    calls = choice.message.tool_calls or []
    if choice.finish_reason != "tool_calls" or not calls:
        sys.exit("turn 1: no tool call")
    names = {t["function"]["name"] for t in TOOLS}
    for c in calls:
        if c.function.name not in names:
            sys.exit(f"turn 1: unknown tool {c.function.name}")
        json.loads(c.function.arguments)

    # The same request streamed: the client's deltas, joined by index.
    joined = {}
    for chunk in client.chat.completions.create(messages=messages, tool_choice="required",
                                                stream=True, **common):
        for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            e = joined.setdefault(d.index, {"name": "", "arguments": ""})
            e["name"] += d.function.name or ""
            e["arguments"] += d.function.arguments or ""
    plain = [{"name": c.function.name, "arguments": c.function.arguments} for c in calls]
    streamed = [joined[i] for i in sorted(joined)]
    print(json.dumps({"turn": "1-streamed", "tool_calls": streamed}))
    if [(c["name"], json.loads(c["arguments"])) for c in streamed] != \
            [(c["name"], json.loads(c["arguments"])) for c in plain]:
        sys.exit("turn 1: the streamed calls differ from the plain ones")

    messages.append(choice.message.model_dump(exclude_none=True))
    for c in calls:
        messages.append({"role": "tool", "tool_call_id": c.id,
                         "content": run_tool(c.function.name, json.loads(c.function.arguments))})
    second = client.chat.completions.create(messages=messages, tool_choice="none", **common)
    print(json.dumps({"turn": 2, "finish_reason": second.choices[0].finish_reason,
                      "content": second.choices[0].message.content,
                      "usage": second.usage.model_dump(exclude_none=True)}))


if __name__ == "__main__":
    main()
