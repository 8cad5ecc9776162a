import json,sys
t=sys.stdin.read()
try:
    d=json.loads(t[t.index('{'):])
    r=d.get("run") or {}
    tm=r.get("timing") or {}
    print(d["kernel"]["name"], "|", "%.4f"%tm.get("median_ms",float('nan')), "|", "%.0f"%tm.get("gflops",0), "| err", "%.2g"%(r.get("check") or {}).get("max_error_ratio",float('nan')))
except Exception as e:
    print("ERR", " ".join(t.split())[-300:])
