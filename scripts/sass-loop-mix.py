#!/usr/bin/env python3
"""The instruction mix of a kernel's hottest loop in a cuobjdump -sass
listing (scripts/sm70-sass.sh writes one for the V100): for counting what a
loop iteration costs without running it.

usage: sass-loop-mix.py LISTING NAME-SUBSTRING...
       sass-loop-mix.py --self-test
  Each NAME-SUBSTRING picks the first kernel whose demangled name holds it.

The loop is the widest backward branch (the outermost loop: a kernel with
two loops one after the other, or a hot inner one, needs reading) before
the kernel's first
unconditional EXIT: code after that is out-of-line (the slow paths of
shuffles and warp syncs when lanes diverge), whose jumps back into the loop
are not loops. Memory, shuffle and tensor-core operations are counted with
their modifiers (LDS.U.128 apart from LDS.U.U16); the rest by opcode."""
import collections
import re
import sys

KEEP_MODIFIERS = {"LDS", "STS", "LDG", "STG", "LDL", "STL", "SHFL", "HMMA", "LDSM", "BAR", "ATOMS"}
LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def parse(listing):
    kernels = {}
    for part in listing.split("Function : ")[1:]:
        name = part.splitlines()[0].strip()
        ins = [(int(m.group(1), 16), m.group(2)) for m in map(LINE.match, part.splitlines()) if m]
        kernels[name] = ins
    return kernels


def opcode(text):
    op = re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0]
    return op if op.split(".")[0] in KEEP_MODIFIERS else op.split(".")[0]


def hottest_loop(ins):
    end = next((a for a, t in ins if re.match(r"EXIT\b", t)), ins[-1][0])
    index = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA(?:\.\w+)*\s+(?:`\()?0x([0-9a-f]+)", t)
        if not m or a > end:
            continue
        target = int(m.group(1), 16)
        if target <= a and target in index and (best is None or i - index[target] > best[1] - best[0]):
            best = (index[target], i)
    return best


def self_test():
    """A listing in cuobjdump's shape: an inner loop inside the main one, an
    exit, and an out-of-line slow path that jumps back into the loop."""
    listing = """
\t\tFunction : k(int)
        /*0000*/                   S2R R0, SR_LANEID ;
        /*0010*/                   LDS.U.128 R4, [R0] ;
        /*0020*/                   LDS.U.U16 R8, [R0+0x2] ;
        /*0030*/                   BRA.DIV 0x00a0 ;
        /*0040*/                   SHFL.IDX PT, R9, R8, RZ, 0x1f ;
        /*0050*/                   HMMA.884.F32.F32.STEP0 R12, R4.ROW, R6.COL, R12 ;
        /*0060*/              @!P0 BRA 0x0040 ;
        /*0070*/              @!P1 BRA.U 0x0010 ;
        /*0080*/                   EXIT ;
        /*0090*/                   BRA 0x0090 ;
        /*00a0*/                   CALL.REL.NOINC 0x00c0 ;
        /*00b0*/                   BRA 0x0000 ;
        /*00c0*/                   RET.REL.NODEC R2 0x0 ;
"""
    ins = parse(listing)["k(int)"]
    s, e = hottest_loop(ins)
    assert (ins[s][0], ins[e][0]) == (0x10, 0x70), (ins[s], ins[e])
    mix = collections.Counter(opcode(t) for _, t in ins[s:e + 1])
    assert mix["LDS.U.128"] == 1 and mix["LDS.U.U16"] == 1 and mix["SHFL.IDX"] == 1, mix
    assert mix["BRA"] == 3 and mix["HMMA.884.F32.F32.STEP0"] == 1 and sum(mix.values()) == 7, mix
    print("sass-loop-mix: self-test passed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        kernels = parse(f.read())
    for want in sys.argv[2:]:
        name = next((n for n in kernels if want in n), None)
        if name is None:
            sys.exit(f"sass-loop-mix: no kernel's name holds {want!r}")
        ins = kernels[name]
        loop = hottest_loop(ins)
        print(f"{name}\n  {len(ins)} instructions", end="")
        if loop is None:
            print("; no loop")
            continue
        s, e = loop
        mix = collections.Counter(opcode(t) for _, t in ins[s:e + 1])
        print(f"; loop {ins[s][0]:#x}-{ins[e][0]:#x}: {e - s + 1} an iteration")
        print("  " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items(), key=lambda kv: (-kv[1], kv[0]))))


if __name__ == "__main__":
    main()
