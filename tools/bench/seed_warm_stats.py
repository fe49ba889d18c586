#!/usr/bin/env python3
"""tools/bench/seed_warm_stats.py FILE: the medians, spread and ratios of
tools/bench/seed-warm's output (label RESULT ... lines), per pass."""
import re
import statistics
import sys

runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) RESULT .*first_s=([\d.]+) second_s=([\d.]+) after_empty_cache_s=([\d.]+)", line)
    if m:
        runs.setdefault(m.group(1), []).append([float(m.group(i)) for i in (2, 3, 4)])
base = runs.get("without")
print("| runs | pass | median s | min | max | median / without |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for label, rows in runs.items():
    for i, name in enumerate(["first", "second", "after empty_cache"]):
        vals = [r[i] for r in rows]
        med = statistics.median(vals)
        ratio = med / statistics.median(r[i] for r in base) if base else float("nan")
        print(f"| {label} ({len(rows)}) | {name} | {med:.5f} | {min(vals):.5f} | {max(vals):.5f} | {ratio:.3f} |")
