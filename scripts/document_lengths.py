#!/usr/bin/env python3
"""document_lengths.py — the document-length distribution of a token corpus, as data.

Writes the exact histogram of document lengths (in tokens) of a Megatron-LM indexed dataset or a
flat token file, and nothing of its text: a user can extract it from a private corpus and share
it; `zerobench run --data lengths:FILE --batching pad|pack` then trains on synthetic tokens with
exactly those lengths (docs/data.md).

  document_lengths.py --data megatron:PREFIX --out lengths.json
  document_lengths.py --data tokens:PATH:uint16|uint32:eos=ID --out lengths.csv

Documents are read as zerobench reads them (models/token_data.cpp): a Megatron document is the
concatenation of its sequences (document_indices in PREFIX.idx); a flat file's document ends at,
and includes, the EOS id, and tokens after the last EOS are one more document. Empty documents
carry no tokens and are left out (counted on stderr).
"""
import argparse
import json
import struct
import sys

import numpy as np


def megatron_lengths(prefix):
    for ext in (".idx", ".bin"):
        if prefix.endswith(ext):
            prefix = prefix[: -len(ext)]
    with open(prefix + ".idx", "rb") as f:
        header = f.read(34)
        if len(header) < 34 or header[:9] != b"MMIDIDX\x00\x00":
            sys.exit(f"{prefix}.idx: not a Megatron-LM index (magic MMIDIDX)")
        (version,) = struct.unpack("<Q", header[9:17])
        if version != 1:
            sys.exit(f"{prefix}.idx offset 9: version {version}, not 1")
        n, d = struct.unpack("<QQ", header[18:34])
        seq = np.fromfile(f, dtype="<i4", count=n)
        np.fromfile(f, dtype="<i8", count=n)  # sequence_pointers
        doc = np.fromfile(f, dtype="<i8", count=d)
    if len(seq) != n or len(doc) != d:
        sys.exit(f"{prefix}.idx: cut off (sequence count {n}, document count {d})")
    cum = np.concatenate([[0], np.cumsum(seq.astype(np.int64))])
    return cum[doc[1:]] - cum[doc[:-1]]


def flat_lengths(path, dtype, eos):
    tokens = np.memmap(path, dtype="<u2" if dtype == "uint16" else "<u4", mode="r")
    ends = np.flatnonzero(tokens == eos) + 1
    bounds = np.concatenate([[0], ends, [len(tokens)] if (len(ends) == 0 or ends[-1] < len(tokens)) else []])
    return np.diff(bounds.astype(np.int64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="megatron:PREFIX or tokens:PATH:uint16|uint32:eos=ID")
    ap.add_argument("--out", required=True, help="FILE.json or FILE.csv")
    a = ap.parse_args()
    if a.data.startswith("megatron:"):
        lengths = megatron_lengths(a.data[len("megatron:"):])
    elif a.data.startswith("tokens:"):
        path, dtype, eos = a.data[len("tokens:"):].rsplit(":", 2)
        if dtype not in ("uint16", "uint32") or not eos.startswith("eos="):
            sys.exit(f"--data {a.data}: expected tokens:PATH:uint16|uint32:eos=ID")
        lengths = flat_lengths(path, dtype, int(eos[4:]))
    else:
        sys.exit(f"--data {a.data}: expected megatron:PREFIX or tokens:PATH:uint16|uint32:eos=ID")
    empty = int((lengths == 0).sum())
    if empty:
        print(f"document_lengths: {empty} empty documents left out", file=sys.stderr)
    values, counts = np.unique(lengths[lengths > 0], return_counts=True)
    histogram = [{"length": int(v), "count": int(c)} for v, c in zip(values, counts)]
    if a.out.endswith(".csv"):
        with open(a.out, "w") as f:
            f.write("length,count\n")
            f.writelines(f"{h['length']},{h['count']}\n" for h in histogram)
    else:
        doc = {"format": "zerobench-document-lengths", "version": 1, "documents": int(counts.sum()),
               "tokens": int((values * counts).sum()), "histogram": histogram}
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
