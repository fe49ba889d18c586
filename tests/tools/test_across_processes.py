#!/usr/bin/env python3
"""tests/tools/test_across_processes.py: tools/gpu/across-processes (memory
one process empties reaching another on a GPU, with PyTorch) without a
GPU: it compiles, --dry-run prints one plan line per pair and starts
nothing, an unknown pair and a bad count are refused. Its behaviour on the
fake driver is the test 'across processes' (tests/pool/across_cases.py).

Usage: test_across_processes.py tools/gpu/across-processes
"""
import sys
import tempfile

from gpu_script_kit import check, compiles, run, status


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        compiles(tool, tmp)
        r = run(tool, ["--dry-run", "--build", tmp])
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and len(lines) == 5 and all(l.startswith("plan: pair ") for l in lines),
              "--dry-run prints one plan line per pair (%r %r)" % (r.stdout, r.stderr))
        check(any("pair keep-on: A 'keep_idle:100' B ''" in l for l in lines),
              "keep-on: A keeps its idle memory, B runs pagefast")
        check(any("pair off-off: A None B None" in l for l in lines), "off-off: neither runs pagefast")
        check("RESULT" not in r.stdout, "--dry-run starts nothing (no RESULT line)")
        r = run(tool, ["--dry-run", "--pairs", "on-off,bogus"])
        check(r.returncode != 0 and "unknown pair" in r.stderr, "an unknown pair is refused")
        r = run(tool, ["--dry-run", "--runs", "0"])
        check(r.returncode != 0, "--runs 0 is refused")
    sys.exit(status())


if __name__ == "__main__":
    main()
