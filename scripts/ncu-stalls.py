#!/usr/bin/env python3
"""Where a kernel's warps stall, from Nsight Compute's source page.

    ncu-stalls.py SOURCE.csv [--top N]
    ncu-stalls.py --self-test

SOURCE.csv: `ncu -i REPORT --page source --csv --print-source sass` of a
report collected with `--section WarpStateStats --section SourceCounters`
(scripts/device-profile.sh --stalls does both). For each profiled launch:
the warp instructions executed, the share of each stall reason over all
stall samples, and the N SASS instructions with the most samples, each with
its main reasons. The first thing to read before changing a kernel's loop
(docs/KERNEL-NOTES.md, run 21: 62% of the batch-1 matvec's samples waited
on its weights).
"""
import argparse
import collections
import csv
import sys


def launches(path):
    """[(kernel name, header, rows)] in file order."""
    out, cur = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                cur = [row[1], None, []]
                out.append(cur)
            elif cur is not None and cur[1] is None:
                cur[1] = row
            elif cur is not None:
                cur[2].append(row)
    return [tuple(x) for x in out if x[1] is not None]


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def report(name, header, rows, top):
    """Lines of text: totals, reason shares, the top instructions."""
    col = {c: i for i, c in enumerate(header)}
    reasons = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    samples_col = col["Warp Stall Sampling (All Samples)"]
    executed = sum(number(r[col["Instructions Executed"]]) for r in rows if len(r) == len(header))
    totals = collections.Counter()
    for r in rows:
        if len(r) != len(header):
            continue
        for c in reasons:
            totals[c] += number(r[col[c]])
    all_samples = sum(totals.values())
    lines = [f"== {name}", f"warp instructions executed: {executed:,.0f}; stall samples: {all_samples:,.0f}"]
    if all_samples == 0:
        lines.append("no stall samples (was SourceCounters collected?)")
        return lines
    lines.append("stall reasons: " + ", ".join(
        f"{c[6:]} {v / all_samples * 100:.1f}%" for c, v in totals.most_common(8) if v > 0))
    ranked = sorted((r for r in rows if len(r) == len(header)),
                    key=lambda r: -number(r[samples_col]))[:top]
    for r in ranked:
        s = number(r[samples_col])
        if s == 0:
            break
        main = sorted(((number(r[col[c]]), c[6:]) for c in reasons), reverse=True)[:2]
        why = ", ".join(f"{c} {v / s * 100:.0f}%" for v, c in main if v > 0)
        lines.append(f"  {s / all_samples * 100:5.1f}%  {r[col['Address']]:>18}  {r[col['Source']].strip()[:64]:64}  {why}")
    return lines


def self_test():
    """A two-launch file in ncu's shape: the shares and the ranking must come out."""
    import os
    import tempfile
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed",
              "stall_long_sb", "stall_math", "stall_long_sb (Not Issued)"]
    rows = [["Kernel Name", "void k1(int)"], header,
            ["0x10", "LDG.E.128 R4, [R2]", "1", "1", "100", "0", "1", "0"],
            ["0x20", "IDP.4A.S8.S8 R8, R4, R6, RZ", "9", "9", "100", "9", "0", "9"],
            ["Kernel Name", "void k2(int)"], header,
            ["0x10", "FADD R1, R2, R3", "4", "4", "1,000", "0", "4", "0"]]
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False, newline="") as f:
        csv.writer(f).writerows(rows)
    try:
        found = launches(f.name)
    finally:
        os.unlink(f.name)
    ok = len(found) == 2
    first = report(*found[0], top=5) if ok else []
    second = report(*found[1], top=5) if ok else []
    ok = ok and "warp instructions executed: 200; stall samples: 10" in first[1]
    ok = ok and first[2] == "stall reasons: long_sb 90.0%, math 10.0%"
    ok = ok and "IDP.4A" in first[3] and "LDG" in first[4]  # most samples first
    ok = ok and "1,000" in second[1] and "math 100.0%" in second[2]
    print("ncu-stalls: self-test " + ("passed" if ok else "FAILED:\n" + "\n".join(first + second)))
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    found = launches(args.csv)
    if not found:
        print(f"ncu-stalls: no kernel sections in {args.csv}", file=sys.stderr)
        return 1
    for name, header, rows in found:
        if "Warp Stall Sampling (All Samples)" not in header:
            print(f"ncu-stalls: {args.csv} has no stall columns (collect SourceCounters)", file=sys.stderr)
            return 1
        print("\n".join(report(name, header, rows, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
