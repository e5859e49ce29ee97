#!/usr/bin/env python3
"""Checks kernels' registers and spills in `ptxas -v` output against budgets.

The V100's decode speed rests on how many blocks of a few kernels fit an SM
(docs/KERNEL-NOTES.md, docs/V100.md), and no V100 is at hand to notice when
a change costs one. scripts/ci-sm70.sh keeps ptxas 12.9's -v output of every
portable kernel file and runs this on it.

    ptxas-budgets.py BUDGETS INFO...

BUDGETS: one budget a line, `regex max_registers max_spill_bytes  # why`,
optionally ending `smem=N`: at most N bytes of static shared memory (where a
kernel's dynamic shared memory leaves that much for blocks to fit an SM);
the regex must match at least one demangled entry name (a budget that
matches nothing would pass whatever happened to the kernel). INFO: files of
`ptxas -v` output (stderr). Exit status 1 when a kernel is over its budget
or a budget matches nothing. --self-test checks that an over-budget kernel
and a budget matching nothing are both caught.
"""
import re
import subprocess
import sys


def entries(text):
    """(demangled name, registers, spill store bytes, static shared memory bytes)
    of each entry function."""
    mangled, found, spill = None, [], 0
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            mangled, spill = m.group(1), 0
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and mangled:
            spill = int(m.group(1))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and mangled:
            smem = re.search(r"(\d+) bytes smem", line)
            found.append((mangled, int(m.group(1)), spill, int(smem.group(1)) if smem else 0))
            mangled = None
    if not found:
        return []
    names = subprocess.run(["c++filt"], input="\n".join(f[0] for f in found), capture_output=True,
                           text=True, check=True).stdout.splitlines()
    return [(name,) + f[1:] for name, f in zip(names, found)]


def parse_budgets(text):
    budgets = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        max_smem = None
        m = re.search(r"\s+smem=(\d+)$", line)
        if m:
            max_smem, line = int(m.group(1)), line[:m.start()]
        pattern, regs, spill = line.rsplit(None, 2)
        budgets.append((number, re.compile(pattern), int(regs), int(spill), max_smem))
    return budgets


def check(budgets, kernels, out=sys.stdout):
    failures = 0
    for number, pattern, max_regs, max_spill, max_smem in budgets:
        matched = [k for k in kernels if pattern.search(k[0])]
        if not matched:
            print(f"ptxas-budgets: budget line {number} ({pattern.pattern}) matches no kernel", file=out)
            failures += 1
        for name, regs, spill, smem in matched:
            if regs > max_regs or spill > max_spill:
                print(f"ptxas-budgets: {name}: {regs} registers, {spill} bytes spilled; "
                      f"budget {max_regs} and {max_spill} (line {number})", file=out)
                failures += 1
            if max_smem is not None and smem > max_smem:
                print(f"ptxas-budgets: {name}: {smem} bytes of static shared memory; "
                      f"budget {max_smem} (line {number})", file=out)
                failures += 1
    return failures


def self_test():
    info = ("ptxas info    : Compiling entry function '_Z1kv' for 'sm_70'\n"
            "    0 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads\n"
            "ptxas info    : Used 130 registers, used 1 barriers, 640 bytes smem\n")
    kernels = entries(info)
    assert kernels == [("k()", 130, 12, 640)], kernels
    sink = open("/dev/null", "w")
    assert check(parse_budgets(r"^k\(\) 128 64"), kernels, sink) == 1, "registers over budget not caught"
    assert check(parse_budgets(r"^k\(\) 255 0"), kernels, sink) == 1, "spill over budget not caught"
    assert check(parse_budgets(r"^nothing 255 64"), kernels, sink) == 1, "a budget matching nothing passed"
    assert check(parse_budgets(r"^k\(\) 130 12"), kernels, sink) == 0, "a kernel within budget failed"
    assert check(parse_budgets(r"^k\(\) 130 12 smem=512"), kernels, sink) == 1, "static smem over budget passed"
    assert check(parse_budgets(r"^k\(\) 130 12 smem=640"), kernels, sink) == 0, "static smem within budget failed"


def main(argv):
    self_test()
    if argv[1:] == ["--self-test"]:
        return 0
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 64
    budgets = parse_budgets(open(argv[1]).read())
    kernels = []
    for path in argv[2:]:
        kernels += entries(open(path).read())
    failures = check(budgets, kernels)
    if failures:
        return 1
    print(f"ptxas-budgets: {len(budgets)} budgets hold ({len(kernels)} kernels read)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
