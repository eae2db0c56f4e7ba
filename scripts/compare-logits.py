#!/usr/bin/env python3
"""Two engines' logits for the same tokens, side by side (docs/cuda.md).

Each file is float32 little-endian, n_tokens x n_vocab (ds4 --dump-logits,
ds4-ref-runner logits --out). Prints one JSON line: rows, the share of rows
whose top token agrees, the worst row's largest |a - b| over that row's
largest |b|, the median of that, and the worst row's cosine similarity.
Exits 1 when the files differ in size or are not whole rows, 2 when
--min-top1 / --max-rel are given and missed.

  scripts/compare-logits.py OURS.bin REF.bin N_VOCAB [--min-top1 0.9] [--max-rel 0.05]
"""
import argparse
import array
import json
import math
import os
import statistics
import sys


def rows_of(path, n_vocab):
    size = os.path.getsize(path)
    if size % (4 * n_vocab) != 0:
        sys.exit(f"compare-logits: {path} ({size} bytes) is not whole rows of {n_vocab} float32")
    values = array.array("f")
    with open(path, "rb") as f:
        values.fromfile(f, size // 4)
    if sys.byteorder != "little":
        values.byteswap()
    return [values[i * n_vocab:(i + 1) * n_vocab] for i in range(size // (4 * n_vocab))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ours")
    p.add_argument("ref")
    p.add_argument("n_vocab", type=int)
    p.add_argument("--min-top1", type=float)
    p.add_argument("--max-rel", type=float)
    a = p.parse_args()
    ours, ref = rows_of(a.ours, a.n_vocab), rows_of(a.ref, a.n_vocab)
    if len(ours) != len(ref) or not ours:
        sys.exit(f"compare-logits: {len(ours)} rows against {len(ref)}")
    same, rels, cosines = 0, [], []
    for x, y in zip(ours, ref):
        same += max(range(len(x)), key=x.__getitem__) == max(range(len(y)), key=y.__getitem__)
        scale = max(abs(v) for v in y) or 1e-30
        rels.append(max(abs(u - v) for u, v in zip(x, y)) / scale)
        dot = sum(u * v for u, v in zip(x, y))
        nx = math.sqrt(sum(u * u for u in x))
        ny = math.sqrt(sum(v * v for v in y))
        cosines.append(dot / (nx * ny) if nx > 0 and ny > 0 else 0.0)
    r = {"rows": len(ours), "top1": same / len(ours), "max_rel": max(rels), "median_rel": statistics.median(rels),
         "min_cosine": min(cosines)}
    print(json.dumps(r))
    if (a.min_top1 is not None and r["top1"] < a.min_top1) or (a.max_rel is not None and r["max_rel"] > a.max_rel):
        sys.exit(2)


if __name__ == "__main__":
    main()
