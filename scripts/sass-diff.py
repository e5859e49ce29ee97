#!/usr/bin/env python3
"""Compares the SASS of two nvdisasm listings kernel by kernel.

    sass-diff.py [--rename REGEX=REPLACEMENT]... [--params] OLD.sass NEW.sass
    sass-diff.py --self-test

A kernel is named by its demangled name (c++filt), with the file's
anonymous-namespace hash set aside. --rename rewrites the new listing's
names (Python regex on the demangled name, applied in order) so that a
kernel that gained a template argument is compared with the one it was,
e.g. --rename ', false>\(=>>(' for a new last template argument. Instructions are
compared without addresses, encodings, spacing or label numbers; the
constant-bank offsets of kernel parameters (c[0x0][...]) are set aside
too unless --params is given (a parameter struct that grew moves them).
Prints how many of the old listing's kernels are the same, differ or are
gone, and the first differences; exits 1 where any differs or is gone.
"""
import argparse
import difflib
import re
import subprocess
import sys


def kernels(path, keep_params):
    out, name, body = {}, None, []
    for line in open(path):
        m = re.match(r"//-+ \.text\.(\S+) -+", line)
        if m:
            if name:
                out[name] = body
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        s = line.strip()
        if not s or s.startswith(".") or s.startswith("_Z"):  # directives, the name
            continue
        if s.startswith("//"):  # section banners (the listing's last: SYMBOLS)
            continue
        s = s.replace(name, "SELF")  # the kernel's own name (its return labels)
        s = re.sub(r"/\*[0-9a-f]{4,}\*/", "", s)  # addresses
        s = re.sub(r"/\* 0x[0-9a-f]+ \*/", "", s)  # encodings
        s = re.sub(r"\.L_x_\d+", "L", s)
        s = re.sub(r"\$__internal_\d+_", "$__internal_", s)  # helpers' file-wide numbers
        s = re.sub(r"__[0-9a-f]{8}_", "__H_", s)
        if not keep_params:
            s = re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[param]", s)
        body.append(" ".join(s.split()))
    if name:
        out[name] = body
    return out


def demangled(names):
    text = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                          check=True).stdout.split("\n")
    return {n: re.sub(r"_GLOBAL__N__[0-9a-f]+_[^:]*", "anon", d) for n, d in zip(names, text)}


def compare(old, new, renames):
    """(same, [(name, old body, new body)], [gone names]) of two parsed listings."""
    old_names, new_names = demangled(list(old)), demangled(list(new))
    renamed = {}
    for mangled, name in new_names.items():
        for rule in renames:
            pattern, _, replacement = rule.partition("=>")
            name = re.sub(pattern, replacement, name)
        renamed.setdefault(name, mangled)
    same, differ, gone = 0, [], []
    for mangled, name in old_names.items():
        if name not in renamed:
            gone.append(name)
        elif old[mangled] == new[renamed[name]]:
            same += 1
        else:
            differ.append((name, old[mangled], new[renamed[name]]))
    return same, differ, gone


def self_test():
    """Listings in nvdisasm -c's shape: a kernel k<int> whose parameter
    moved, and one that gained a bool template argument."""
    def listing(param, extra, bool_arg):
        name = "_Z1kIiEvv" if not bool_arg else "_Z1kIiLb0EEvv"
        return (f"//------- .text.{name} -------\n\t.section .text.{name}\n{name}:\n"
                f"        /*0000*/                   LDC R1, c[0x0][{param}] ;  /* 0x000 */\n"
                f"{extra}        /*0010*/                   EXIT ;\n")
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def parsed(text, keep_params=False):
            path = os.path.join(d, "x.sass")
            open(path, "w").write(text)
            return kernels(path, keep_params)
        base = parsed(listing("0x28", "", False))
        assert compare(base, parsed(listing("0x38", "", False)), [])[0] == 1
        assert len(compare(parsed(listing("0x28", "", False), True),
                           parsed(listing("0x38", "", False), True), [])[1]) == 1
        longer = listing("0x28", "        /*0008*/                   NOP ;\n", False)
        assert len(compare(base, parsed(longer), [])[1]) == 1
        gained = parsed(listing("0x28", "", True))
        assert len(compare(base, gained, [])[2]) == 1
        assert compare(base, gained, [r", false>\(=>>("])[0] == 1
    print("sass-diff: self-test passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rename", action="append", default=[], metavar="REGEX=REPLACEMENT")
    ap.add_argument("--params", action="store_true", help="compare parameter offsets too")
    ap.add_argument("old")
    ap.add_argument("new")
    a = ap.parse_args()
    old, new = kernels(a.old, a.params), kernels(a.new, a.params)
    same, differ, gone = compare(old, new, a.rename)
    print(f"sass-diff: {len(old)} old kernels, {len(new)} new: {same} the same, "
          f"{len(differ)} differ, {len(gone)} gone")
    for name in gone[:5]:
        print(f"  gone: {name}")
    for name, x, y in differ[:3]:
        print(f"  differs: {name} ({len(x)} -> {len(y)} instructions)")
        for line in list(difflib.unified_diff(x, y, lineterm="", n=0))[2:12]:
            print(f"    {line}")
    return 0 if not differ and not gone else 1


if __name__ == "__main__":
    sys.exit(main())
