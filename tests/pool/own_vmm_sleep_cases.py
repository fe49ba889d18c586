#!/usr/bin/env python3
"""tests/pool/own_vmm_sleep_cases.py: sleep and wake by tag of the
program's own VMM memory (docs/OWN-VMM.md "Sleep and wake"): runs a case
of own_vmm_preload (linked with the fake libcuda.so.1) under
LD_PRELOAD=libpagefast.so, with the own-VMM cache on and off, and checks
that it ran to its end.

The cases call the tagged sleep's C API (pagefast_region_begin/end,
pagefast_sleep_tag, pagefast_wake_tag: interpose/pool/sleep.cpp).

Usage: own_vmm_sleep_cases.py <case> --build <build dir>
"""
import sys

from preload_kit import check, expect_ok, failures, run_program

CASES = {"tagged", "collide", "asleep_calls", "wake_fail", "cycles", "fork", "resident", "map_gap", "released_mapped", "multicast",
         "pool_only", "copy_threads", "prelock", "wake_overlap"}


def main():
    if len(sys.argv) != 4 or sys.argv[2] != "--build" or sys.argv[1] not in CASES:
        print(__doc__)
        return 2
    name, build = sys.argv[1], sys.argv[3]
    # copy_threads: also with the host memory given back after each wake;
    # prelock: also with nothing page-locked ahead.
    extra = {"copy_threads": ["sleep_host_keep:off"], "prelock": ["sleep_prelock:0"]}.get(name, [])
    for conf in ["", "vmm_cache:off"] + extra:
        if name == "wake_overlap":  # a chunk per block
            conf = ",".join(c for c in [conf, "chunk_size:2M"] if c)
        env = {"PAGEFAST_CONF": conf} if conf else {}
        r = run_program(build, "own_vmm_preload", [name], env=env)
        expect_ok(r, name, f"pagefast [{conf or 'default'}]")
        if name == "tagged":
            # Everything of the tags slept: no line names memory left resident.
            check("stay resident" not in r.stderr, f"[{conf or 'default'}] nothing stayed resident ({r.stderr[-400:]})")
        if name == "resident":
            # One line per handle left, saying why.
            lines = [l for l in r.stderr.splitlines() if "stay resident" in l]
            check(len(lines) == 2 and any("exported or imported" in l for l in lines) and
                  any("mapped nowhere" in l for l in lines) and all("4.0 MiB" in l for l in lines),
                  f"[{conf or 'default'}] the log names each handle left resident ({r.stderr[-600:]})")
            # By the tag the program gave, never by an internal slot number.
            check(lines and all('tag "t" (' in l and "slot" not in l for l in lines),
                  f"[{conf or 'default'}] the lines name the tag ({lines})")
        if name == "multicast":
            # Each bound handle named once per sleep, with its reason.
            lines = [l for l in r.stderr.splitlines() if "bound to a multicast object" in l]
            check(len(lines) == 2 + 3, f"[{conf or 'default'}] the log names each bound handle ({r.stderr[-600:]})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
