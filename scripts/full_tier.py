#!/usr/bin/env python3
"""full_tier.py — the full tier of tests (tests/full_tier.txt): the tests CI does not run.

  full_tier.py regex TIER                 a CTest regex matching exactly the tier's tests
  full_tier.py check TIER DOC LISTING     exit 1 naming each tier test that is not a test of
                                          LISTING (`ctest -N` output) or not "Passed" in DOC
  full_tier.py document TIER LOG OUT      OUT (Markdown) from a `ctest -R <regex>` log of the tier

A name ending in '*' is every test whose name starts with the rest (a value-parameterized
instantiation: `CorpusRest/RealConfig.*`); it must match at least one test, and each must pass.

Used by scripts/test.sh (regex, check) and scripts/test-full-tier.sh (regex, document).
"""
import datetime
import os
import re
import subprocess
import sys


def names(tier):
    """The tier's test names: each line's text before '#' (comment lines give none)."""
    return [n for n in (line.split("#", 1)[0].strip() for line in open(tier, encoding="utf-8")) if n]


def pattern(n):
    return re.escape(n[:-1]) + ".*" if n.endswith("*") else re.escape(n)


def matching(n, tests):
    """The tests a tier name stands for: itself, or with a trailing '*' every test it prefixes."""
    return sorted(t for t in tests if t.startswith(n[:-1])) if n.endswith("*") else [n] if n in tests else []


def regex(tier):
    # A value-parameterized test's CTest name carries gtest's "  # GetParam() = ..." after its name.
    return "^(" + "|".join(pattern(n) for n in names(tier)) + ")(  # GetParam\\(\\) = .*)?$"


RESULT = re.compile(r"Test\s+#\d+: (\S+)(?:  # GetParam\(\) = .*?)? \.*\s*(\**\s*[A-Za-z][A-Za-z ]*?)\s+([0-9.]+) sec")


def check(tier, doc, listing):
    tests = set(re.findall(r"Test\s+#\d+: (\S+)", open(listing, encoding="utf-8").read()))
    try:
        text = open(doc, encoding="utf-8").read()
    except OSError:
        text = ""
    passed = set(re.findall(r"^\| `([^`]+)` \| Passed \|", text, re.M))
    bad = []
    for n in names(tier):
        found = matching(n, tests)
        if not found:
            bad.append(f"{n}: not a test (renamed or removed? edit tests/full_tier.txt)")
        for t in found:
            if t not in passed:
                bad.append(f"{t}: not Passed in {doc} (run scripts/test-full-tier.sh)")
    for b in bad:
        print("full tier: " + b, file=sys.stderr)
    return 1 if bad else 0


def document(tier, log, out):
    results = {m.group(1): (m.group(2).strip("* ").strip(), float(m.group(3)))
               for m in RESULT.finditer(open(log, encoding="utf-8", errors="replace").read())}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    lines = ["# The full tier: tests CI does not run (tests/full_tier.txt)", "",
             f"Written by scripts/test-full-tier.sh on {datetime.date.today().isoformat()} at commit {commit} "
             "(the working tree it built); scripts/test.sh fails while a tier test is not Passed here.", "",
             "| test | result | seconds |", "|---|---|---:|"]
    tier_names = [t for n in names(tier) for t in (matching(n, results) or [n])]
    total = 0.0
    for n in tier_names:
        result, secs = results.get(n, ("not run", 0.0))
        total += secs
        lines.append(f"| `{n}` | {result} | {secs:.1f} |")
    lines += ["", f"{len(tier_names)} tests, {total:.0f} s of test time (serial sum)."]
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(out + ".tmp", out)
    return 0 if all(results.get(n, ("",))[0] == "Passed" for n in tier_names) else 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "regex" and len(sys.argv) == 3:
        print(regex(sys.argv[2]))
    elif cmd == "check" and len(sys.argv) == 5:
        sys.exit(check(*sys.argv[2:]))
    elif cmd == "document" and len(sys.argv) == 5:
        sys.exit(document(*sys.argv[2:]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
