"""Medians per variant of a runs.txt (`rN LABEL SECONDS` lines), and each over the import without a report."""
import collections
import statistics
import sys

d = collections.defaultdict(list)
with open(sys.argv[1]) as runs:
    for line in runs:
        r, *label, s = line.split()
        if r != "r0":  # round 0: warm-up
            d[" ".join(label)].append(float(s))
base = statistics.median(d["no-report"])
for k, v in d.items():
    m = statistics.median(v)
    print(f"{k:12s} n={len(v)} median {m:.3f} s  ratio {m/base:.2f}  min {min(v):.3f} max {max(v):.3f}")
