#!/usr/bin/env python3
"""write_megatron_dataset.py — writes PREFIX.bin + PREFIX.idx with megatron-core's own
IndexedDatasetBuilder (megatron/core/datasets/indexed_dataset.py), for tests/test_token_data.cpp.

stdin: {"prefix": "...", "dtype": "uint16" | "int32" | ..., "documents": [[[tok, ...], ...], ...]}
  each document a list of sequences (Megatron's items; preprocess_data.py writes one per sentence
  with --split-sentences, else one per document). A one-sequence document goes through
  add_document, a longer one through add_item per sequence and end_document: both builder paths.
Needs megatron-core in the venv (scripts/setup.sh --crossval).
"""
import json
import sys

import numpy
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder


def main() -> int:
    spec = json.load(sys.stdin)
    prefix = spec["prefix"]
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=getattr(numpy, spec["dtype"]))
    for doc in spec["documents"]:
        if len(doc) == 1:
            builder.add_document(torch.tensor(doc[0], dtype=torch.int64), [len(doc[0])])
        else:
            for seq in doc:
                builder.add_item(torch.tensor(seq, dtype=torch.int64))
            builder.end_document()
    builder.finalize(prefix + ".idx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
