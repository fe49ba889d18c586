#!/usr/bin/env python3
"""tests/tools/budget_bounds.py: a device's limit and headroom are its
budget's (policy/device_budget.h) and no one else's. The configuration
carries them as parsed (`limit`, `headroom`); after that, every part asks
the budget: the pool and its parts (DevicePool, LargeBlocks, the arena's
ceiling, SyncGate's batch sizes, the out-of-memory record), the budgeted
provider's cap, the own-VMM cache's room, cuMemGetInfo and trim.

No C or C++ source under interpose/ or policy/ reads a configuration's
`limit_bytes` or `headroom_bytes` (`config.limit_bytes`,
`g_config.headroom_bytes`, `settings_.config.limit_bytes`, `c.pool...`),
but:

  policy/config.*, policy/options.*   where they are parsed and printed;
  interpose/pool/device_memory.cpp    where the device's budget is made;
  interpose/pool/service_threads.cpp  whether the trim thread is needed at
                                      all, decided once from the
                                      configuration before any budget.

usage: budget_bounds.py --source DIR
       budget_bounds.py --self-test     the checker on trees made for it
"""
import argparse
import os
import re
import sys
import tempfile

from driver_seam import library_sources  # the same walk, comments out

ALLOWED = {
    "policy/config.h", "policy/config.cpp", "policy/options.h", "policy/options.cpp",
    "interpose/pool/device_memory.cpp", "interpose/pool/service_threads.cpp",
}
READ = re.compile(r"(?:config|\bpool)\s*(?:\.|->)\s*(limit_bytes|headroom_bytes)\b")


def offences(root):
    found = []
    for rel, text in library_sources(root, ALLOWED):
        for number, line in enumerate(text.split("\n"), 1):
            for m in READ.finditer(line):
                found.append(f"{rel}:{number}: reads the configuration's {m.group(1)}; ask the "
                             f"device's budget (policy/device_budget.h)")
    return found


def self_test():
    cases = [
        ("policy/large_blocks.cpp", "  if (settings_.config.limit_bytes) grow();\n", 1),
        ("interpose/pool/own_vmm.cpp", "  uint64_t room = g_config.headroom_bytes;\n", 1),
        ("policy/x.cpp", "  a = c.pool.limit_bytes + config->headroom_bytes;\n", 2),
        ("policy/y.cpp", "  // settings_.config.limit_bytes is the budget's now\n", 0),
        ("policy/z.cpp", "  if (budget_.limit_bytes()) o.limit_bytes = shortfall.limit_bytes;\n", 0),
        ("interpose/pool/device_memory.cpp", "  budget_(config.headroom_bytes, config.limit_bytes)\n", 0),
    ]
    failed = 0
    for rel, text, expected in cases:
        with tempfile.TemporaryDirectory() as root:
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path))
            with open(path, "w") as f:
                f.write(text)
            got = len(offences(root))
            if got != expected:
                print(f"self-test: {rel} {text.strip()!r}: {got} offences, expected {expected}")
                failed += 1
    print("self-test:", "ok" if not failed else f"{failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.source:
        ap.error("--source or --self-test")
    found = offences(args.source)
    for line in found:
        print(line)
    print(f"budget bounds: {len(found)} reads outside the budget")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
