import numpy as np, sys, glob, os
def lsm(x):
    x = x.astype(np.float64); m = x.max(); return x - (m + np.log(np.exp(x - m).sum()))
d = sys.argv[1]
rows = []
for seed in sys.argv[2:]:
    ex = np.fromfile(f'{d}/s{seed}.exact.f32', '<f4'); bound = 0.05 * np.abs(ex).max()
    L = {'exact': ex}
    for k in ['rocky', 'llama']:
        L[k] = np.fromfile(f'{d}/s{seed}.{k}.f32', '<f4')
    real = f'{d}/llamareal.s{seed}.logprobs.f32'
    lreal = np.fromfile(real, '<f4') if os.path.exists(real) else None
    ls = {k: lsm(v) for k, v in L.items()}
    out = [f'seed {seed}: bound {bound:.4f}']
    for k in ['rocky', 'llama']:
        raw = np.abs(L[k] - ex).max(); lp = np.abs(ls[k] - ls['exact']).max()
        out.append(f'{k}-emul: raw {raw:.4f} ({raw/bound:.2f}) logsoftmax {lp:.4f} ({lp/bound:.2f})')
    if lreal is not None:
        lp = np.abs(lreal - ls['exact']).max()
        c = np.corrcoef(lreal, ls['exact'])[0, 1]
        out.append(f'llama-REAL vs exact: logsoftmax {lp:.4f} ({lp/bound:.2f}) corr {c:.6f}; vs llama-emul {np.abs(lreal-ls["llama"]).max():.4f}; top1 real {lreal.argmax()} exact {ex.argmax()}')
    print(' | '.join(out))
