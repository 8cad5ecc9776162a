#!/usr/bin/env python3
"""llama.cpp's prefill as a dispatch list for `rocky predict --dispatches`: the same Mali cost
model, fed with llama.cpp's OWN shaders' Valhall statistics.

    bash tools/llama_shim26.sh ~/.cache/rocky/mali-shim26-26.1.6 /tmp/llama-shim26
    GGML_VK_PIPELINE_STATS=1 /tmp/llama-shim26/run-26.sh llama-bench -m M.gguf -ngl 99 -p 512 -n 0 -ub 64 -r 1 \
        2> stats.log                       # on the Mesa 26.1.6 mali-shim: nothing executes
    tools/llama_predict.py --stats stats.log --model M.gguf -p 512 --ubatch 64 -o list.json
    rocky predict --dispatches list.json [--fit-pp 21.0]

With the driver's final code too (BIFROST_MESA_DEBUG=shaders on the same run, into the same
log), `--shader-dump stats.log` weights each mul_mmq loop by its trip count instead of the
whole shader by K / 32 (docs/measurements/2026-12-06-predict-calibration.md).

Where the numbers come from:
- per-pipeline statistics (Cycles, per-pipe cycles, Threads = occupancy, Spills, Registers):
  the driver's own, printed by llama.cpp for every pipeline it compiled (`--stats`);
- the model's shape and tensor types: the GGUF file (`--model`), or `--shape` for a model
  whose file is not here (then `--weight` names its tensor type);
- the dispatches: llama.cpp's Qwen2/Llama graph per ubatch, written out below (ASSUMPTIONS).
  llama.cpp's own per-op log (GGML_VK_PERF_LOGGER) cannot run on the shim (it waits on
  timestamps and the shim loses the device), so the list is this script's reading of
  ggml-vulkan, not a recording.

The output is a PREDICTION input, never a measurement.
"""

import argparse
import json
import math
import re
import struct
import sys

# ---- ASSUMPTIONS about llama.cpp's Vulkan dispatches (ggml-vulkan, Mali: subgroup 16, 32 KiB
# shared memory, int dot on). Each is a reading of ggml-vulkan.cpp (ggml 0.21 source; the
# binary run is Debian's ggml 0.27), stated so a board run can correct it.
MMQ_BK = 32  # K per main-loop step of the q8_1 integer-dot matmul (mul_mmq)
# (rows of W per workgroup, tokens per workgroup, threads): s / m / l warptiles of mul_mmq.
MMQ_TILES = {"s": (32, 32, 32), "m": (64, 64, 128), "l": (128, 128, 128)}
# Debian's build names the variants by a suffix: at ubatch 16 it compiled
# matmul_q4_k_q8_1_0, at 64 matmul_q4_k_q8_1_1 (so 0 = s, 1 = m; 2 = l is assumed).
MMQ_SUFFIX = {"s": "0", "m": "1", "l": "2"}
QUANT_VALUES_PER_THREAD = 4  # quantize_q8_1: one vec4 per invocation
FA_THREADS = 64  # scalar flash attention: 4 subgroups of 16
FA_ROWS = 4  # query rows per workgroup (n_kv < 1024: reduce_block_rows)
FA_COLS = 32  # keys per main-loop step (head_dim 128 or 64: D & 8 == 0)
# mul_mmq's loops as Debian's ggml 0.27 builds them (read from its SPIR-V and, with
# --shader-dump, from the driver's own NIR and final code): an outer loop over K in steps of
# BK * BK_STEP = 128, holding the A-tile load loop (BM / loadstride_a trips), the B-tile load
# loop (BN / loadstride_b trips) and the k_step loop (BK_STEP = 4 trips) in that order; the
# driver's statistics count each body ONCE. Without --shader-dump the whole shader is weighted
# by K / 32 (every part as if it ran once per 32 values of K), an upper bound.
MMQ_BK_STEP = 4
LOAD_VEC_B = 16
# A values per load (4 * QUANT_R_MMQ): Q4_K's 8 read from the driver's NIR (the m tile's A loop
# steps by 32 rows = 128 threads * 8 / 32); other types stood in by it.
LOAD_VEC_A = {"q4_k": 8}

