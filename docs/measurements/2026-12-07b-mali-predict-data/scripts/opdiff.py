#!/usr/bin/env python3
"""opdiff.py BEFORE.txt AFTER.txt SECTION: per (op, kernel) ms and loops of one section
(prefill or decode) of two `rocky predict` outputs."""
import sys, re
def rows(p, sec):
    out, on = {}, False
    for line in open(p):
        if line.startswith(sec + ":"): on = True; continue
        if on and line.startswith("predicted"): break
        if on:
            f = line.split()
            if len(f) >= 11 and f[0] != "op":
                out[(f[0], f[-1])] = (float(f[2]), f[6], f[-2])
    return out
b, a = rows(sys.argv[1], sys.argv[3]), rows(sys.argv[2], sys.argv[3])
print(f"{'op':12s} {'kernel':58s} {'ms before':>10s} {'ms after':>10s} {'loops b':>8s} {'loops a':>8s} {'bound a':>7s}")
for k in sorted(b, key=lambda k: -b[k][0]):
    if k in a and b[k][0] > 1.0:
        print(f"{k[0]:12s} {k[1][:58]:58s} {b[k][0]:10.1f} {a[k][0]:10.1f} {b[k][1]:>8s} {a[k][1]:>8s} {a[k][2]:>7s}")
