#!/usr/bin/env python3
"""Where a decode step's time goes inside the decode graph, from the kernel
records of kernels/dev/trace_kernels.cpp (scripts/device-trace.sh runs it).

A step ends at the sampler's kernel_topk_merge: the decode graph, then the
top-k kernels launched after it (outside the graph). Within a step, each kernel
"adds" the time by which its end moves past the latest end of the kernels
that started before it: the chain's cost of that kernel (under programmatic
launch a kernel starts before its wait, so its start says little; its end is
exact). Kernels are labelled by their place in the layer: the RMSNorms split
a layer into the attention half (A) and the feed-forward half (F), and a
kernel's label is its half, its name and which launch of that name in the
half it is (#0, #1: q|k's matvec and o's; a fused q|k|v launch shares the
q|k label where its kernel is the same); after the last layer (the gather
of the logits' rows) O: the output norm, the output product, the top-k.
Prints, over the last --steps steps:
the step's span, then per label the launches a step, the mean time a launch
adds, the share of the step, and the mean span of a launch (end - start).

    python3 scripts/trace-step.py TRACE.csv [--steps 8]
"""
import argparse
import collections
import csv
import re
import subprocess


def short_names(mangled):
    """Demangled names without namespaces, parameters or long template arguments."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = list(mangled)
    names = {}
    for m, d in zip(mangled, out):
        d = re.sub(r"\(voltad::.*$", "", d)
        d = re.sub(r"^void ", "", d)
        d = re.sub(r"voltad::kernels::|\(anonymous namespace\)::|PackedFormat\)|\(voltad::kernels::", "", d)
        d = re.sub(r"\(int\)|\(bool\)", "", d)
        d = d.replace("voltad::", "")
        names[m] = d[:70]
    return names


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    rows = list(csv.DictReader(open(args.trace)))
    recs = sorted(((int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in rows), key=lambda r: r[0])
    names = short_names(sorted({r[2] for r in recs}))
    ends = [i for i, r in enumerate(recs) if "topk_merge" in names[r[2]]]
    n = min(args.steps, len(ends) - 1)
    if n < 1:
        raise SystemExit("trace-step: fewer than two steps (kernel_topk_merge) in the trace")
    adds = collections.defaultdict(float)
    spans = collections.defaultdict(float)
    count = collections.Counter()
    step_spans, graph_spans = [], []
    for s in range(len(ends) - n - 1, len(ends) - 1):
        step = recs[ends[s] + 1:ends[s + 1] + 1]
        # The step's chain starts where the previous step's last kernel ended.
        frontier = recs[ends[s]][1]
        step_spans.append(step[-1][1] - frontier)
        graph_spans.append(step[-1][1] - step[0][0])
        half, seen = "-", collections.Counter()
        for start, end, mangled in step:
            name = names[mangled]
            if "gather_rows" in name:  # the rows for the logits: past the last layer
                half = "O"
                seen.clear()
            elif "rmsnorm" in name and "head" not in name and half != "O":
                half = "A" if half != "A" else "F"
                seen.clear()
            label = f"{half} {name} #{seen[name]}"
            seen[name] += 1
            adds[label] += max(0, end - frontier)
            spans[label] += end - start
            count[label] += 1
            frontier = max(frontier, end)
    step_us = sum(step_spans) / len(step_spans) / 1e3
    graph_us = sum(graph_spans) / len(graph_spans) / 1e3
    print(f"== {n} decode steps: {step_us:.1f} us a step from the previous step's last kernel end, "
          f"{graph_us:.1f} from its first kernel's start (the rest: the gap between graph launches, "
          f"in the first kernel's adds; mostly the tracer's: voltad-bench --device-time gives the "
          f"host's own, ~7.5 us a step untraced in run 71)")
    print(f"{'label / kernel':<76} {'a step':>6} {'adds us':>8} {'share':>6} {'span us':>8}")
    order = sorted(adds, key=lambda k: ("AFO-".index(k[0]), -adds[k]))
    total = 0.0
    for label in order:
        per_step = count[label] / n
        add = adds[label] / count[label] / 1e3
        total += adds[label] / n / 1e3
        print(f"{label:<76} {per_step:6.1f} {add:8.2f} {adds[label] / n / 1e3 / step_us * 100:5.1f}% "
              f"{spans[label] / count[label] / 1e3:8.2f}")
    print(f"(the adds sum to {total:.1f} us a step)")


if __name__ == "__main__":
    main()
