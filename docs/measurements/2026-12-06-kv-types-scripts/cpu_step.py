#!/usr/bin/env python3
"""One `rocky generate` run; the decode window is bracketed by the streamed text on stdout
(the first generated token arrives when the prefill ends, the last when the last step ends).
Reports wall ms per step (rocky's own figure from stderr) and the process's CPU ms per step
(utime+stime from /proc over the window), plus the load average."""
import json, os, re, subprocess, sys, threading, time
args = sys.argv[1:]
tick = os.sysconf("SC_CLK_TCK")
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
def cpu():
    with open(f"/proc/{p.pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / tick  # utime, stime (fields 14, 15)
marks = []  # (wall, cpu) at each stdout chunk
load0 = os.getloadavg()[0]
while True:
    chunk = p.stdout.read(4096)
    if not chunk:
        break
    try:
        marks.append((time.monotonic(), cpu()))
    except FileNotFoundError:
        break
err = p.stderr.read().decode()
p.wait()
m = re.search(r"decode: (\d+) steps in ([\d.]+) ms, ([\d.]+) tok/s", err)
pre = re.search(r"prefill: (\d+) tokens in ([\d.]+) ms, ([\d.]+) tok/s", err)
steps, dec_ms, tps = int(m.group(1)), float(m.group(2)), float(m.group(3))
(w0, c0), (w1, c1) = marks[0], marks[-1]
step_ms = dec_ms / steps
window_steps = (w1 - w0) * 1e3 / step_ms
print(json.dumps({
    "wall_tok_s": tps, "wall_ms_per_step": step_ms,
    "cpu_ms_per_step": (c1 - c0) * 1e3 / window_steps, "cpu_util": (c1 - c0) / (w1 - w0),
    "window_s": w1 - w0, "window_steps": window_steps, "stdout_chunks": len(marks),
    "prefill_tok_s": float(pre.group(3)), "load_start": load0, "load_end": os.getloadavg()[0],
}))
