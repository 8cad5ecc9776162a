#!/usr/bin/env python3
"""optable.py A.txt B.txt C.txt: the prefill's per-op rows (ms, loops, bound) of three rocky predict outputs side by side."""
import sys, re
def rows(path, section="prefill"):
    out, on = {}, False
    for line in open(path):
        if line.startswith("prefill:"): on = section == "prefill"; continue
        if line.startswith("decode:"): on = section == "decode"; continue
        if line.startswith("predicted"): on = False
        if on and re.match(r"^  \S", line) and not line.startswith("  op "):
            f = line.split()
            out[(f[0], f[-1])] = (float(f[2]), f[6])
    return out
sec = sys.argv[1]; files = sys.argv[2:]
rs = [rows(p, sec) for p in files]
keys = sorted(rs[0], key=lambda k: -rs[0][k][0])
print("| op | kernel | " + " | ".join(f"ms (loops) {i}" for i in range(len(files))) + " |")
print("|---|---|" + "---:|" * len(files))
for k in keys:
    if rs[0][k][0] < 10 and sec == "prefill": continue
    print(f"| {k[0]} | `{k[1]}` | " + " | ".join(f"{r[k][0]:.1f} ({r[k][1]})" if k in r else "-" for r in rs) + " |")