GGML_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0",
              10: "q2_k", 11: "q3_k", 12: "q4_k", 13: "q5_k", 14: "q6_k", 30: "bf16"}
# (bytes, values) per block
BLOCK = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q4_0": (18, 32), "q4_1": (20, 32),
         "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32), "q2_k": (84, 256),
         "q3_k": (110, 256), "q4_k": (144, 256), "q5_k": (176, 256), "q6_k": (210, 256)}


def fail(msg):
    print(f"llama_predict.py: {msg}", file=sys.stderr)
    sys.exit(3)


def read_gguf(path):
    """(metadata, {tensor name: (type name, dims)}) of a GGUF file."""
    try:
        f = open(path, "rb")
    except OSError as e:
        fail(f"--model {path}: {e}")
    with f:
        if f.read(4) != b"GGUF":
            fail(f"--model {path}: not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))
        if version < 2:
            fail(f"--model {path}: GGUF version {version} is too old")

        def s():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode("utf-8", "replace")

        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
                  11: "q", 12: "d"}

        def value(t):
            if t == 8:
                return s()
            if t == 9:
                (et, n) = struct.unpack("<IQ", f.read(12))
                if et in scalar:
                    size = struct.calcsize("<" + scalar[et])
                    f.seek(size * n, 1)  # skip arrays of numbers, keep their length
                    return n
                for _ in range(n):  # strings (the vocabulary) or nested arrays: read, keep the count
                    value(et)
                return n
            fmt = "<" + scalar[t]
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        meta = {}
        for _ in range(n_kv):
            key = s()
            (t,) = struct.unpack("<I", f.read(4))
            meta[key] = value(t)
        tensors = {}
        for _ in range(n_tensors):
            name = s()
            (nd,) = struct.unpack("<I", f.read(4))
            dims = struct.unpack(f"<{nd}Q", f.read(8 * nd))
            (t,) = struct.unpack("<I", f.read(4))
            f.read(8)
            tensors[name] = (GGML_TYPES.get(t, f"type{t}"), dims)
    return meta, tensors


