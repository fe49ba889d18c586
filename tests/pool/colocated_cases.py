#!/usr/bin/env python3
"""tests/pool/colocated_cases.py: a colocated RL step (docs/SLEEP.md "What
it is for"). Runs colocated_rl (colocated_rl.cpp) against the fake
libcuda.so.1 with LD_PRELOAD=libpagefast.so: process A keeps its weights,
discards its KV cache and replays a captured kernel; process B, started by
A with the same environment (pagefast preloaded), opens the weights over
CUDA IPC while the KV cache sleeps. 100 steps, contents checked after each.

Usage: colocated_cases.py rl --build <build dir>
"""
import sys

from preload_kit import check, exit_with_failures, expect_ok, run_program

STEPS = 100


def main():
    what = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if what == "rl":
        # The default chunk, and small chunks (the weights over many).
        for conf in ["", "chunk_size:2M"]:
            r = run_program(build, "colocated_rl", ["trainer", str(STEPS)],
                            env={"PAGEFAST_CONF": conf, "PAGEFAST_LOG": "warn", "FAKECUDA_TOTAL_MEM": "8G"})
            label = f"pagefast [{conf or 'default'}], {STEPS} steps"
            expect_ok(r, f"colocated {STEPS} steps", label)
            print(f"[{conf or 'default'}] {r.stdout.strip().splitlines()[-1] if r.stdout.strip() else '(no output)'}")
            # Each step B's open of the asleep kv block is refused, and says why.
            named = r.stderr.count("its pool is asleep")
            check(named >= STEPS, f"{label}: the refused opens of the asleep kv cache are named ({named} warnings)")
    else:
        check(False, f"unknown case {what}")
    exit_with_failures()


if __name__ == "__main__":
    main()
