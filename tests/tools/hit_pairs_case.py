#!/usr/bin/env python3
"""The pool-hit benchmark's own check (tools/bench/hit-pairs and
tools/bench/hit-instructions) on the fake driver: every pair of the steady
loop is a pool hit, and, where valgrind is installed, callgrind counts a
non-zero number of instructions inside the measured loop (a count of 0
means the measured function was folded or renamed, and the benchmark
would report nothing). In an optimised build without sanitizers or
coverage, the counts must also stay under ceilings of about 1.25 to 1.5
times what they are (docs/BENCHMARKS.md): callgrind counts do not depend
on the machine's load, so only a change that makes the hit or the forward
longer (a lock, a system call, a lost inline path) fails it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


# Instructions of one 512-byte pool-hit pair (426 on gcc 12, -O3, of which
# about 147 are the fake driver's calls and the loop), and what the hooks
# add to forwarded calls (docs/BENCHMARKS.md "Instructions of a forwarded
# call"): a cuMemAllocAsync + cuMemFreeAsync (54), a cuPointerGetAttribute
# (62), a cuMemGetAddressRange (55), a cuMemGetInfo (64), a capture begun
# and ended (80). Ceilings about 1.4 times that, so that a lost inline
# path, a call or a lock on the way fails.
HIT_PAIR_CEILING = 600
# A pool-hit pair while another block of the pool is exported through CUDA
# IPC (hit-pairs `exported`) against the same pair with no export: the
# export's mark sends only its own block's free to IPC's bookkeeping, so the
# others' pairs stay hits (426.1 against 428.2 at 512 B, gcc 12 -O3; 566.2
# when every free took the export registry's lock while any export lived).
EXPORTED_ADDED_CEILING = 10
FORWARD_ADDED_CEILING = {"async": 80, "attribute": 90, "range": 80, "info": 90, "capture": 115}


def optimised(build):
    """Whether the build's counts are comparable with the ceilings."""
    with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
        options = {o["name"]: o["value"] for o in json.load(f)}
    return (options.get("optimization") in ("2", "3") and options.get("b_sanitize", "none") == "none"
            and not options.get("b_coverage", False))


# A steady loop of one big block on an 80 GB card (docs/POOL.md "Big
# blocks and the sync per pair"): after a warm-up long enough for the
# allowance's rate to settle, no pair grows, maps, opens, unmaps or releases
# anything; the only driver call left is the batch's shared sync, at most
# one every other pair (a 2 GiB rotation) and every fourth at 256 MiB.
BIG_SIZES = {256 << 20: 4, 1 << 30: 2, 2 << 30: 2}  # bytes: at least this many pairs a sync


def big_blocks(build, env):
    measured = 5000
    for size, pairs_per_sync in BIG_SIZES.items():
        e = dict(env, FAKECUDA_TOTAL_MEM="80G")
        e.pop("PAGEFAST_STATS", None)
        run = subprocess.run([os.path.join(build, "tools", "bench", "hit-pairs"), str(size), "200000", str(measured)],
                             env=e, capture_output=True, text=True, timeout=300)
        line = [l for l in run.stdout.splitlines() if l.startswith("driver_calls")]
        if run.returncode != 0 or "failures=0" not in run.stdout or not line:
            sys.exit("FAIL hit-pairs %d: %s%s" % (size, run.stdout, run.stderr))
        calls = dict((k, int(v)) for k, v in (kv.split("=") for kv in line[0].split()[1:]))
        # cuMemGetInfo_v2 is left out: the trim thread reads it for the
        # headroom, on its own thread, whenever its 100 ms come.
        made = {k: v for k, v in calls.items() if k in ("cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap",
                                                        "cuMemRelease") and v}
        syncs = calls["cuCtxSynchronize"]
        if made or syncs * pairs_per_sync > measured or syncs == 0:
            sys.exit("FAIL hit-pairs %d: a steady loop of %d pairs made %s" % (size, measured, line[0]))
        print("ok hit-pairs %d MiB, %d steady pairs: %s" % (size >> 20, measured, line[0]))


def exported_pairs(tool, build):
    """The pool-hit pair with another block exported costs what it costs
    without (EXPORTED_ADDED_CEILING): counted, not timed."""
    run = subprocess.run([sys.executable, tool, "--build", build, "--sizes", "512", "--pairs", "200", "--warm", "200",
                          "--calls", "alloc,exported"], capture_output=True, text=True, timeout=600)
    counts = {}
    for line in run.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[2] == "512" and cells[1] in ("alloc", "exported"):
            counts[cells[1]] = float(cells[3].split()[0])
    if run.returncode != 0 or len(counts) != 2 or min(counts.values()) <= 0:
        sys.exit("FAIL hit-instructions --calls alloc,exported: %s%s" % (run.stdout, run.stderr))
    if counts["exported"] > counts["alloc"] + EXPORTED_ADDED_CEILING:
        sys.exit("FAIL a pool-hit pair with another block exported: %.1f instructions against %.1f without"
                 % (counts["exported"], counts["alloc"]))
    print("ok hit-instructions: a pair with another block exported %.1f, without %.1f"
          % (counts["exported"], counts["alloc"]))


