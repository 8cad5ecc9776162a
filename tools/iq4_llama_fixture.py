#!/usr/bin/env python3
"""llama.cpp's next-token log-probabilities on rocky's synthesized IQ4_NL / IQ4_XS tiny models,
as test targets for rocky's IQ4 decoding (tests/gpu_prefill.rs, iq4_files_agree_with_llama_cpp).

usage: tools/iq4_llama_fixture.py ROCKY_BIN LLAMA_BIN_DIR OUT.json

For each mix (iq4_nl, iq4_xs): `rocky synth --shape tiny --quant MIX --seed 1` (the file the
tests make, tests/common synth), then llama-server on it (CPU, 2 threads, -c/-b/-ub 512) and
for each prompt of token ids one POST /completion with n_predict 1, n_probs 20, temperature 0,
no prompt cache: llama.cpp's top-20 log-probabilities of the token after the prompt (a
softmax over all raw logits: the server's probabilities before sampling). The file's FNV-1a
64-bit hash goes in too, so a test on a differently quantized file says so instead of
comparing against the wrong target. Needs llama.cpp 0c1e57098 (../shared/tools/llama.cpp).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PROMPTS = {
    'ids_len007': [100 + i * 7919 % 150000 for i in range(7)],
    'ids_len040': [100 + i * 7919 % 150000 for i in range(40)],
    'ids_len128': [100 + i * 104729 % 150000 for i in range(128)],
}


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xffffffffffffffff
    return h


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, body):
    req = urllib.request.Request(f'http://127.0.0.1:{port}/completion',
                                 data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def top_logprobs(port, ids):
    doc = post(port, {'prompt': ids, 'n_predict': 1, 'n_probs': 20, 'temperature': 0,
                      'cache_prompt': False, 'post_sampling_probs': False})
    first = doc['completion_probabilities'][0]
    return [[t['id'], t['logprob']] for t in first['top_logprobs']]


def main():
    rocky, llama_bin, dst = sys.argv[1:4]
    version = subprocess.run([os.path.join(llama_bin, 'llama-server'), '--version'],
                             capture_output=True, text=True)
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mix in ('iq4_nl', 'iq4_xs'):
            path = os.path.join(tmp, f'synth-tiny-{mix}-seed1.gguf')
            subprocess.run([rocky, 'synth', '--shape', 'tiny', '--quant', mix, '--seed', '1',
                            '-o', path], check=True)
            data = open(path, 'rb').read()
            port = free_port()
            server = subprocess.Popen(
                [os.path.join(llama_bin, 'llama-server'), '-m', path, '--port', str(port),
                 '-c', '512', '-b', '512', '-ub', '512', '-t', '2', '-np', '1'],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                for _ in range(600):
                    try:
                        with urllib.request.urlopen(f'http://127.0.0.1:{port}/health') as r:
                            if r.status == 200:
                                break
                    except Exception:
                        time.sleep(0.5)
                prompts = {name: {'token_ids': ids, 'top_logprobs': top_logprobs(port, ids)}
                           for name, ids in PROMPTS.items()}
            finally:
                server.terminate()
                server.wait()
            models[mix] = {'file_fnv1a64': f'{fnv1a64(data):016x}', 'bytes': len(data),
                           'prompts': prompts}
            print(mix, {n: p['top_logprobs'][:3] for n, p in prompts.items()}, file=sys.stderr)
    doc = {
        'made_by': 'tools/iq4_llama_fixture.py: llama-server -c 512 -b 512 -ub 512 -t 2 (CPU), '
                   'POST /completion n_predict 1 n_probs 20 temperature 0',
        'llama_cpp_version': (version.stdout + version.stderr).strip().splitlines()[:2],
        'models': models,
    }
    with open(dst, 'w') as f:
        json.dump(doc, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
