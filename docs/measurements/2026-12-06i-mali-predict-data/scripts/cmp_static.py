#!/usr/bin/env python3
"""cmp_static.py BEFORE.json AFTER.json: per workload, the top pick of each `rocky tune --static --json` run and the top 5 of each."""
import json, sys
def sched(s):
    g = s["gemm"]
    return f'{g["bm"]}x{g["bn"]}x{g["bk"]} t{g["tm"]}x{g["tn"]} k{g["split_k"]} {g["math"]}' + (" half" if g.get("half_units") else "") + f' st{int(g.get("stage_a",0))}{int(g.get("stage_b",0))}'
def desc(w):
    g = w["workload"]["gemm"]
    return f'm{g["m"]} n{g["n"]} k{g["k"]} {g["weight"]}' + (f' {g["epilogue"]}' if g.get("epilogue") else "") + (" +bias" if g.get("bias") else "")
b, a = (json.load(open(p))["workloads"] for p in sys.argv[1:3])
print("| workload | labels | before: top pick (default rank) | after: top pick, predicted ms (default rank) | changed |")
print("|---|---|---|---|---|")
for wb, wa in zip(b, a):
    assert wb["workload"] == wa["workload"]
    tb, ta = wb["top"][0], wa["top"][0]
    print(f'| {desc(wb)} | {", ".join(sorted(set(l.rsplit(".",1)[-1] for l in wb["labels"])))} | {sched(tb["schedule"])} (#{wb["default_rank"]}) | {sched(ta["schedule"])}, {ta["score"]*1e3:.3f} ms (#{wa["default_rank"]}) | {"yes" if tb["schedule"] != ta["schedule"] else "no"} |')
print()
for wb, wa in zip(b, a):
    print(desc(wb))
    for tag, w in (("  before", wb), ("  after ", wa)):
        print(tag, " | ".join(f'{sched(c["schedule"])}{" [DQ]" if c.get("disqualified") else ""}' for c in w["top"]))
