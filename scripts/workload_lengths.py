#!/usr/bin/env python3
"""workload_lengths.py — writes the document-length distribution `zerobench study workload` trains
on by default (docs/workload.md "The document lengths"), in the `zerobench-document-lengths` v1
format (docs/data.md). Seeded and dependency-free, so the committed files are reproducible:

  scripts/workload_lengths.py --seq-len 256  --out bench/configs/workload/doc_lengths_t256.json
  scripts/workload_lengths.py --seq-len 4096 --out bench/configs/workload/doc_lengths_t4096.json

Lengths are drawn in real tokens for a --context-token context (default 4096) from a log-normal
with median --median and shape --sigma, clipped to [1, --clip-factor x context], then scaled by
seq_len / context (rounded, at least --min-length), so a run at --seq-len T sees the same shape
relative to its rows as a real run at the full context. Documents longer than T stay in the file:
zerobench splits them into pieces of T tokens (docs/data.md "Batching")."""
import argparse
import json
import math
import os
import random
import sys
from collections import Counter


def lengths(args):
    rng = random.Random(args.seed)
    mu = math.log(args.median)
    scale = args.seq_len / args.context
    cap = args.clip_factor * args.context
    out = []
    for _ in range(args.documents):
        real = min(cap, max(1.0, rng.lognormvariate(mu, args.sigma)))
        out.append(max(args.min_length, int(round(real * scale))))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seq-len", type=int, required=True, help="the --seq-len the distribution is scaled to")
    p.add_argument("--out", required=True, help="FILE.json to write")
    p.add_argument("--context", type=int, default=4096, help="the real context the lengths are drawn for")
    p.add_argument("--median", type=float, default=300.0, help="median document length in real tokens")
    p.add_argument("--sigma", type=float, default=1.13, help="log-normal shape (mean = median x exp(sigma^2/2))")
    p.add_argument("--clip-factor", type=float, default=4.0, help="longest document, in contexts")
    p.add_argument("--min-length", type=int, default=2, help="shortest scaled document (2: at least one label)")
    p.add_argument("--documents", type=int, default=20000)
    p.add_argument("--seed", type=int, default=37)
    args = p.parse_args()
    for name in ("seq_len", "context", "documents", "min_length"):
        if getattr(args, name) < 1:
            print(f"workload_lengths.py: --{name.replace('_', '-')} {getattr(args, name)} must be at least 1", file=sys.stderr)
            return 2
    if not (args.median >= 1 and args.sigma > 0 and args.clip_factor > 0):
        print("workload_lengths.py: --median must be >= 1, --sigma and --clip-factor > 0", file=sys.stderr)
        return 2
    ls = lengths(args)
    hist = sorted(Counter(ls).items())
    doc = {
        "format": "zerobench-document-lengths",
        "version": 1,
        "documents": len(ls),
        "tokens": sum(ls),
        "histogram": [{"length": length, "count": count} for length, count in hist],
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, args.out)
    ls.sort()
    n = len(ls)
    longer = sum(1 for x in ls if x > args.seq_len)
    print(f"{args.out}: {n} documents, {sum(ls)} tokens; median {ls[n // 2]}, mean {sum(ls) / n:.1f}, "
          f"p90 {ls[int(0.9 * n)]}, max {ls[-1]}; {longer} ({100.0 * longer / n:.2f}%) longer than {args.seq_len}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
