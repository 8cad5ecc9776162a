import numpy as np, sys
def lsm(x):
    x = x.astype(np.float64); m = x.max(); return x - (m + np.log(np.exp(x - m).sum()))
d, seed = sys.argv[1], sys.argv[2]
ex = np.fromfile(f'{d}/s{seed}.exact.f32', '<f4'); bound = 0.05*np.abs(ex).max()
ro = np.fromfile(f'{d}/s{seed}.rocky.f32', '<f4')
lr = np.fromfile(f'{d}/llamareal.s{seed}.logprobs.f32', '<f4')
for m in sys.argv[3:]:
    g = np.fromfile(f'{d}/s{seed}.gpu-{m}.f32', '<f4')
    a = np.abs(g-ex).max(); b = np.abs(g-ro).max(); c = np.abs(lsm(g)-lr).max()
    print(f'{d} seed {seed} GPU {m}: vs exact {a:.4f} ({a/bound:.2f} of bound {bound:.4f}); vs rocky-int8 emulation {b:.4f}; log-softmax vs llama.cpp real {c:.4f}')
