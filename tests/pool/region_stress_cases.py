#!/usr/bin/env python3
"""tests/pool/region_stress_cases.py: tagged and untagged pools growing
together on a full device (region_stress.cpp against the fake libcuda.so.1
with LD_PRELOAD=libpagefast.so).

Usage: region_stress_cases.py grow|share|small|prelock --build <build dir>

'grow' runs the program 20 times under a limit and 10 times at the
driver's own out-of-memory answer (a 64 MiB device, no setting): each run
must end, every thread having got memory and found its bytes intact. A run
that does not end within its guard is a hang (the guard is generous: it
fails only a program that never ends, never a slow machine)."""
import subprocess
import sys

from preload_kit import check, exit_with_failures, expect_ok, run_program

GUARD_S = 120


def run(build, args, env):
    try:
        return run_program(build, "region_stress", args, env=env, timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        return None


def main():
    what = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if what == "grow":
        settings = [({"PAGEFAST_CONF": "limit:64M,chunk_size:2M"}, 20),
                    ({"PAGEFAST_CONF": "limit:64M"}, 5),
                    ({"FAKECUDA_TOTAL_MEM": "64M"}, 10),
                    ({"FAKECUDA_TOTAL_MEM": "64M", "PAGEFAST_CONF": "chunk_size:2M"}, 5)]
        for env, runs in settings:
            label = " ".join(f"{k}={v}" for k, v in env.items())
            for i in range(runs):
                r = run(build, ["grow", "6", "8"], env)
                check(r is not None, f"[{label}] run {i}: no end within {GUARD_S} s (a hang)")
                if r is None:
                    break
                expect_ok(r, "grow", f"[{label}] run {i}")
    elif what == "share":
        r = run(build, ["share"], {"PAGEFAST_CONF": "limit:64M,chunk_size:2M"})
        check(r is not None, "share: a hang")
        if r is not None:
            expect_ok(r, "share", "limit:64M,chunk_size:2M")
    elif what == "small":
        r = run(build, ["small"], {})
        check(r is not None, "small: a hang")
        if r is not None:
            expect_ok(r, "small", "default settings")
    elif what == "prelock":
        # The trim thread page-locks ahead by default; sleep_prelock:0 none.
        for args, env in [(["prelock"], {}), (["prelock", "none"], {"PAGEFAST_CONF": "sleep_prelock:0"}),
                          (["prelock", "big"], {})]:
            r = run(build, args, env)
            check(r is not None, f"{args} {env}: a hang")
            if r is not None:
                expect_ok(r, "prelock", f"{args} {env}")
    else:
        check(False, f"unknown case {what}")
    exit_with_failures()


if __name__ == "__main__":
    main()