def shape_of(meta, tensors):
    arch = meta.get("general.architecture", "?")
    g = lambda k, d=None: meta.get(f"{arch}.{k}", d)  # noqa: E731
    hidden = g("embedding_length")
    heads = g("attention.head_count")
    vocab = tensors.get("token_embd.weight", (None, (0, 0)))[1][1]
    return {
        "arch": arch, "hidden": hidden, "layers": g("block_count"), "heads": heads,
        "kv_heads": g("attention.head_count_kv", heads), "ffn": g("feed_forward_length"),
        "head_dim": g("attention.key_length", hidden // heads), "vocab": vocab,
        "bias": "blk.0.attn_q.bias" in tensors,
    }


def parse_stats(path):
    """{pipeline name: {statistic: value}} from GGML_VK_PIPELINE_STATS lines."""
    stats, cur = {}, None
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        fail(f"--stats {path}: {e}")
    for line in lines:
        m = re.match(r"ggml_vulkan: pipeline stats for (\S+):", line)
        if m:
            cur = m.group(1)
            stats[cur] = {}
            continue
        m = re.match(r"ggml_vulkan:\s+([^:]+): ([-0-9.eE+]+)\s*$", line)
        if m and cur is not None:
            stats[cur][m.group(1).strip()] = float(m.group(2))
    if not stats:
        fail(f"--stats {path}: no 'pipeline stats for' lines (run llama.cpp with "
             "GGML_VK_PIPELINE_STATS=1 on a driver that reports statistics: panvk 26.x)")
    return stats


class Stats:
    def __init__(self, stats):
        self.stats = stats
        self.used = {}
        self.stand_ins = []

    def find(self, prefix, fallbacks=()):
        """The statistics of the first pipeline whose name starts with prefix (or a fallback
        prefix, recorded as a stand-in); None when llama.cpp printed none (then the op is
        costed by its memory traffic only)."""
        for p in (prefix, *fallbacks):
            names = sorted(n for n in self.stats if n.startswith(p))
            if names:
                note = f"{prefix} <- {names[0]}"
                if p != prefix and note not in self.stand_ins:
                    self.stand_ins.append(note)
                self.used[names[0]] = self.stats[names[0]]
                return names[0], self.stats[names[0]]
        return None, None


def dispatch(op, kernel, st, invocations, loop_factor, nbytes, flops=0.0, count=1.0):
    cycles = st.get("Cycles", 0.0) if st else 0.0
    threads = st.get("Threads") if st else None
    return {
        "op": op, "kernel": kernel or f"{op} (no statistics: memory only)", "count": count,
        "invocations": float(invocations), "cycles": cycles, "loop_factor": float(loop_factor),
        "bytes": float(nbytes), "occupancy": (min(threads / 2.0, 1.0) if threads else None),
        "spills": st.get("Spills", 0.0) if st else 0.0, "flops": float(flops),
        "pipes": ([st.get("FMA", 0.0), st.get("CVT", 0.0), st.get("SFU", 0.0),
                   st.get("Load/store", 0.0)] if st else None),
    }


def wbytes(t, rows, k):
    b, v = BLOCK.get(t, (4, 1))
    return rows * math.ceil(k / v) * b


def mmq_variant(n):
    return "s" if n <= 32 else ("m" if n <= 64 else "l")


VALHALL_LS = ("LOAD", "STORE", "LD_PKA", "LEA_PKA")  # load/store-unit opcodes (285 = 285)


def parse_shader_dump(path):
    """{pipeline: loop profile} from llama.cpp's stderr with BIFROST_MESA_DEBUG=shaders and
    GGML_VK_PIPELINE_STATS=1: each pipeline's statistics follow its shader's dump, whose last
    block listing is the final code. The profile: load/store instructions (the pipe that bounds
    every llama.cpp matmul) of the whole shader, of each loop (by back edges), and the loops'
    nesting, in code order."""
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        fail(f"--shader-dump {path}: {e}")
    out, listing, cur = {}, [], None
    for line in lines:
        m = re.match(r"ggml_vulkan: pipeline stats for (\S+):", line)
        if m:
            if listing:
                out[m.group(1)] = loop_profile(listing)
            listing = []
            continue
        if line.startswith("shader: "):
            listing = []
        m = re.match(r"^(block\d+) \{", line)
        if m:
            if m.group(1) == "block0":
                listing = []  # a later listing of the same shader replaces the earlier
            cur = {"name": m.group(1), "ls": 0, "n": 0, "succ": []}
            listing.append(cur)
            continue
        if line.startswith("}") and cur is not None:
            # "} -> block3 block2  from block1", or a bare "}" for the exit block; the
            # encoded disassembly that follows belongs to no block.
            m = re.match(r"^\}\s*->(.*?)(from.*)?$", line)
            cur["succ"] = re.findall(r"block\d+", m.group(1)) if m else []
            cur = None
            continue
        if cur is not None and line.strip():
            op = re.search(r"(?:= |^\s+)([A-Z_0-9]+)", line)
            if op:
                cur["n"] += 1
                cur["ls"] += op.group(1) in VALHALL_LS
    if not out:
        fail(f"--shader-dump {path}: no shader listing followed by 'pipeline stats for' (run "
             "llama.cpp with BIFROST_MESA_DEBUG=shaders GGML_VK_PIPELINE_STATS=1)")
    return out


def loop_profile(blocks):
    idx = {b["name"]: i for i, b in enumerate(blocks)}
    preds = {b["name"]: [] for b in blocks}
    for b in blocks:
        for t in b["succ"]:
            if t in preds:
                preds[t].append(b["name"])
    loops = []
    for i, b in enumerate(blocks):
        for h in b["succ"]:
            if h in idx and idx[h] <= i:  # a back edge to the loop's header
                body, stack = {h, b["name"]}, [b["name"]]
                while stack:
                    x = stack.pop()
                    if x != h:
                        for p in preds[x]:
                            if p not in body:
                                body.add(p)
                                stack.append(p)
                loops.append({"first": idx[h], "body": body,
                              "ls": sum(blocks[idx[x]]["ls"] for x in body)})
    loops.sort(key=lambda l: l["first"])
    return {"ls": sum(b["ls"] for b in blocks), "instructions": sum(b["n"] for b in blocks),
            "loops": [{"ls": l["ls"], "first": l["first"],
                       "inside": [j for j, o in enumerate(loops)
                                  if o is not l and l["body"] < o["body"]]}
                      for l in loops]}


def mmq_loop_factor(profile, wtype, variant, k):
    """How many times the loops repeat what the statistics count once, for a mul_mmq of K = k,
    from its loop profile: (outer trips x trip-weighted load/store per outer iteration + the
    code outside the loop) / the statistics' load/store. None when the profile is not mul_mmq's
    shape (one outer loop holding three)."""
    loops = profile["loops"]
    outer = [i for i, l in enumerate(loops) if not l["inside"]]
    if len(outer) != 1 or len(loops) != 4 or profile["ls"] <= 0:
        return None
    inner = [l for l in loops if l["inside"] == [outer[0]]]
    if len(inner) != 3:
        return None
    bm, bn, threads = MMQ_TILES[variant]
    trips_a = math.ceil(bm / (threads * LOAD_VEC_A.get(wtype, LOAD_VEC_A["q4_k"]) / 32))
    trips_b = math.ceil(bn / (threads * LOAD_VEC_B / 32))
    a, b, kstep = (l["ls"] for l in inner)
    o = loops[outer[0]]["ls"]
    per_iter = trips_a * a + trips_b * b + MMQ_BK_STEP * kstep + (o - a - b - kstep)
    outside = profile["ls"] - o
    return (math.ceil(k / (MMQ_BK * MMQ_BK_STEP)) * per_iter + outside) / profile["ls"]


# {pipeline: loop profile} of --shader-dump; empty without it.
PROFILES = {}
STAND_IN_PROFILES = []


def matmul(S, op, wtype, m_rows, k, n):
    """One mul_mmq dispatch: m_rows outputs of W (m_rows x k) for n tokens."""
    variant = mmq_variant(n)
    bm, bn, threads = MMQ_TILES[variant]
    name, st = S.find(f"matmul_{wtype}_q8_1_{MMQ_SUFFIX[variant]}",
                      (f"matmul_q4_k_q8_1_{MMQ_SUFFIX[variant]}", f"matmul_{wtype}_q8_1",
                       f"matmul_{wtype}", "matmul_q4_k_q8_1"))
    inv = math.ceil(m_rows / bm) * math.ceil(n / bn) * threads
    nbytes = wbytes(wtype, m_rows, k) + n * k * 1.125 + n * m_rows * 4
    loops = math.ceil(k / MMQ_BK)
    prof = PROFILES.get(name)
    if prof is None and PROFILES:
        # Another type's profile of the same tile stands in (same template, same loops).
        same = sorted(p for p in PROFILES if p.endswith(f"_q8_1_{MMQ_SUFFIX[variant]}"))
        if same:
            prof = PROFILES[same[0]]
            note = f"{name} loops <- {same[0]}"
            if note not in STAND_IN_PROFILES:
                STAND_IN_PROFILES.append(note)
    if prof is not None:
        weighted = mmq_loop_factor(prof, wtype, variant, k)
        if weighted is not None:
            loops = weighted
    return dispatch(op, name, st, inv, loops, nbytes, 2.0 * m_rows * k * n)


def quantize(S, op, n, k):
    name, st = S.find("quantize_q8_1")
    return dispatch(op + ".quantize", name, st, n * k / QUANT_VALUES_PER_THREAD, 1,
                    n * k * (4 + 1.125))


def memory_op(S, op, prefix, nbytes, invocations=0.0):
    name, st = S.find(prefix) if prefix else (None, None)
    return dispatch(op, name, st, invocations, 1, nbytes)


def ubatch(S, sh, types, n, pos0, last):
    H, F, hd = sh["hidden"], sh["ffn"], sh["head_dim"]
    qw, kvw = sh["heads"] * hd, sh["kv_heads"] * hd
    out = [memory_op(S, "token_embd", "get_rows", n * (H * 4 + wbytes(types("token_embd"), 1, H)))]
    for layer in range(sh["layers"]):
        t = lambda name: types(f"blk.{layer}.{name}")  # noqa: E731
        out.append(memory_op(S, "attn_norm", "rms_norm", 8 * n * H))
        out.append(quantize(S, "attn_qkv", n, H))
        for name, rows in (("attn_q", qw), ("attn_k", kvw), ("attn_v", kvw)):
            out.append(matmul(S, name, t(name), rows, H, n))
            if sh["bias"]:
                out.append(memory_op(S, name + ".bias", "add_f32", 12 * n * rows))
        out.append(memory_op(S, "rope_q", "rope_neox_f32", 8 * n * qw, n * qw / 2))
        # RoPE of K fused with its f16 cache write, then V's cache write.
        out.append(memory_op(S, "rope_k+set_rows", "rope_neox_f32_f16", 6 * n * kvw, n * kvw / 2))
        out.append(memory_op(S, "set_rows_v", "set_rows_f32_f16", 6 * n * kvw, n * kvw))
        name, st = S.find("flash_attn_f32_f16")
        kv = pos0 + n
        out.append(dispatch("flash_attn", name, st,
                            math.ceil(n / FA_ROWS) * sh["heads"] * FA_THREADS,
                            math.ceil(kv / FA_COLS),
                            8 * n * qw + 4 * kv * kvw, 4.0 * n * kv * qw))
        out.append(quantize(S, "attn_output", n, qw))
        out.append(matmul(S, "attn_output", t("attn_output"), H, qw, n))
        out.append(memory_op(S, "residual_add", "add_f32", 12 * n * H))
        out.append(memory_op(S, "ffn_norm", "rms_norm", 8 * n * H))
        out.append(quantize(S, "ffn_gate_up", n, H))
        out.append(matmul(S, "ffn_gate", t("ffn_gate"), F, H, n))
        out.append(matmul(S, "ffn_up", t("ffn_up"), F, H, n))
        out.append(memory_op(S, "ffn_swiglu", "swiglu", 12 * n * F))
        out.append(quantize(S, "ffn_down", n, F))
        out.append(matmul(S, "ffn_down", t("ffn_down"), H, F, n))
        out.append(memory_op(S, "residual_add", "add_f32", 12 * n * H))
    if last:
        out.append(memory_op(S, "output_norm", "rms_norm", 8 * H))
        ot = types("output") if types("output") != "?" else types("token_embd")
        # The last row's logits: one mat-vec over the whole output matrix, costed by the bytes
        # it streams (its thread layout is not modelled here).
        V = sh["vocab"]
        d = dispatch("output", f"mul_mat_vec_{ot} (memory only)", None, 0, 1,
                     wbytes(ot, V, H) + 4 * V, 2.0 * V * H)
        out.append(d)
    return out


def merge(ds):
    out = {}
    for d in ds:
        key = (d["op"], d["kernel"], d["invocations"], d["loop_factor"], d["bytes"])
        if key in out:
            out[key]["count"] += d["count"]
        else:
            out[key] = dict(d)
    return list(out.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stats", required=True, help="llama.cpp's stderr with GGML_VK_PIPELINE_STATS=1")
    ap.add_argument("--model", help="the GGUF the stats run used (shape and tensor types)")
    ap.add_argument("--shape", help="JSON shape instead of --model: hidden, layers, heads, "
                    "kv_heads, head_dim, ffn, vocab, bias")
    ap.add_argument("--weight", default="q4_k", help="with --shape: every weight's type")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens")
    ap.add_argument("--ubatch", type=int, default=512)
    ap.add_argument("--name", help="what the list is (default from the inputs)")
    ap.add_argument("--statistics", default="llama.cpp's pipelines on Mesa 26.1.6 panvk "
                    "(mali-shim26), GGML_VK_PIPELINE_STATS")
    ap.add_argument("--shader-dump", help="the same run's stderr with BIFROST_MESA_DEBUG=shaders "
                    "too: weight mul_mmq's loops by their real trips (from the driver's final "
                    "code) instead of K / 32 for the whole shader")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    if a.shader_dump:
        # A listing is taken for its pipeline only where it is that pipeline's code: its
        # instruction and load/store counts are the statistics printed after it.
        dump_stats = parse_stats(a.shader_dump)
        for name, prof in parse_shader_dump(a.shader_dump).items():
            st = dump_stats.get(name, {})
            if (st.get("Instructions"), st.get("Load/store")) == (prof["instructions"], prof["ls"]):
                PROFILES[name] = prof
            else:
                print(f"{name}: the listing before its statistics is not its code "
                      f"({prof['instructions']} instructions, {prof['ls']} load/store against "
                      f"{st.get('Instructions')} and {st.get('Load/store')}): not used",
                      file=sys.stderr)
        for name, prof in sorted(PROFILES.items()):
            if name.startswith("matmul_"):
                print(f"{name}: load/store {prof['ls']} of {prof['instructions']} instructions; "
                      f"loops (code order, load/store, inside): "
                      + ", ".join(f"{l['ls']} in {l['inside']}" for l in prof["loops"]))
    if a.p < 1 or a.ubatch < 1:
        fail("-p and --ubatch must be at least 1")
    S = Stats(parse_stats(a.stats))
    if a.model:
        meta, tensors = read_gguf(a.model)
        sh = shape_of(meta, tensors)
        types = lambda name: tensors.get(name + ".weight", ("?", ()))[0]  # noqa: E731
        label = a.model.rsplit("/", 1)[-1]
    elif a.shape:
        try:
            sh = json.loads(a.shape)
        except json.JSONDecodeError as e:
            fail(f"--shape: not JSON ({e})")
        sh.setdefault("bias", False)
        types = lambda name: a.weight  # noqa: E731
        label = f"shape {a.shape} ({a.weight})"
    else:
        fail("give --model or --shape")
    missing = [k for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab")
               if not sh.get(k)]
    if missing:
        fail(f"the model's shape lacks {', '.join(missing)}")
    ds = []
    n_ub = math.ceil(a.p / a.ubatch)
    for u in range(n_ub):
        pos0 = u * a.ubatch
        ds += ubatch(S, sh, types, min(a.ubatch, a.p - pos0), pos0, u + 1 == n_ub)
    notes = "; ".join(S.stand_ins + STAND_IN_PROFILES)
    if a.shader_dump:
        a.statistics += "; mul_mmq loops weighted by their trips (--shader-dump)"
    lst = {
        "name": a.name or f"llama.cpp {label} pp{a.p} ub {a.ubatch}",
        "statistics": a.statistics + (f"; stand-ins: {notes}" if notes else ""),
        "tokens": float(a.p),
        "submits": float(n_ub),
        "dispatches": merge(ds),
    }
    with open(a.output, "w") as f:
        json.dump(lst, f, indent=1)
    # The statistics table: what the driver says of each pipeline the list uses.
    print(f"{'pipeline':<34} {'cycles':>8} {'fma':>7} {'cvt':>7} {'sfu':>7} {'ls':>7} "
          f"{'regs':>4} {'occ':>4} {'spills':>6}")
    for name, st in sorted(S.used.items()):
        print(f"{name:<34} {st.get('Cycles', 0):>8.2f} {st.get('FMA', 0):>7.2f} "
              f"{st.get('CVT', 0):>7.2f} {st.get('SFU', 0):>7.2f} {st.get('Load/store', 0):>7.2f} "
              f"{st.get('Registers used', 0):>4.0f} {st.get('Threads', 0) / 2:>4.1f} "
              f"{st.get('Spills', 0):>6.0f}")
    print(f"{sum(d['count'] for d in lst['dispatches']):.0f} dispatches in {n_ub} ubatches "
          f"-> {a.output}")


if __name__ == "__main__":
    main()
