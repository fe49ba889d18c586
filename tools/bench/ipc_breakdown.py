#!/usr/bin/env python3
"""tools/bench/ipc_breakdown.py: where CUDA IPC's opens and closes spend
their time, from the lines pagefast writes at PAGEFAST_LOG=debug
(interpose/ipc/ipc_import.cpp, ipc_open.cpp; docs/IPC.md):

  CUDA IPC open: connect C us, request R us, import I us, map M us, access A us (N MiB)
  CUDA IPC close: sync S us, unmap U us, exporter told T us (unmapped | mapping kept ...)
  CUDA IPC export: P piece(s) in E us            (the exporter's answer)

Usage: tools/bench/ipc_breakdown.py LOG [LOG ...]
Prints the medians of each step, with the opens that mapped a chunk (its
import, map and access) apart from those of a chunk mapped already, and
the closes that unmapped one apart from the others. The debug lines cost
time of their own: a run at debug shows the shares, not the figures to
compare with the driver (tools/gpu-run-all runs it apart)."""
import re
import statistics
import sys

OPEN = re.compile(r"CUDA IPC open: connect (\d+) us, request (\d+) us, import (\d+) us, map (\d+) us, "
                  r"access (\d+) us \((\d+) MiB\)")
CLOSE = re.compile(r"CUDA IPC close: sync (\d+) us, unmap (\d+) us, exporter told (\d+) us \((\w+)")
EXPORT = re.compile(r"CUDA IPC export: (\d+) piece\(s\) in (\d+) us")


def read(paths):
    """The steps of every open, close and export in the logs."""
    found = {"mapped": [], "held": [], "unmapped": [], "kept": [], "export": []}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                m = OPEN.search(line)
                if m:
                    connect, request, imp, mp, access, mib = (int(x) for x in m.groups())
                    kind = "mapped" if imp + mp + access > 0 else "held"
                    found[kind].append({"connect": connect, "request": request, "import": imp, "map": mp,
                                        "access": access, "MiB": mib})
                    continue
                m = CLOSE.search(line)
                if m:
                    sync, unmap, told = (int(x) for x in m.groups()[:3])
                    kind = "unmapped" if m.group(4) == "unmapped" else "kept"
                    found[kind].append({"sync": sync, "unmap": unmap, "told": told})
                    continue
                m = EXPORT.search(line)
                if m:
                    found["export"].append({"pieces": int(m.group(1)), "answer": int(m.group(2))})
    return found


TITLES = {
    "mapped": "opens that mapped their chunk",
    "held": "opens of a chunk mapped already (no driver call)",
    "unmapped": "closes that unmapped a chunk (its last block)",
    "kept": "closes that left the chunk mapped (another block open)",
    "export": "the exporter's answers (descriptors found or exported)",
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    found = read(sys.argv[1:])
    for kind, title in TITLES.items():
        rows = found[kind]
        if not rows:
            print("%s: none" % title)
            continue
        steps = ", ".join("%s %g" % (k, statistics.median(r[k] for r in rows)) for k in rows[0])
        print("%s: %d, medians (us; MiB): %s" % (title, len(rows), steps))
    return 0 if any(found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
