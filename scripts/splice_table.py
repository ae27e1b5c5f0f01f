#!/usr/bin/env python3
"""splice_table.py — puts a generated table between `<!-- NAME:begin -->` / `<!-- NAME:end -->`
markers in Markdown files (README.md, docs/*.md), or checks that it is there already. The tables
in README/docs are generated from committed results by the scripts that call this
(bench-table.sh, crossval-table.sh), never typed in.

  splice_table.py NAME write|--check TABLE_FILE FILE...
Exit 0 ok, 1 a file is out of date (--check), 2 a file lacks the markers."""
import sys


def main() -> int:
    if len(sys.argv) < 5 or sys.argv[2] not in ("write", "--check"):
        print("usage: splice_table.py NAME write|--check TABLE_FILE FILE...", file=sys.stderr)
        return 2
    name, mode, table_path, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    table = open(table_path).read()
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    status = 0
    for path in files:
        text = open(path).read()
        b, e = text.find(begin), text.find(end)
        if b < 0 or e < b:
            print(f"splice_table.py: {path} has no {name}:begin / {name}:end markers", file=sys.stderr)
            return 2
        new = text[: b + len(begin)] + table + text[e:]
        if new == text:
            continue
        if mode == "--check":
            print(f"splice_table.py: {path} is out of date (regenerate its {name} table)", file=sys.stderr)
            status = 1
        else:
            open(path, "w").write(new)
            print(f"splice_table.py: updated {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
