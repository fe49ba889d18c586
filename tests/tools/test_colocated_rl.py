#!/usr/bin/env python3
"""tests/tools/test_colocated_rl.py: tools/gpu/colocated-rl (a colocated RL
step on a GPU with PyTorch) without a GPU: it compiles, --dry-run prints
one plan line per configuration (the default allocator, and
expandable_segments:True) and starts nothing, bad arguments and a missing
library are refused.

Usage: test_colocated_rl.py tools/gpu/colocated-rl
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
        check(r.returncode == 0 and len(lines) == 2 and all(l.startswith("colocated-rl: plan: ") for l in lines),
              "--dry-run prints one plan line per configuration (%r %r)" % (r.stdout, r.stderr))
        if len(lines) == 2:
            check(lines[0].startswith("colocated-rl: plan: default: 100 steps")
                  and "PYTORCH_CUDA_ALLOC_CONF" not in lines[0], "the default allocator, 100 steps")
            check(lines[1].startswith("colocated-rl: plan: expandable: 100 steps")
                  and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in lines[1],
                  "expandable segments, 100 steps")
            check(all("LD_PRELOAD=%s/interpose/libpagefast.so" % tmp in l for l in lines),
                  "process A runs under the build's libpagefast.so")
        check("RESULT" not in r.stdout, "--dry-run starts nothing (no RESULT line)")
        r = run(tool, ["--dry-run", "--configs", "expandable", "--steps", "7"])
        check(r.returncode == 0 and r.stdout.count("\n") == 1 and "expandable: 7 steps" in r.stdout,
              "--configs and --steps are taken (%r)" % r.stdout)
        r = run(tool, ["--dry-run", "--configs", "nope"])
        check(r.returncode == 2 and "unknown configuration" in r.stderr, "an unknown configuration: exit 2")
        r = run(tool, ["--build", tmp])
        check(r.returncode == 2 and "libpagefast.so is missing" in r.stderr and "RESULT" not in r.stdout,
              "a build without the library: exit 2, nothing run")
    return status()


if __name__ == "__main__":
    sys.exit(main())
