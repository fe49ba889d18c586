#!/usr/bin/env python3
"""tests/pool/headroom_cases.py: the headroom and out-of-memory cases
(docs/POOL.md "Headroom"). Runs headroom_preload (linked with the fake
libcuda.so.1) with and without LD_PRELOAD=libpagefast.so on a small fake
device, and checks what it prints.

Usage: headroom_cases.py <case> --build <build dir>
"""
import os
import re
import subprocess
import sys

from preload_kit import check, expect_ok, failures, run_program

MiB = 1 << 20
DEVICE = "2G"


def run(build, args, preload=True, env=None):
    return run_program(build, "headroom_preload", args, preload=preload,
                       env=dict({"FAKECUDA_TOTAL_MEM": DEVICE, "FAKECUDA_MODULE_MEM": "64M"}, **(env or {})),
                       timeout=240)


def extremes(build):
    """The settings' extremes against each other: every run ends (the
    bound is a guard against a hang, not a measure) and the pool then
    serves a mix of sizes with their data intact. Each prewarm against each
    headroom on a 1 GiB and a 16 GiB device, the limit and the other keys
    taking turns beside them."""
    prewarms = ["0", "900M", "13G", "{total}", "1T"]
    headrooms = ["", "0", "4G", "{total}", "1T"]
    limits = ["", "2M", "512M", "{total}", "1T"]
    others = ["", "chunk_size:2M", "chunk_size:1T", "release_threshold:0", "release_delay:0",
              "release_delay:off", "big_chunks:off", "slack:off,idle_share:0", "chunk_size:2M,release_threshold:0"]
    # The settings that once made the first allocation spin, alone.
    runs = [("1G", "prewarm:900M"), ("16G", "prewarm:16G"), ("16G", "prewarm:13G,headroom:4G")]
    for device in ["1G", "16G"]:
        for prewarm in prewarms:
            for headroom in headrooms:
                n = len(runs)
                keys = [f"prewarm:{prewarm}", f"headroom:{headroom}" if headroom else "",
                        f"limit:{limits[n // 3 % len(limits)]}" if limits[n // 3 % len(limits)] else "",
                        others[n % len(others)]]
                runs.append((device, ",".join(k for k in keys if k).replace("{total}", device)))
    for device, conf in runs:
        label = f"{device} device [{conf}]"
        try:
            r = run_program(build, "headroom_preload", ["serve"],
                            env={"FAKECUDA_TOTAL_MEM": device, "PAGEFAST_CONF": conf}, timeout=120)
        except subprocess.TimeoutExpired:
            check(False, f"{label}: still running after 120 s (a hang)")
            continue
        if r.returncode != 0 or "ok serve" not in r.stdout:
            expect_ok(r, "serve", label)
        warnings = [l for l in r.stderr.splitlines() if "prewarm" in l]
        if len(warnings) > 1:
            check(False, f"{label}: one message about prewarm, not {len(warnings)}")
    check(not failures, f"{len(runs)} combinations ran to their end and served")


def main():
    name = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if name == "recover":
        # release_delay:off, headroom:0 and keep_idle:100: nothing gives idle
        # memory back but the retry after an out-of-memory answer, so the
        # case shows that alone; then the defaults, and a pool with a limit.
        expect_ok(run(build, ["recover"], preload=False), "recover", "without pagefast")
        for conf in ["release_delay:off", "release_delay:off,headroom:0,keep_idle:100", "",
                     "limit:1536M,release_delay:off", "chunk_size:1G,headroom:0"]:
            r = run(build, ["recover"], env={"PAGEFAST_CONF": conf} if conf else {})
            expect_ok(r, "recover", f"pagefast [{conf or 'default'}]")
        r = run(build, ["recover"], env={"PAGEFAST_CONF": "release_delay:off,headroom:0,keep_idle:100",
                                         "PAGEFAST_STATS": "stderr"})
        retries = re.search(r'"oom_retries": (\d+)', r.stderr)
        released = re.search(r'"oom_released_bytes": (\d+)', r.stderr)
        check(retries and int(retries.group(1)) >= 1 and released and int(released.group(1)) >= 1 << 30,
              f"the stats count the retries and what went back ({r.stderr[-600:]})")
    elif name == "lazy_kernel":
        # Only the retry gives memory back (release_delay:off, headroom:0,
        # keep_idle:100).
        expect_ok(run(build, ["lazy_kernel"], preload=False), "lazy_kernel", "without pagefast")
        for conf in ["release_delay:off,headroom:0,keep_idle:100", ""]:
            r = run(build, ["lazy_kernel"], env={"PAGEFAST_CONF": conf} if conf else {})
            expect_ok(r, "lazy_kernel", f"pagefast [{conf or 'default'}]")
    elif name == "headroom":
        headroom = 512 * MiB
        expect_ok(run(build, ["headroom", str(headroom)], preload=False), "headroom", "without pagefast")
        # release_delay:off and keep_idle:100: neither the decay nor the free
        # gives anything back; the headroom does (set, and the default of 1 GiB).
        for conf, bytes_ in [(f"release_delay:off,keep_idle:100,headroom:{headroom // MiB}M", headroom),
                             ("release_delay:off,keep_idle:100", 1 << 30)]:
            r = run(build, ["headroom", str(bytes_)], env={"PAGEFAST_CONF": conf})
            expect_ok(r, "headroom", f"pagefast [{conf}]")
    elif name == "pressure":
        headroom = 256 * MiB
        r = run(build, ["pressure", str(headroom)],
                env={"PAGEFAST_CONF": f"release_delay:off,keep_idle:100,headroom:{headroom // MiB}M"})
        expect_ok(r, "pressure", "pagefast: another process took the headroom")
    elif name == "free_async":
        expect_ok(run(build, ["free_async"], preload=False), "free_async", "without pagefast")
        for conf in ["", "release_delay:0"]:
            r = run(build, ["free_async"], env={"PAGEFAST_CONF": conf} if conf else {})
            expect_ok(r, "free_async", f"pagefast [{conf or 'default'}]")
    elif name in ("async_then_alloc", "async_pending"):
        # CuPy's TestMemoryAsyncPool::test_free_all_blocks_large_chunk: 75%
        # of the device freed into the driver's stream-ordered pool, then
        # cuMemAlloc of 30% before the program synchronizes. The driver
        # alone refuses it (CUDA_ERROR_OUT_OF_MEMORY, 2); pagefast
        # synchronizes before it refuses, which lets that pool give its
        # memory back, and serves it: every run, whether or not blocks of
        # the pool wait for a synchronization of its own ("pending") and
        # whether or not the pagefast-trim thread synchronized first
        # (docs/POOL.md "Out of memory").
        for variant in (["async_then_alloc"], ["async_then_alloc", "pending"]):
            base = run(build, variant, preload=False)
            expect_ok(base, "async_then_alloc", "without pagefast")
            check("before the sync 2 after 0" in base.stdout, f"the driver alone refuses before the sync ({base.stdout})")
            confs = ["", "release_delay:0", "headroom:0"] if name == "async_then_alloc" else [
                "headroom:0,release_delay:off", "headroom:0,release_delay:off,chunk_size:2M",
                "headroom:0,release_delay:off,big_chunks:off", "headroom:0,release_delay:off,slack:off"]
            for conf in confs:
                r = run(build, variant, env={"PAGEFAST_CONF": conf} if conf else {})
                label = f"pagefast [{conf or 'default'}]{' pending' if len(variant) > 1 else ''}"
                expect_ok(r, "async_then_alloc", label)
                check("before the sync 0 after 0" in r.stdout, f"{label}: served before the program's sync ({r.stdout})")
    elif name == "fill_mix":
        # A device filled with a mix of sizes, one of each in turn: pagefast
        # serves as much as the driver alone before its first refusal (no
        # large request refused while the driver alone would serve it), and
        # at least 99% in all (the fake driver is deterministic).
        def served(r, what):
            m = re.search(what + r" (\d+) bytes", r.stdout)
            return int(m.group(1)) if m else -1
        for device in ["1G", "2G"]:
            env = {"FAKECUDA_TOTAL_MEM": device}
            base = run(build, ["fill_mix", "turns"], preload=False, env=env)
            expect_ok(base, "fill_mix", f"{device}: without pagefast")
            first, total = served(base, "first refusal after"), served(base, "served")
            for conf in ["", "headroom:0", "chunk_size:2M", "chunk_size:1G", "release_delay:0", "big_chunks:off"]:
                label = f"{device} [{conf or 'default'}]"
                r = run(build, ["fill_mix", "turns"], env=dict(env, PAGEFAST_CONF=conf) if conf else env)
                expect_ok(r, "fill_mix", f"{label}: pagefast")
                check(served(r, "first refusal after") >= first,
                      f"{label}: first refusal after {served(r, 'first refusal after') // MiB} MiB, the driver "
                      f"alone's after {first // MiB} MiB")
                check(served(r, "served") * 100 >= total * 99,
                      f"{label}: {served(r, 'served') // MiB} MiB served in all, the driver alone {total // MiB} MiB")
    elif name == "fill_small":
        # A small request on a full device, where only another class's
        # free blocks are left (docs/POOL.md "Out of memory"); on a 1 GiB
        # device so that the default headroom covers all of it.
        for device in ["1G", "2G"]:
            env = {"FAKECUDA_TOTAL_MEM": device}
            expect_ok(run(build, ["fill_small"], preload=False, env=env), "fill_small", f"{device}: without pagefast")
            for conf in ["", "headroom:0", "chunk_size:2M", "chunk_size:1G", "release_delay:0"]:
                r = run(build, ["fill_small"], env=dict(env, PAGEFAST_CONF=conf) if conf else env)
                expect_ok(r, "fill_small", f"{device} [{conf or 'default'}]: pagefast")
    elif name == "extremes":
        extremes(build)
    else:
        print("unknown case " + name)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
