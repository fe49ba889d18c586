#!/usr/bin/env python3
"""tests/pool/vmm_client_cases.py: the own-VMM cache (docs/OWN-VMM.md)
against the fake driver. Runs vmm_client (linked with the fake libcuda.so.1)
with and without LD_PRELOAD=libpagefast.so and compares transcripts (one
line per driver call and its result, never an address or a handle).

Usage: vmm_client_cases.py <differential|counts|grow|empty|two|faults|oom> --build <build dir>
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402
from casekit import check  # noqa: E402

# The default has growth ahead on (vmm_grow_ahead 32); "vmm_grow_ahead:0"
# is the cache without it.
CONFS = ["", "vmm_cache:off", "pool:off", "release_threshold:0", "limit:1G", "chunk_size:2M", "vmm_grow_ahead:0"]
GROW = {"PAGEFAST_CONF": "vmm_grow_ahead:32"}
NO_GROW = {"PAGEFAST_CONF": "vmm_grow_ahead:0"}


def held(env=None):
    """env with release_delay:off: what the cache holds goes back to the
    driver once unused for release_delay (5 s, on the pagefast-trim thread),
    so a run that counts 'nothing released' must not depend on finishing
    sooner than that on a busy machine."""
    env = dict(env or {})
    env["PAGEFAST_CONF"] = ",".join(c for c in [env.get("PAGEFAST_CONF", ""), "release_delay:off"] if c)
    return env


def run(args, preload=True, env=None):
    build = ARGS.build  # noqa: F821 (set by casekit.main)
    e = {k: v for k, v in os.environ.items()
         if not (k.startswith("PAGEFAST") or k.startswith("FAKECUDA") or k == "LD_PRELOAD")}
    e["LD_LIBRARY_PATH"] = os.path.join(build, "tests", "fakecuda")
    if preload:
        e["LD_PRELOAD"] = os.path.join(build, "interpose", "libpagefast.so")
    e.update(env or {})
    exe = os.path.join(build, "tests", "pool", "vmm_client")
    return subprocess.run([exe] + args, env=e, capture_output=True, text=True, timeout=120)


def run_counted(args, preload=True, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "counts.json")
        r = run(args, preload, dict(env or {}, FAKECUDA_COUNTS=path))
        with open(path) as f:
            return r, json.load(f)


def differential_of(args, env=None):
    base = run(args, preload=False, env=env)
    check(base.returncode == 0 and f"ok {args[0]}" in base.stdout,
          f"{args} without pagefast ({base.returncode}) {base.stdout[-300:]}")
    for conf in CONFS:
        e = dict(env or {})
        if conf:
            e["PAGEFAST_CONF"] = conf
        r = run(args, env=e)
        first = next((f"line {i + 1}: {a!r} != {b!r}" for i, (a, b) in
                      enumerate(zip(base.stdout.splitlines(), r.stdout.splitlines())) if a != b), "lengths differ")
        check(r.returncode == 0 and r.stdout == base.stdout,
              f"{args} [{conf or 'default'}]: the same answers as the driver ({first}) {r.stderr[-300:]}")


def case_differential():
    differential_of(["semantics"])
    differential_of(["segments", "6", "4"])
    differential_of(["grow", "3", "40"])
    differential_of(["empty", "3", "12"])
    differential_of(["two", "2", "12"])


VMM = ["cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemRelease"]


def case_counts():
    rounds, pages = 10, 4
    _, without = run_counted(["segments", str(rounds), str(pages)], preload=False)
    r, with_cache = run_counted(["segments", str(rounds), str(pages)], env=held())
    _, off = run_counted(["segments", str(rounds), str(pages)], env={"PAGEFAST_CONF": "vmm_cache:off"})
    check("ok segments" in r.stdout, f"segments ran through the cache ({r.stdout[-200:]})")
    for name in VMM:
        print(f"{name}: without {without.get(name, 0)}, cache off {off.get(name, 0)}, cache on {with_cache.get(name, 0)}")
    per_round = {"cuMemCreate": pages, "cuMemMap": pages, "cuMemSetAccess": 1, "cuMemUnmap": pages, "cuMemRelease": pages}
    for name, n in per_round.items():
        check(without.get(name, 0) == rounds * n, f"{name}: the program makes {rounds * n} calls")
        # The pool's own calls for cuMemAlloc (one chunk) come on top.
        check(off.get(name, 0) >= rounds * n, f"{name} with vmm_cache:off: every call reaches the driver")
    # Through the cache: the first round's creates, maps and access (plus
    # the pool's own chunk: one create, map and access); no unmap or release.
    check(with_cache.get("cuMemCreate", 0) <= pages + 1, "cuMemCreate: only the first round's reach the driver")
    check(with_cache.get("cuMemMap", 0) <= pages + 1, "cuMemMap: only the first round's reach the driver")
    check(with_cache.get("cuMemSetAccess", 0) <= 2, "cuMemSetAccess: only the first round's reaches the driver")
    # At the end cuMemAddressFree unmaps the deferred mappings for real.
    check(with_cache.get("cuMemUnmap", 0) <= pages, "cuMemUnmap: deferred until the address range is freed")
    check(with_cache.get("cuMemRelease", 0) == 0, "cuMemRelease: the released pages stay cached")


def case_grow():
    """Growth ahead: a segment growing page by page, one access call per
    page without pagefast; with it, the pages are made ahead by the
    pagefast-vmm thread, and the program's own thread makes about one per
    doubling."""
    rounds, pages = 3, 64
    _, without = run_counted(["grow", str(rounds), str(pages)], preload=False)
    r, with_cache = run_counted(["grow", str(rounds), str(pages)], env=held(GROW))
    check("ok grow" in r.stdout and "CORRUPT" not in r.stdout, f"grow ran through the cache ({r.stdout[-200:]})")
    for name in VMM:
        print(f"{name}: without {without.get(name, 0)}, cache on {with_cache.get(name, 0)}")
    check(without.get("cuMemSetAccess", 0) == rounds * pages, "the program opens each page with its own call")
    own = with_cache.get("main_thread.cuMemSetAccess", -1)
    check(0 <= own <= 16,
          f"with the cache: the program's thread makes about one access call per doubling, in the first round only ({own})")
    check(0 < with_cache.get("cuMemSetAccess", 0) - own <= pages + 32,
          f"the worker opens each page at most once, and at most 32 beyond the last ({with_cache.get('cuMemSetAccess', 0) - own})")
    check(with_cache.get("main_thread.cuMemCreate", -1) <= 16, "the program's thread creates few pages itself")
    check(with_cache.get("cuMemCreate", 0) <= 2 * pages, "each page created once (plus what was grown ahead)")
    check(with_cache.get("cuMemRelease", 0) == 0, "nothing released while the cache holds it")


def case_empty():
    """Kept ranges: a segment freed with only deferred mappings in it is
    kept, and the next reservation of its size gets it back with its pages:
    after the first round no VMM call, reservation or free reaches the
    driver (docs/OWN-VMM.md "Kept ranges")."""
    rounds, pages = 4, 12
    _, without = run_counted(["empty", str(rounds), str(pages)], preload=False)
    for env in [NO_GROW, {}]:
        r, with_cache = run_counted(["empty", str(rounds), str(pages)], env=held(env))
        tag = env.get("PAGEFAST_CONF", "defaults")
        check("ok empty" in r.stdout and "CORRUPT" not in r.stdout, f"[{tag}] empty ran, data intact ({r.stdout[-200:]})")
        for name in VMM + ["cuMemAddressReserve", "cuMemAddressFree"]:
            print(f"[{tag}] {name}: without {without.get(name, 0)}, cache on {with_cache.get(name, 0)}")
        check(without.get("cuMemAddressReserve", 0) == rounds and without.get("cuMemAddressFree", 0) == rounds,
              "the program reserves and frees a range every round")
        check(with_cache.get("cuMemAddressReserve", 0) == 1, f"[{tag}] one reservation reaches the driver")
        check(with_cache.get("cuMemAddressFree", 0) == 0, f"[{tag}] no free reaches the driver (the range is kept)")
        own = with_cache.get("main_thread.cuMemSetAccess", -1)
        check(0 <= own <= pages, f"[{tag}] the program's thread opens pages in the first round only ({own})")
        check(with_cache.get("cuMemUnmap", 0) == 0 and with_cache.get("cuMemRelease", 0) == 0,
              f"[{tag}] nothing unmapped or released for real")
    # Idle after the last round: the cached pages decay to the driver
    # (release_delay, on the pagefast-trim thread), the kept range with them.
    # The program idles until the driver has them back, a minute at most
    # (a hang guard: how soon the thread runs is the scheduler's).
    r, idle = run_counted(["empty", str(rounds), str(pages), "60000"], env={"PAGEFAST_CONF": "release_delay:200ms"})
    print(f"idle, release_delay 200ms: cuMemRelease {idle.get('cuMemRelease', 0)}, "
          f"cuMemUnmap {idle.get('cuMemUnmap', 0)}, cuMemAddressFree {idle.get('cuMemAddressFree', 0)}")
    check("ok empty" in r.stdout, "empty with idle ran")
    check(idle.get("cuMemRelease", 0) >= pages and idle.get("cuMemUnmap", 0) >= pages,
          "the program's released pages went back to the driver after release_delay")
    check(idle.get("cuMemAddressFree", 0) == 1, "and the kept range was freed for real")


def case_two():
    """Two segments of the same properties growing in turns (two streams'
    expandable segments): cuMemCreate cannot tell which segment a page is
    for, so pages made ahead for one go to the other and must be unmapped
    first. After two such misses growth ahead stops for those properties:
    the program's thread then makes no more driver calls than with
    vmm_grow_ahead:0, and the pagefast-vmm thread few pages. Released
    pages go back in the order they first grew, so after the first round
    each segment gets its own pages back: no driver call."""
    rounds, pages = 3, 40
    _, without = run_counted(["two", str(rounds), str(pages)], preload=False)
    r, ahead = run_counted(["two", str(rounds), str(pages)])
    r0, no_ahead = run_counted(["two", str(rounds), str(pages)], env=NO_GROW)
    for run_, tag in [(r, "defaults"), (r0, "vmm_grow_ahead:0")]:
        check("ok two" in run_.stdout and "CORRUPT" not in run_.stdout, f"[{tag}] two ran, data intact ({run_.stdout[-200:]})")
    for name in VMM:
        print(f"{name}: without {without.get(name, 0)}, defaults {ahead.get(name, 0)} "
              f"(program's thread {ahead.get('main_thread.' + name, 0)}), vmm_grow_ahead:0 {no_ahead.get(name, 0)}")
    made_ahead = ahead.get("cuMemCreate", 0) - ahead.get("main_thread.cuMemCreate", 0)
    check(made_ahead <= 8, f"the thread made a batch or two before stopping ({made_ahead} pages)")
    for name in ["cuMemMap", "cuMemSetAccess", "cuMemUnmap"]:
        own, base = ahead.get("main_thread." + name, 0), no_ahead.get(name, 0)
        check(own <= base + 8, f"{name}: the program's thread makes about as many as with vmm_grow_ahead:0 ({own}, {base})")
    # Released pages come back in the order they first grew (two segments
    # in turns: each its own), so later rounds make no driver call at all.
    check(no_ahead.get("cuMemUnmap", 0) == 0, f"no page handed to the other segment ({no_ahead.get('cuMemUnmap', 0)} unmaps)")
    for name in ["cuMemCreate", "cuMemMap", "cuMemSetAccess"]:
        check(no_ahead.get(name, 0) == 2 * pages, f"{name}: the first round's only ({no_ahead.get(name, 0)})")
    total = sum(ahead.get("main_thread." + n, 0) for n in VMM)
    check(3 * total < sum(without.get(n, 0) for n in VMM), f"under a third of the calls without pagefast ({total})")


def case_faults():
    args = ["segments", "3", "3"]
    _, counted = run_counted(args)
    runs = 0
    for name in VMM + ["cuMemAddressReserve", "cuMemAddressFree", "cuMemAlloc_v2", "cuMemFree_v2"]:
        for n in range(1, counted.get(name, 0) + 2):
            env = {"FAKECUDA_FAIL": f"{name}:{n}"}
            r = run(args, env=env)
            runs += 1
            ok = r.returncode == 0 and "ok segments" in r.stdout and "CORRUPT" not in r.stdout
            check(ok, f"{name}:{n} fails: no crash, no wrong data ({r.returncode}) {r.stdout[-300:]} {r.stderr[-300:]}")
            if "CORRUPT" in r.stdout:
                break
    # The semantics program: every call of every kind failing once; data
    # may be wrong only where it is wrong without pagefast too.
    for n in range(1, 12):  # growth ahead failing at each of its steps
        for name in ["cuMemCreate", "cuMemMap", "cuMemSetAccess"]:
            r = run(["grow", "2", "24"], env=dict(GROW, FAKECUDA_FAIL=f"{name}:{n}"))
            runs += 1
            check(r.returncode == 0 and "ok grow" in r.stdout and "CORRUPT" not in r.stdout,
                  f"grow, {name}:{n} fails: no crash, no wrong data ({r.returncode}) {r.stdout[-300:]}")
    # Kept ranges and growth ahead on the worker threads, each driver call
    # failing once (the threads' calls included).
    for n in range(1, 8):
        for name in VMM + ["cuMemAddressReserve", "cuMemAddressFree"]:
            r = run(["empty", "3", "6"], env=dict(GROW, FAKECUDA_FAIL=f"{name}:{n}"))
            runs += 1
            check(r.returncode == 0 and "ok empty" in r.stdout and "CORRUPT" not in r.stdout,
                  f"empty, {name}:{n} fails: no crash, no wrong data ({r.returncode}) {r.stdout[-300:]}")
    _, counted = run_counted(["semantics"])
    for name in VMM + ["cuMemAddressReserve", "cuMemAddressFree", "cuMemRetainAllocationHandle",
                       "cuMemGetAllocationPropertiesFromHandle", "cuMemGetAccess", "cuPointerGetAttribute"]:
        for n in range(1, counted.get(name, 0) + 2):
            env = {"FAKECUDA_FAIL": f"{name}:{n}"}
            r = run(["semantics"], env=env)
            runs += 1
            if r.returncode == 0 and "ok semantics" in r.stdout:
                continue
            base = run(["semantics"], preload=False, env=env)
            crashed = r.returncode not in (0, 1) or "ok semantics" not in r.stdout and "FAIL semantics" not in r.stdout
            check(not crashed and "CORRUPT" in base.stdout,
                  f"semantics, {name}:{n} fails: wrong data only where the driver alone gives it too "
                  f"({r.returncode}) {r.stdout[-300:]} {r.stderr[-300:]}")
    print(f"{runs} fault runs")
    check(runs >= 80, f"the fault sweep covered the calls ({runs} runs)")


def case_oom():
    env = {"FAKECUDA_TOTAL_MEM": "512M"}
    base = run(["oom"], preload=False, env=env)
    check(base.returncode == 0 and "ok oom" in base.stdout, f"oom without pagefast {base.stdout[-300:]}")
    for conf in ["", "chunk_size:2M", "limit:512M"]:
        e = dict(env)
        if conf:
            e["PAGEFAST_CONF"] = conf
        r = run(["oom"], env=e)
        check(r.returncode == 0 and r.stdout == base.stdout,
              f"oom [{conf or 'default'}]: released pages serve cuMemAlloc and the pool's idle memory serves "
              f"cuMemCreate ({r.stdout[-400:]} {r.stderr[-300:]})")
        bad = [l for l in r.stdout.splitlines() if not l.endswith(" 0") and not l.startswith("ok")]
        check(not bad, f"oom [{conf or 'default'}]: every call succeeded ({bad[:3]})")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
