#!/usr/bin/env python3
"""tests/pool/region_cases.py: regions and tagged sleep (docs/SLEEP.md).
Runs region_preload against the fake libcuda.so.1 with
LD_PRELOAD=libpagefast.so and checks what it prints.

Usage: region_cases.py tags|limits|limit|async|cycles|refused|exit|partial|self|waiter|fork|reuse|reuse_race --build <build dir>
"""
import sys

from preload_kit import check, exit_with_failures, expect_ok, run_program


def run(build, args, env=None):
    return run_program(build, "region_preload", args, env=env)


def main():
    what = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if what == "tags":
        # The default chunk, and small chunks (a tag's memory in many).
        for conf in ["", "chunk_size:2M"]:
            r = run(build, ["tags"], env={"PAGEFAST_CONF": conf, "PAGEFAST_LOG": "info"})
            expect_ok(r, "tags", f"pagefast [{conf or 'default'}]")
            check("no region ever had that tag" in r.stderr, f"[{conf}] an unknown tag is named in the log")
            check("refused: a tag is" in r.stderr, f"[{conf}] a bad tag is named in the log")
            check("is open on 1 thread(s) while it sleeps" in r.stderr,
                  f"[{conf}] a region open elsewhere while it sleeps is named")
    elif what == "limits":
        r = run(build, ["limits"], env={"PAGEFAST_LOG": "warn", "PAGEFAST_CONF": "chunk_size:2M"})
        expect_ok(r, "limits", "pagefast")
        check("too many tags" in r.stderr and "too many regions open" in r.stderr,
              f"the limits are named in the log ({r.stderr[-300:]})")
    elif what == "refused":
        r = run(build, ["refused"], env={"PAGEFAST_LOG": "warn"})
        expect_ok(r, "refused", "pagefast")
    elif what == "exit":
        r = run(build, ["exit"], env={"PAGEFAST_LOG": "info"})
        expect_ok(r, "exit", "pagefast")
        check('"held" is open on 1 thread(s)' in r.stderr, f"a region open on a live thread is named ({r.stderr[-300:]})")
        check('"exited" is open' not in r.stderr, f"a region of an exited thread counts as open ({r.stderr[-300:]})")
    elif what == "partial":
        r = run(build, ["partial"], env={"FAKECUDA_DEVICES": "2", "PAGEFAST_LOG": "warn"})
        expect_ok(r, "partial", "pagefast, 2 devices")
        check("a partial sleep (1)" in r.stderr, f"a partial sleep is named in the log ({r.stderr[-300:]})")
    elif what == "self":
        r = run(build, ["self"], env={"PAGEFAST_LOG": "warn"})
        expect_ok(r, "self", "pagefast")
    elif what == "waiter":
        r = run(build, ["waiter"], env={"PAGEFAST_LOG": "warn"})
        expect_ok(r, "waiter", "pagefast")
    elif what == "fork":
        r = run(build, ["fork"], env={"PAGEFAST_LOG": "warn"})
        expect_ok(r, "fork", "pagefast")
    elif what == "reuse":
        for conf in ["chunk_size:2M", ""]:
            r = run(build, ["reuse"], env={"PAGEFAST_CONF": conf, "PAGEFAST_LOG": "warn"})
            expect_ok(r, "reuse", f"pagefast [{conf or 'default'}]")
    elif what == "reuse_race":
        r = run(build, ["reuse_race", "500"], env={"PAGEFAST_CONF": "chunk_size:2M"})
        expect_ok(r, "reuse_race", "pagefast chunk_size:2M, 4 threads of 500 regions")
    elif what == "limit":
        for conf in ["limit:64M", "limit:64M,chunk_size:2M"]:
            r = run(build, ["limit"], env={"PAGEFAST_CONF": conf})
            expect_ok(r, "limit", f"pagefast [{conf}]")
    elif what == "async":
        r = run(build, ["async"], env={"PAGEFAST_LOG": "warn"})
        expect_ok(r, "async", "pagefast")
        check(r.stderr.count("stream-ordered pool (cudaMallocAsync) stay resident") == 1,
              f"the driver's pool is named once, while it holds memory ({r.stderr[-300:]})")
    elif what == "cycles":
        r = run(build, ["cycles", "1000"], env={"PAGEFAST_CONF": "chunk_size:2M"})
        expect_ok(r, "cycles", "pagefast chunk_size:2M, 1000 cycles")
    else:
        check(False, f"unknown case {what}")
    exit_with_failures()


if __name__ == "__main__":
    main()
