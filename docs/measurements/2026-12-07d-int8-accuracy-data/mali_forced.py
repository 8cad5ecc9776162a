#!/usr/bin/env python3
"""For the 0.5B and 3B prefill GEMMs (m = 512 and 64) on the Mali-G610 preset: the schedule each
--math family takes (x86 rocky kernel --caps mali-g610 --math F), compiled by Mesa 26.1.6 panvk
(mali-shim26, aarch64 rocky under qemu) with the driver's statistics."""
import json, subprocess, sys, os
X86 = sys.argv[1]; ARM = sys.argv[2]; SHIM = os.path.expanduser('~/.cache/rocky/mali-shim26-26.1.6/run-26.sh')
models = {'0.5B': (896, 128, 4864, 'q5_0', 'q5_0', 'q5_0', 'q4_k', 'q8_0'),
          '3B': (2048, 256, 11008, 'q4_k', 'q6_k', 'q4_k', 'q6_k', 'q6_k')}
rows = []
seen = {}
for name, (h, kv, ff, attn, v, gu, down, out) in models.items():
    shapes = [('q', h, h, attn, True, 'none'), ('k', kv, h, attn, True, 'none'), ('v', kv, h, v, True, 'none'),
              ('o', h, h, attn, False, 'residual'), ('gate_up', ff, h, gu, False, 'swiglu'),
              ('down', h, ff, down, False, 'residual')]
    for m in [512, 64]:
        for (what, n, k, wt, bias, epi) in shapes:
            for math in ['auto', 'f32', 'f16', 'int8']:
                wl = {'gemm': {'m': m, 'n': n, 'k': k, 'act': 'f32', 'weight': wt, 'bias': bias, 'epilogue': epi, 'layout': 'aligned' if wt in ('q6_k', 'q8_0', 'q5_0') else 'gguf'}}
                r = subprocess.run([X86, 'kernel', '--caps', 'mali-g610', '--workload', json.dumps(wl), '--math', math, '--json'],
                                   capture_output=True, text=True)
                if r.returncode:
                    print(name, m, what, math, 'x86 refused:', r.stderr.strip()[:200], file=sys.stderr); continue
                d = json.loads(r.stdout)
                key = (json.dumps(d['workload']), json.dumps(d['schedule']))
                if key not in seen:
                    s = subprocess.run([SHIM, ARM, 'kernel', '--workload', json.dumps(d['workload']), '--schedule', json.dumps(d['schedule']), '--stats', '--json'],
                                       capture_output=True, text=True, env=dict(os.environ, MESA_SHADER_CACHE_DISABLE='true'))
                    if s.returncode:
                        seen[key] = {'error': s.stderr.strip()[-300:]}
                    else:
                        st = json.loads(s.stdout)['driver_statistics']['executables'][0]['statistics']
                        seen[key] = {e['name']: e['value'] for e in st}
                st = seen[key]
                row = dict(model=name, m=m, gemm=what, math=math, kernel=d['kernel']['name'], stats=st)
                rows.append(row)
                print(json.dumps(row), flush=True)
