#!/usr/bin/env python3
"""factors.py LIST.json [LS_RATE]: per kernel of a saved rocky dispatch list, the driver's static
per-pipe cycles, the single loop factor (the IR's busiest pipe), the per-pipe factors, and the
busiest pipe's loop-weighted cycles with each (load/store at LS_RATE, default 3.4946)."""
import json, sys
lst = json.load(open(sys.argv[1])); r = float(sys.argv[2]) if len(sys.argv) > 2 else 3.4946
seen = set()
names = ["fma", "cvt", "sfu", "ls"]
print(f"{'op':<14} {'kernel':<62} {'FMA/CVT/SFU/LS':>26} {'single':>8} {'arith':>8} {'ls':>8} {'old cyc':>9} {'new cyc':>9} {'old→new busiest':>16}")
for d in lst["dispatches"]:
    p = d.get("pipes")
    if not p: continue
    if isinstance(p, list): p = {"cycles": p}
    key = (d["op"], d["kernel"])
    if key in seen: continue
    seen.add(key)
    c = p["cycles"]; f = p.get("loop_factors") or [d["loop_factor"]] * 4
    st = [c[0], c[1], c[2], c[3] / r]
    old = [x * d["loop_factor"] for x in st]; new = [st[i] * f[i] for i in range(4)]
    ob = max(range(4), key=lambda i: old[i]); nb = max(range(4), key=lambda i: new[i])
    print(f"{d['op']:<14} {d['kernel'][:62]:<62} {'/'.join(f'{x:g}' for x in c):>26} {d['loop_factor']:8.2f} {f[0]:8.2f} {f[3]:8.2f} {old[ob]:9.1f} {new[nb]:9.1f} {names[ob]+'→'+names[nb]:>16}")
