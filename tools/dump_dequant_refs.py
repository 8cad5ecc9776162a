#!/usr/bin/env python3
"""Reference data for rocky's GGML block-format tests (models/tests/formats_vs_gguf_py.rs), made
with the `gguf` package (gguf-py), an implementation independent of rocky's Rust code.

usage:
  dump_dequant_refs.py MODEL.gguf OUTDIR [--source F32_MODEL.gguf] [--max-mb 19]
      For each tensor type present in MODEL, a few tensors (the smallest, a middle one and the
      largest; tensors too big for the byte budget are cut to their leading rows) are written as
        NAME.raw      the tensor's bytes exactly as stored in MODEL (raw GGML blocks)
        NAME.f32      gguf.quants.dequantize of those bytes, little-endian float32
        NAME.src.f32  (with --source) the same rows of the same-named tensor of an all-F32 model,
                      when MODEL was quantized from it by llama-quantize: the Rust test quantizes
                      these and compares with llama-quantize's bytes in NAME.raw.
  dump_dequant_refs.py --synthetic OUTDIR [--seed 1] [--types Q4_1,Q5_1]
      Types the test models lack (Q4_0, Q5_K, BF16, F16) and data no model holds:
        rand-TYPE     random but valid raw blocks (every bit random, f16 scales random finite,
                      including subnormals, zeros and negative values) with their dequantization;
        quant-TYPE    gguf.quants.quantize of seeded test data (Gaussian plus adversarial blocks:
                      zeros, constants, one outlier, tiny values, exact rounding ties) for every
                      type gguf-py can quantize: NAME.src.f32 is the input, NAME.raw gguf-py's
                      blocks, NAME.f32 their dequantization.

Both modes write OUTDIR/index.json last ({"tensors": [{name, type, n_elements, row_len, raw, f32,
source?}]}), so a directory holding index.json is complete. Types are GGML names (Q4_K, BF16).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

# The types rocky dequantizes (models/src/formats); other types in a model are skipped.
SUPPORTED = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]

# Byte offsets of the f16 scale fields inside one block (ggml-common.h block_* structs).
F16_FIELDS = {
    T.Q8_0: [0],
    T.Q4_0: [0],
    T.Q5_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_1: [0, 2],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}


class Writer:
    def __init__(self, outdir):
        self.outdir = outdir
        self.entries = []
        self.bytes = 0

    def add(self, name, qtype, row_len, raw, source=None):
        """raw: uint8 array of whole rows of `qtype` blocks; source: optional float32 original."""
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        ref = gguf.quants.dequantize(raw, qtype).astype("<f4", copy=False)
        entry = {
            "name": name,
            "type": qtype.name,
            "n_elements": int(ref.size),
            "row_len": int(row_len),
            "raw": name + ".raw",
            "f32": name + ".f32",
        }
        self._write(entry["raw"], raw.tobytes())
        self._write(entry["f32"], ref.tobytes())
        if source is not None:
            src = np.ascontiguousarray(source, dtype="<f4")
            assert src.size == ref.size, name
            entry["source"] = name + ".src.f32"
            self._write(entry["source"], src.tobytes())
        self.entries.append(entry)

    def _write(self, fname, data):
        with open(os.path.join(self.outdir, fname), "wb") as f:
            f.write(data)
        self.bytes += len(data)

    def finish(self, meta):
        meta = dict(meta, gguf_version=getattr(gguf, "__version__", None) or package_version(),
                    tensors=self.entries)
        with open(os.path.join(self.outdir, "index.json"), "w") as f:
            json.dump(meta, f, indent=1)


def package_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "unknown"


def row_view(t):
    """The tensor's bytes as (rows, bytes per row) uint8, rows along ggml's ne[1..]."""
    row_len = int(t.shape[0])
    n_rows = int(t.n_elements) // row_len
    return np.asarray(t.data).view(np.uint8).reshape(n_rows, -1), row_len


def dump_model(args):
    reader = gguf.GGUFReader(args.model)
    source = None
    if args.source:
        source = {t.name: t for t in gguf.GGUFReader(args.source).tensors}

    by_type = {}
    for t in reader.tensors:
        if t.tensor_type in SUPPORTED:
            by_type.setdefault(t.tensor_type, []).append(t)
    if not by_type:
        sys.exit(f"{args.model}: no tensor of a supported type")

    # Types with little data (F32 norms) go first and leave what they do not use to the others.
    budget = args.max_mb * 1e6
    order = sorted(by_type.items(), key=lambda kv: sum(int(t.n_bytes) for t in kv[1]))
    w = Writer(args.tmpdir)
    for i, (qtype, tensors) in enumerate(order):
        budget_per_type = (budget - w.bytes) / (len(order) - i)
        tensors.sort(key=lambda t: (int(t.n_elements), t.name))
        picks = [tensors[0], tensors[len(tensors) // 2], tensors[-1]]
        picks = [t for j, t in enumerate(picks) if t.name not in {p.name for p in picks[:j]}]
        spent = 0.0
        for k, t in enumerate(picks):
            raw, row_len = row_view(t)
            src_rows = None
            if source is not None and t.name in source:
                s = source[t.name]
                if int(s.n_elements) == int(t.n_elements) and s.tensor_type == T.F32:
                    src_rows = np.asarray(s.data, dtype=np.float32).reshape(raw.shape[0], row_len)
            # bytes one row costs in the output: raw + reference (+ source)
            per_row = raw.shape[1] + 4 * row_len * (2 if src_rows is not None else 1)
            # Smallest first; each pick may use an equal share of what the earlier ones left.
            left = (budget_per_type - spent) / (len(picks) - k)
            rows = raw.shape[0]
            name = t.name
            if rows * per_row > left:
                rows = max(1, int(left // per_row))
                name = f"{t.name}.rows0-{rows - 1}"
            w.add(name, qtype, row_len, raw[:rows], None if src_rows is None else src_rows[:rows])
            spent += rows * per_row
    w.finish({"model": os.path.basename(args.model),
              "source_model": os.path.basename(args.source) if args.source else None})
    return w


def random_f16_scales(rng, n):
    """Random finite f16 bit patterns (any sign, exponent 0..30: zeros, subnormals, normals)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    exp = (bits >> 10) & 0x1F
    bits = np.where(exp == 0x1F, bits & ~np.uint32(0x1F << 10), bits)  # inf/nan -> zero/subnormal
    return bits.astype("<u2")


