#!/usr/bin/env python3
"""tests/tools/test_tms_bench.py: tools/gpu/tms-bench (pause and resume of
torch_memory_saver's regions, pagefast's drop-in against the real package)
without a GPU: it compiles, --dry-run prints the real package's build and
one command per side and starts nothing, bad arguments and a missing
library or source are refused, and the result lines and table read the
workers' records right.

Usage: test_tms_bench.py tools/gpu/tms-bench
"""
import importlib.machinery
import importlib.util
import os
import sys
import tempfile

from gpu_script_kit import check, compiles, run, status


def load(tool):
    loader = importlib.machinery.SourceFileLoader("tms_bench", tool)
    spec = importlib.util.spec_from_loader("tms_bench", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        compiles(tool, tmp)
        source = os.path.join(tmp, "tms")
        os.makedirs(source)
        open(os.path.join(source, "setup.py"), "w").close()
        lib = os.path.join(tmp, "libpagefast.so")
        r = run(tool, ["--dry-run", "--source", source, "--lib", lib])
        sides = [l for l in r.stdout.splitlines() if l.startswith("$ [")]
        check(r.returncode == 0 and [l.split("]")[0] for l in sides] == ["$ [pagefast", "$ [real", "$ [real-retained"],
              "--dry-run prints one command per side, in order (%r %r)" % (r.stdout, r.stderr))
        check(r.stdout.count("-DTMS_HOOK_MODE_") == 2, "--dry-run prints the real package's build, both hook modes")
        check("RESULT" not in r.stdout and not os.path.exists(os.path.join(source, "..", "WORK")),
              "--dry-run starts nothing")
        if len(sides) == 3:
            check("LD_PRELOAD=%s" % lib in sides[0] and "tms_alias" in sides[0], "the drop-in side runs preloaded, "
                  "with the alias first on PYTHONPATH")
            check("LD_PRELOAD" not in sides[1] and "--kept-gib 20 --dropped-gib 2 --cycles 3" in sides[1],
                  "the real side without pagefast, 20 GiB kept, 2 dropped, 3 cycles")
        r = run(tool, ["--dry-run", "--sides", "nope"])
        check(r.returncode == 2 and "unknown side" in r.stderr, "an unknown side: exit 2")
        r = run(tool, ["--sides", "pagefast", "--lib", lib])
        check(r.returncode == 2 and "is missing" in r.stderr, "a missing library: exit 2, nothing run")
        r = run(tool, ["--sides", "real", "--source", tmp])
        check(r.returncode == 2 and "tms-fetch" in r.stderr, "no source of the real package: exit 2")
    bench = load(tool)
    rec = {"side": "real", "cycle": 2, "pause_s": 0.4, "resume_s": 0.5, "pause_gibs": 50.0, "resume_gibs": 40.0,
           "pause_pct": 98.0, "resume_pct": 80.0, "d2h_gibs": 51.0, "h2d_gibs": 50.0, "freed_gib": 22.0,
           "intact": False}
    line = bench.result_line(rec)
    check(line.startswith("RESULT tms-bench side=real cycle=2 pause_s=0.400") and "intact=no" in line,
          "a cycle's result line (%s)" % line)
    check(bench.result_line({"side": "x", "error": "exit-1"}) == "RESULT tms-bench side=x error=exit-1",
          "an error's result line")
    rows = bench.table([rec, {"side": "x", "error": "exit-1"}])
    check(len(rows) == 4 and "WRONG" in rows[2] and "98% of 51.0" in rows[2] and "error: exit-1" in rows[3],
          "the table: a row per record, wrong contents and errors shown")
    return status()


if __name__ == "__main__":
    sys.exit(main())
