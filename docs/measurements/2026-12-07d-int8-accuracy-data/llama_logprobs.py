#!/usr/bin/env python3
"""llama_logprobs.py LLAMA_BIN MODEL OUT_PREFIX IDS[;IDS...]: llama-server (CPU, 2 threads) on MODEL,
one POST /completion per prompt (comma-separated token ids) with n_predict 1, n_probs = n_vocab,
post_sampling_probs false: llama.cpp's log-softmax of the last position's logits over the whole
vocabulary, written as OUT_PREFIX.N.logprobs.f32 (n_vocab little-endian f32, by token id)."""
import json, os, socket, struct, subprocess, sys, time, urllib.request

def free_port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p

def post(port, body):
    req = urllib.request.Request(f'http://127.0.0.1:{port}/completion', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.load(r)

llama_bin, model, out, prompts = sys.argv[1:5]
n_vocab = int(os.environ.get('N_VOCAB', '151936'))
port = free_port()
server = subprocess.Popen([os.path.join(llama_bin, 'llama-server'), '-m', model, '--port', str(port),
                           '-c', '512', '-b', '512', '-ub', '512', '-t', '2', '-np', '1'],
                          stdout=subprocess.DEVNULL, stderr=open(out + '.server.log', 'w'))
try:
    for _ in range(1200):
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/health') as r:
                if r.status == 200: break
        except Exception:
            time.sleep(0.5)
    for i, p in enumerate(prompts.split(';')):
        ids = [int(x) for x in p.split(',')]
        t = time.time()
        doc = post(port, {'prompt': ids, 'n_predict': 1, 'n_probs': n_vocab, 'temperature': 0,
                          'cache_prompt': False, 'post_sampling_probs': False})
        top = doc['completion_probabilities'][0]['top_logprobs']
        lp = [float('nan')] * n_vocab
        for e in top: lp[e['id']] = e['logprob']
        missing = sum(1 for v in lp if v != v)
        with open(f'{out}.{i}.logprobs.f32', 'wb') as f: f.write(struct.pack(f'<{n_vocab}f', *lp))
        print(f'prompt {i}: {len(ids)} tokens, {len(top)} entries, {missing} missing, '
              f'top {top[0]["id"]} {top[0]["logprob"]:.5f}, timings {doc.get("timings", {}).get("prompt_ms")} ms, '
              f'{time.time()-t:.1f} s', file=sys.stderr)
finally:
    server.terminate(); server.wait()
