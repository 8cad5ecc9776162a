#!/usr/bin/env python3
"""How well `rocky tune --static` predicts measured times, on a device that can time.

1. `rocky tune MODEL --ubatch U --static --static-sample S --db DB` ranks a sample of each
   GEMM workload's candidates without running them (driver statistics where the device reports
   a cycle estimate, else the analytic IR model; the ranking says which);
2. `rocky db export` writes the rankings (rocky-seed-ranking lines);
3. every candidate of the chosen workloads is run, checked against the CPU reference and timed
   with `rocky kernel --workload W --schedule S --runs R --json` (failed checks are left out);
4. Spearman's rank correlation between the static score and the measured median (ties get
   their average rank), the measured rank of the static top pick, and how close the best of
   the static top-k comes to the best measured.

Prints a markdown table and writes every number to --out (JSON).
"""
import argparse, json, os, subprocess, sys, tempfile


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return r


def spearman(x, y):
    rx, ry = ranks(x), ranks(y)
    n = len(x)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx > 0 and vy > 0 else float("nan")


def describe(w):
    g = w["gemm"]
    extra = (" +bias" if g.get("bias") else "") + (
        " +" + g["epilogue"] if g.get("epilogue", "none") not in ("none", None) else "")
    return f"m={g['m']} n={g['n']} k={g['k']} {g['weight']}{extra}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rocky", default="target/release/rocky")
    p.add_argument("--model", required=True)
    p.add_argument("--ubatch", type=int, default=64)
    p.add_argument("--sample", type=int, default=24)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--device", default="auto")
    p.add_argument("--workloads", default="",
                   help="comma-separated texts; a workload is measured when its description "
                        "(m=64 n=896 k=896 q5_0 +bias) contains one (all when empty)")
    p.add_argument("--seed", type=int, default=1, help="rocky tune --seed: which sample")
    p.add_argument("--times-from", default=None,
                   help="an earlier --out file: re-score its timed candidates with this rocky "
                        "(same --seed and --sample) instead of timing them again")
    p.add_argument("--db", default=None, help="scratch database (default: a temp dir)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    db = a.db or os.path.join(tempfile.mkdtemp(prefix="rocky-static-"), "db.sled")
    subprocess.run([a.rocky, "tune", a.model, "--ubatch", str(a.ubatch), "--static",
                    "--static-sample", str(a.sample), "--seed", str(a.seed), "--device", a.device,
                    "--db", db],
                   check=True)
    export = db + ".jsonl"
    subprocess.run([a.rocky, "db", "export", "--db", db, "-o", export], check=True)
    wanted = [t for t in a.workloads.split(",") if t]
    earlier = {}
    if a.times_from:
        for r in json.load(open(a.times_from)):
            for row in r["rows"]:
                earlier[(r["workload"], json.dumps(row["schedule"], sort_keys=True))] = \
                    row["median_ms"]
    results = []
    for line in open(export):
        rec = json.loads(line)
        if rec.get("format") != "rocky-seed-ranking":
            continue
        w = rec["key"]["workload"]
        name = describe(w)
        if wanted and not any(t in name for t in wanted):
            continue
        rows = []
        for c in rec["ranking"]["candidates"]:
            if c.get("disqualified"):
                continue
            if a.times_from:
                ms = earlier.get((name, json.dumps(c["schedule"], sort_keys=True)))
                if ms is not None:
                    rows.append({"schedule": c["schedule"], "score": c["score"],
                                 "median_ms": ms})
                continue
            out = subprocess.run(
                [a.rocky, "kernel", "--workload", json.dumps(w), "--schedule",
                 json.dumps(c["schedule"]), "--runs", str(a.runs), "--device", a.device,
                 "--json"], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"  {name}: candidate failed ({out.stderr.strip()[:160]}): left out",
                      file=sys.stderr)
                continue
            run = json.loads(out.stdout)["run"]
            rows.append({"schedule": c["schedule"], "score": c["score"],
                         "median_ms": run["timing"]["median_ms"]})
            print(f"  {name}: score {c['score']:.4e} median {rows[-1]['median_ms']:.3f} ms",
                  file=sys.stderr)
        if len(rows) < 3:
            continue
        scores = [r["score"] for r in rows]
        times = [r["median_ms"] for r in rows]
        rho = spearman(scores, times)
        measured_rank = ranks(times)
        best = min(times)
        by_score = sorted(range(len(rows)), key=lambda i: scores[i])
        top = lambda k: min(times[i] for i in by_score[:k]) / best
        results.append({"workload": name, "source": rec["ranking"]["source"],
                        "candidates": len(rows), "spearman": rho,
                        "static_top1_measured_rank": measured_rank[by_score[0]],
                        "best_of_top1": top(1), "best_of_top3": top(3), "best_of_top5": top(5),
                        "best_ms": best, "rows": rows})
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print("| workload | candidates timed | Spearman ρ (score vs median) | static #1 measured rank "
          "| best of static top-1 / top-3 / top-5 vs best measured | best measured ms |")
    print("|---|---:|---:|---:|---|---:|")
    for r in results:
        print(f"| {r['workload']} | {r['candidates']} | {r['spearman']:.2f} | "
              f"{r['static_top1_measured_rank']:.0f} | {r['best_of_top1']:.2f}x / "
              f"{r['best_of_top3']:.2f}x / {r['best_of_top5']:.2f}x | {r['best_ms']:.3f} |")
    if results:
        print("\nscores: " + results[0]["source"])


if __name__ == "__main__":
    main()