def pool_hits(build, env, stats, calls):
    """200 pairs of hit-pairs `calls` (alloc, or exported: with another
    block exported) under the library: every one a pool hit, by its stats."""
    run = subprocess.run([os.path.join(build, "tools", "bench", "hit-pairs"), "512", "100", "100", calls],
                         env=env, capture_output=True, text=True, timeout=120)
    if run.returncode != 0 or "failures=0" not in run.stdout:
        sys.exit("FAIL hit-pairs %s: %s%s" % (calls, run.stdout, run.stderr))
    device = json.load(open(stats))["pool"]["devices"][0]
    if device["hits"] < 200 or device["passthroughs"] != 0:
        sys.exit("FAIL the %s pairs were not pool hits: %s" % (calls, device))
    print("ok hit-pairs %s: %d hits" % (calls, device["hits"]))


def main():
    build = sys.argv[sys.argv.index("--build") + 1]
    source = sys.argv[sys.argv.index("--source") + 1]
    lib = os.path.join(build, "interpose", "libpagefast.so")
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "stats.json")
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "tests", "fakecuda"),
                   LD_PRELOAD=lib, PAGEFAST_STATS=stats)
        for calls in ["alloc", "exported"]:
            pool_hits(build, env, stats, calls)
        # The forwarded calls' loops run with and without the library, and
        # pagefast answers none of them from its pool.
        for calls in ["async", "attribute", "range", "info", "capture"]:
            for preload in [True, False]:
                e = dict(env)
                if not preload:
                    e.pop("LD_PRELOAD")
                run = subprocess.run([os.path.join(build, "tools", "bench", "hit-pairs"), "4096", "10", "10", calls],
                                     env=e, capture_output=True, text=True, timeout=120)
                if run.returncode != 0 or "failures=0" not in run.stdout:
                    sys.exit("FAIL hit-pairs %s (preload %s): %s%s" % (calls, preload, run.stdout, run.stderr))
        print("ok hit-pairs: the forwarded calls' loops, with and without pagefast")
        big_blocks(build, env)
    if shutil.which("valgrind") is None:
        print("ok (valgrind not installed: the instruction count is not checked)")
        return
    tool = os.path.join(source, "tools", "bench", "hit-instructions")
    run = subprocess.run([sys.executable, tool, "--build", build, "--sizes", "512", "--pairs", "200", "--warm", "200",
                          "--parts"], capture_output=True, text=True, timeout=600)
    row = [line for line in run.stdout.splitlines() if line.startswith("| alloc | 512 |")]
    # "426.0 = library 279.1 + driver 130.8 + loop 16.0": the parts add up,
    # and the driver (cuCtxGetCurrent at least) and the library both count.
    cell = row[0].split("|")[3].split() if row else []
    if run.returncode != 0 or len(cell) != 10 or float(cell[0]) <= 0:
        sys.exit("FAIL hit-instructions: %s%s" % (run.stdout, run.stderr))
    total, library, driver, loop = float(cell[0]), float(cell[3]), float(cell[6]), float(cell[9])
    if library <= 0 or driver <= 0 or loop < 0 or abs(library + driver + loop - total) > 0.5:
        sys.exit("FAIL hit-instructions --parts: %s" % row[0])
    bounded = optimised(build)
    if bounded and total > HIT_PAIR_CEILING:
        sys.exit("FAIL hit-instructions: a pool-hit pair over %d instructions: %s" % (HIT_PAIR_CEILING, row[0]))
    print("ok hit-instructions: " + row[0])
    exported_pairs(tool, build)
    # A forwarded call, the driver alone against the driver under pagefast:
    # both counted, and the difference shown.
    run = subprocess.run([sys.executable, tool, "--build", build, "--sizes", "4096", "--pairs", "100", "--warm", "50",
                          "--calls", ",".join(FORWARD_ADDED_CEILING), "--lib", "none", "--lib", lib],
                         capture_output=True, text=True, timeout=600)
    # Without the library, its part of the driver's own call is nothing:
    # the split finds every instruction in the driver and the loop.
    none = subprocess.run([sys.executable, tool, "--build", build, "--sizes", "4096", "--pairs", "100", "--warm", "50",
                           "--calls", "info", "--lib", "none", "--parts"], capture_output=True, text=True, timeout=600)
    row = [line for line in none.stdout.splitlines() if line.startswith("| info | 4096 |")]
    cell = row[0].split("|")[3].split() if row else []
    if none.returncode != 0 or len(cell) != 10 or abs(float(cell[3])) > 0.5 or float(cell[6]) <= 0:
        sys.exit("FAIL hit-instructions --parts without the library: %s%s" % (none.stdout, none.stderr))
    print("ok hit-instructions --parts without the library: " + row[0])
    for calls, ceiling in FORWARD_ADDED_CEILING.items():
        row = [line for line in run.stdout.splitlines() if line.startswith("| %s | 4096 |" % calls)]
        cells = row[0].split("|") if row else []
        if run.returncode != 0 or len(cells) < 6 or float(cells[3]) <= 0 or not cells[5].strip():
            sys.exit("FAIL hit-instructions --calls %s: %s%s" % (calls, run.stdout, run.stderr))
        if bounded and float(cells[5]) > ceiling:
            sys.exit("FAIL hit-instructions: a forwarded %s adds over %d instructions: %s" % (calls, ceiling, row[0]))
        print("ok hit-instructions: " + row[0])


if __name__ == "__main__":
    main()
