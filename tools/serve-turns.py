#!/usr/bin/env python3
"""An agent's conversation against an OpenAI-compatible server: each turn resends everything so
far plus a new user message, and prints the prompt tokens, the reused (cached) tokens and the
prefill time the server reports (`timings`: rocky serve and llama-server both give prompt_n,
prompt_ms and cache_n). Greedy unless --temperature is given (then each server's own
sampler with llama.cpp's default top-k/top-p/min-p and a fixed seed: the replies differ but run
to the same length with ignore_eos, so their times compare), /v1/completions with the text
written out, so rocky and llama.cpp get the same prompt.

usage: serve-turns.py URL [--turns 5] [--words 120] [--max-tokens 16] [--format gemma|chatml]
                        [--temperature 0] [--json-out FILE]

--format chatml writes the turns in Qwen's <|im_start|> format (the Qwen2.5 files), gemma in
Gemma's <start_of_turn> format. --json-out appends one JSON object per turn (the server's
usage and timings, the wall time) for scripts.
"""
import argparse
import json
import time
import urllib.request

TOPICS = ["the GPU", "the KV cache", "prefill", "decode", "the tuner", "Vulkan", "the board"]


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=1200) as r:
        v = json.load(r)
    return v, (time.perf_counter() - start) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--words", type=int, default=120)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--format", choices=["gemma", "chatml"], default="gemma")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--json-out")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if a.format == "gemma":
        user, model, end = "<start_of_turn>user\n", "<start_of_turn>model\n", "<end_of_turn>\n"
    else:
        user, model, end = "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n"
    text = ""
    print("| turn | prompt tokens | cached | evaluated | prefill ms | ms per evaluated token | reply tokens | reply ms | request ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for turn in range(1, a.turns + 1):
        topic = TOPICS[turn % len(TOPICS)]
        words = " ".join(f"{topic} step {i}," for i in range(a.words // 3))
        text += f"{user}Turn {turn}: tell me about {words}{end}{model}"
        v, wall = post(a.url, {"prompt": text, "max_tokens": a.max_tokens,
                               "temperature": a.temperature, "seed": 1,
                               "cache_prompt": True, "ignore_eos": True})
        t = v.get("timings", {})
        usage = v["usage"]
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", t.get("cache_n"))
        n = t.get("prompt_n")
        ms = t.get("prompt_ms")
        # The reply (decode) apart from the prefill: both servers report predicted_n/_ms.
        reply_n = t.get("predicted_n", usage.get("completion_tokens"))
        reply_ms = t.get("predicted_ms", float("nan"))
        print(f"| {turn} | {usage['prompt_tokens']} | {cached} | {n} | {ms:.0f} | {ms / max(n, 1):.1f} | {reply_n} | {reply_ms:.0f} | {wall:.0f} |",
              flush=True)
        if a.json_out:
            with open(a.json_out, "a") as f:
                f.write(json.dumps({"label": a.label, "turn": turn, "usage": usage, "timings": t,
                                    "cached": cached, "wall_ms": wall}) + "\n")
        text += v["choices"][0]["text"] + end


if __name__ == "__main__":
    main()
