#!/usr/bin/env python3
"""Driver statistics of rocky's decode GEMVs on Mesa's Valhall compiler over the mali-shims.

gemv_stats.py --driver 25|26 --bin ROCKY --cases CASES.json [--out OUT.jsonl]

CASES.json: a list of {"name", "workload": {"gemv": {...}}, "schedule": {"gemv": {...}} or
null (the device's default)}. For each case the kernel is compiled at its K (the table's
statistics, every loop body counted once, as the driver counts it) and at two probe depths
(one loop step with no tail, and one step plus a one-group tail), whose difference is one
K-loop step's cycles per pipe: `weighted` = statistics + (trips - 1) x step, the per-
invocation cycles with the loop's trips (K / 32 / units_per_step / units_per_thread).
Nothing runs: compiler estimates only.
"""
import argparse, json, os, re, subprocess, sys, tempfile

SHIMS = {
    "25": ("sh", os.path.expanduser("~/.cache/rocky/mali-shim-25.0.7/run.sh"),
           os.path.expanduser("~/.cache/rocky/mali-shim-25.0.7")),
    "26": (None, os.path.expanduser("~/.cache/rocky/mali-shim26-26.1.6/run-26.sh"), None),
}
# Mesa 25.0.7 (SHADER-DB: ... inst, ... quadwords) and 26.1.6 (... instrs, ... code size, spill
# cost, registers used).
LINE = re.compile(r"MESA_SHADER_COMPUTE shader: (\d+) inst(?:rs)?, ([\d.]+) cycles, ([\d.]+) fma, "
                  r"([\d.]+) cvt, ([\d.]+) sfu, ([\d.]+) v, ([\d.]+) t, ([\d.]+) ls, (\d+) "
                  r"(?:quadwords|code size), (\d+) threads, (\d+) loops, (\d+):(\d+) spills:fills"
                  r"(?:, (\d+) spill cost, (\d+) registers used)?")

def compile_stats(driver, binary, workload, schedule):
    sh, run, prefix = SHIMS[driver]
    cmd = ([sh, run, prefix] if sh else [run]) + [binary, "kernel", "--workload", json.dumps(workload), "--stats", "--json"]
    if schedule is not None:
        cmd += ["--schedule", json.dumps(schedule)]
    env = dict(os.environ, BIFROST_MESA_DEBUG="shaderdb", XDG_CACHE_HOME=tempfile.mkdtemp())
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [m for m in LINE.finditer(p.stderr + p.stdout)]
    if not lines:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    m = lines[-1]
    g = [float(x) if x is not None else None for x in m.groups()]
    out = dict(inst=g[0], cycles=g[1], fma=g[2], cvt=g[3], sfu=g[4], ls=g[7], threads=g[9], loops=g[10],
               spills=g[11], fills=g[12])
    if g[14] is not None:
        out["registers"] = g[14]
    try:
        j = json.loads(p.stdout)
        out["kernel"] = j["kernel"]["name"]
        out["schedule"] = j["schedule"]
        for ex in j.get("driver_statistics", {}).get("executables", []):
            for s in ex["statistics"]:
                if s["name"] in ("Registers used", "Work registers"):
                    out["registers"] = s["value"]
    except Exception:
        pass
    return out

BLOCK = {"q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32, "q8_0": 32, "iq4_nl": 32,
         "q4_k": 256, "q5_k": 256, "q6_k": 256, "iq4_xs": 256}
BYTES = {"q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "q8_0": 34, "q4_k": 144, "q5_k": 176,
         "q6_k": 210, "iq4_nl": 18, "iq4_xs": 136}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True, choices=["25", "26"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out")
    ap.add_argument("--no-probe", action="store_true")
    a = ap.parse_args()
    cases = json.load(open(a.cases))
    out = open(a.out, "w") if a.out else None
    for c in cases:
        w = c["workload"]["gemv"]
        st = compile_stats(a.driver, a.bin, c["workload"], c.get("schedule"))
        row = {"name": c["name"], "workload": c["workload"], "stats": st}
        if "error" not in st and not a.no_probe:
            s = st["schedule"]["gemv"]
            lanes = 8 // s["chunks_per_thread"]
            g = s.get("units_per_thread", 1)
            step = s["threads"] // lanes
            groups = w["k"] // 32 // g
            trips = groups // step
            tail = groups % step != 0
            # Probe depths: a K-quant needs whole 256-element blocks.
            blk = BLOCK[w["weight"]]
            k1 = step * g * 32
            k2 = k1 + max(g * 32, blk)
            probe = None
            if k1 % blk == 0 and (k2 // 32 // g) % step != 0 and trips >= 1:
                p1 = compile_stats(a.driver, a.bin, {"gemv": dict(w, k=k1)}, st["schedule"])
                p2 = compile_stats(a.driver, a.bin, {"gemv": dict(w, k=k2)}, st["schedule"])
                if "error" not in p1 and "error" not in p2:
                    probe = {p: max(p2[p] - p1[p], 0.0) for p in ("fma", "cvt", "sfu", "ls")}
            if probe is None and trips >= 1:
                # A K-quant's probe is a whole block: steps of 8 units or more only; otherwise
                # the body is estimated as the statistics' share (no outside part).
                probe = {p: st[p] / (1 + tail) for p in ("fma", "cvt", "sfu", "ls")}
                row["probe"] = "estimated"
            row["trips"] = trips
            row["tail"] = tail
            row["step_cycles"] = probe
            if trips == 0:
                # Only the guarded last step: the statistics are the whole work.
                probe = {p: 0.0 for p in ("fma", "cvt", "sfu", "ls")}
            row["weighted"] = {p: st[p] + max(trips - 1, 0) * probe[p] for p in probe} if probe else None
            if row["weighted"]:
                wt = row["weighted"]
                # rocky predict's busiest pipe (load/store at ls_rate 3.4946) per output
                # column: the dispatch has n / cols workgroups of `threads` invocations.
                busiest = max(wt["fma"], wt["cvt"], wt["sfu"], wt["ls"] / 3.4946)
                row["predict_cycles_per_column"] = busiest * s["threads"] / s["cols"]
            # Weight bytes one invocation reads: its share of the group's rows.
            rows = s["cols"] * (2 if w.get("epilogue") == "swiglu" else 1)
            wb = rows * w["k"] // BLOCK[w["weight"]] * BYTES[w["weight"]]
            row["weight_bytes_per_thread"] = wb / s["threads"]
            if row["weighted"] and row["weighted"]["ls"] > 0:
                row["bytes_per_ls_cycle"] = row["weight_bytes_per_thread"] / row["weighted"]["ls"]
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n"); out.flush()

if __name__ == "__main__":
    main()
