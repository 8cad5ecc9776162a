#!/usr/bin/env python3
"""Greedy continuations of the Gemma 3 270M golden prompts by llama.cpp, as test targets for
`rocky generate` (tests/generate_gemma.rs).

usage: tools/gemma3_greedy_fixture.py LLAMA_BIN_DIR MODEL_Q4_K_M.gguf OUT.json

For each prompt of ../shared/golden/gemma3-270m/greedy32.json, runs
`llama-completion -m M -p TEXT --temp 0 -n 32 -c 2048 -t 2 -no-cnv` on two files:
- the Q4_K_M file itself, with the prompt text passed whole through -p (the golden was made
  through -f, which drops a trailing newline: its p4 ran without the prompt's last "\n");
- an all-F32 copy of it (../shared/tools/dequantize_gguf.py, written beside the model as
  *-f32deq.gguf and kept): llama.cpp then computes in f32 without quantizing activations,
  which is what rocky's CPU reference does, so the continuation is an exact target for it.
llama-completion echoes the prompt and ends with "\\n\\n" of its own; both are cut off here.
Needs the PyPI packages gguf and numpy (for the copy) and llama.cpp 0c1e57098
(../shared/tools/llama.cpp/build.sh).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get('ROCKY_SHARED', os.path.join(HERE, '..', '..', 'shared'))


def completion(llama_bin, model, text):
    out = subprocess.run(
        [os.path.join(llama_bin, 'llama-completion'), '-m', model, '-p', text, '--temp', '0',
         '-n', '32', '-c', '2048', '-t', '2', '-no-cnv'],
        capture_output=True, check=True).stdout
    echo = text.encode()
    assert out.startswith(echo), f'output does not start with the prompt: {out[:80]!r}'
    assert out.endswith(b'\n\n'), f'output does not end with llama-completion\'s "\\n\\n": {out[-20:]!r}'
    return out[len(echo):-2]


def main():
    llama_bin, model, dst = sys.argv[1:4]
    deq = model.replace('.gguf', '-f32deq.gguf')
    if not os.path.exists(deq):
        subprocess.run([sys.executable, os.path.join(SHARED, 'tools', 'dequantize_gguf.py'),
                        model, deq + '.tmp'], check=True)
        os.rename(deq + '.tmp', deq)
    golden = json.load(open(os.path.join(SHARED, 'golden', 'gemma3-270m', 'greedy32.json')))
    version = subprocess.run([os.path.join(llama_bin, 'llama-completion'), '--version'],
                             capture_output=True, text=True)
    prompts = []
    for p in golden['prompts']:
        text = p['prompt_text']
        entry = {'name': p['name'], 'prompt_text': text}
        for key, path in (('q4_k_m', model), ('f32deq', deq)):
            entry[key + '_generated_hex'] = completion(llama_bin, path, text).hex()
        prompts.append(entry)
        print(p['name'], {k: bytes.fromhex(v).decode('utf-8', 'replace')
                          for k, v in entry.items() if k.endswith('_hex')}, file=sys.stderr)
    doc = {
        'made_by': 'tools/gemma3_greedy_fixture.py: llama-completion -p TEXT --temp 0 -n 32 -c 2048 -t 2 -no-cnv (CPU)',
        'llama_cpp_version': (version.stdout + version.stderr).strip().splitlines()[:2],
        'model': os.path.basename(model),
        'f32deq_model': 'the same file with every tensor dequantized to F32 by ../shared/tools/dequantize_gguf.py',
        'prompts': prompts,
    }
    with open(dst, 'w') as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write('\n')


if __name__ == '__main__':
    main()
