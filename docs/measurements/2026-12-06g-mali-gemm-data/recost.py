#!/usr/bin/env python3
"""recost.py IN.json OUT.json TABLE.txt: replace the per-pipe statistics (FMA, CVT, SFU, LS) and
cycles of the GEMM dispatch kinds named in TABLE (this page's tabled.sh output, kernel names
with the Mesa 26.1.6 statistics of this branch) in a `rocky predict --save-dispatches` list.
Counts, invocations, bytes, occupancy and loop factors stay those of the input list."""
import json, re, sys
src, dst, table = sys.argv[1:4]
stats = {}
for line in open(table):
    m = re.search(r":: (\S+) :: fma ([\d.]+) cvt ([\d.]+) sfu ([\d.]+) ls ([\d.]+) spills (\d+) regs (\d+)", line)
    if m:
        k = m.group(1)
        pipes = [float(m.group(i)) for i in range(2, 6)]
        if k in stats and stats[k][0] != pipes:
            sys.exit(f"{k}: two different statistics in {table}")
        stats[k] = (pipes, int(m.group(6)))
d = json.load(open(src))
changed = set()
for disp in d["dispatches"]:
    s = stats.get(disp["kernel"])
    if s:
        disp["pipes"], disp["spills"] = s[0], float(s[1])
        disp["cycles"] = max(s[0])
        changed.add(disp["kernel"])
d["name"] += " (re-costed with the 2026-12-06g statistics)"
json.dump(d, open(dst, "w"), indent=1)
print("replaced:", *sorted(changed), sep="\n  ")