def random_blocks(rng, qtype, n_blocks):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if qtype == T.F16:
        return random_f16_scales(rng, n_blocks).view(np.uint8)
    if qtype == T.BF16:
        bits = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint32)
        exp = (bits >> 7) & 0xFF
        bits = np.where(exp == 0xFF, bits & ~np.uint32(0xFF << 7), bits)
        return bits.astype("<u2").view(np.uint8)
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_f16_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def test_data(rng, n, block):
    """Seeded quantizer input: mostly Gaussian, plus adversarial blocks."""
    x = rng.standard_normal(n, dtype=np.float32)
    x[: n // 2] *= np.float32(0.02)
    blocks = x.reshape(-1, block)
    nb = blocks.shape[0]
    def tie_block(b):
        # amax 127 makes Q8_0's scale exactly 1, so the other values x*id land on .5 ties
        b[:] = np.arange(block) % 64 - np.float32(31.5)
        b[0] = 127.0

    specials = [
        lambda b: b.fill(0.0),                                        # all zero
        lambda b: b.fill(0.37),                                       # constant
        lambda b: b.fill(-1.25),                                      # negative constant
        lambda b: b.__setitem__(block // 3, 100.0),                   # one outlier
        lambda b: b.__imul__(np.float32(1e-6)),                       # tiny: subnormal f16 scales
        tie_block,                                                    # exact rounding ties
        lambda b: b.__setitem__(slice(None), np.abs(b)),              # all positive
        lambda b: b.__setitem__(slice(None), -np.abs(b) - 1.0),       # all negative, offset
    ]
    for i, f in enumerate(specials):
        if i * 3 < nb:
            f(blocks[i * 3])
    return x


def dump_synthetic(args):
    rng = np.random.default_rng(args.seed)
    w = Writer(args.tmpdir)
    types = [T[name] for name in args.types.split(",")] if args.types else SUPPORTED
    for qtype in types:
        if qtype == T.F32:
            continue
        block_size, _ = GGML_QUANT_SIZES[qtype]
        n_blocks = 1024 if block_size == 32 else 256 if block_size == 256 else 8192
        raw = random_blocks(rng, qtype, n_blocks)
        w.add(f"rand-{qtype.name}", qtype, n_blocks * block_size, raw.reshape(1, -1))
    for qtype in types:
        block_size, _ = GGML_QUANT_SIZES[qtype]
        n = 64 * 256
        x = test_data(rng, n, max(block_size, 32))
        try:
            q = gguf.quants.quantize(x.reshape(1, n), qtype)
        except NotImplementedError:
            print(f"gguf {package_version()} cannot quantize {qtype.name}: skipped", file=sys.stderr)
            continue
        w.add(f"quant-{qtype.name}", qtype, n, np.asarray(q).view(np.uint8).reshape(1, -1), x)
    w.finish({"model": None, "synthetic_seed": args.seed})
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="GGUF model to take tensors from")
    ap.add_argument("outdir")
    ap.add_argument("--source", help="all-F32 GGUF that MODEL was quantized from")
    ap.add_argument("--max-mb", type=float, default=19.0, help="output budget for one model (MB)")
    ap.add_argument("--synthetic", action="store_true", help="write synthetic blocks instead of a model's")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--types", help="with --synthetic: comma-separated GGML type names instead of "
                    "the types rocky-models dequantizes (e.g. Q4_1,Q5_1)")
    args = ap.parse_args()
    if args.synthetic == (args.model is not None):
        ap.error("give either MODEL OUTDIR or --synthetic OUTDIR")

    # Work in OUTDIR.tmp and rename at the end: an interrupted run never leaves a directory that
    # looks complete.
    args.tmpdir = args.outdir.rstrip("/") + ".tmp"
    shutil.rmtree(args.tmpdir, ignore_errors=True)
    os.makedirs(args.tmpdir)
    w = dump_synthetic(args) if args.synthetic else dump_model(args)
    if os.path.isdir(args.outdir):
        shutil.rmtree(args.outdir)
    os.replace(args.tmpdir, args.outdir)
    print(f"wrote {args.outdir}: {len(w.entries)} tensors, {w.bytes / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
