#!/usr/bin/env python3
"""lsdiff.py BEFORE.json AFTER.json: per kernel, the driver's load/store statistic, the LS
loop factor and LS per invocation (statistic x factor) before and after, and the ms."""
import json, sys
def load(p):
    d = json.load(open(p))
    out = {}
    for e in d["dispatches"]:
        k = e["kernel"]
        p_ = e.get("pipes") or {}
        cyc = p_.get("cycles") if isinstance(p_, dict) else p_
        lf = (p_.get("loop_factors") if isinstance(p_, dict) else None) or [e["loop_factor"]] * 4
        if k not in out and cyc:
            out[k] = (cyc[3], lf[3], e.get("op"))
    return out
b, a = load(sys.argv[1]), load(sys.argv[2])
print(f"{'kernel':70s} {'op':12s} {'LS stat':>7s} {'f before':>9s} {'f after':>9s} {'LS/inv before':>13s} {'after':>9s} {'after/before':>12s}")
for k in sorted(b, key=lambda k: -b[k][0] * b[k][1]):
    if k not in a:
        continue
    (s, fb, op), (_, fa, _) = b[k], a[k]
    if fb == fa:
        continue
    print(f"{k[:70]:70s} {str(op)[:12]:12s} {s:7.1f} {fb:9.2f} {fa:9.2f} {s*fb:13.1f} {s*fa:9.1f} {fa/fb:12.3f}")
