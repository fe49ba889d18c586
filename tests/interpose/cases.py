#!/usr/bin/env python3
"""tests/interpose/cases.py: integration cases for the doors, pass-through,
configuration errors, logging, stats and the launcher, each run as a
separate meson test: `cases.py CASE --build DIR`.

Every case runs real programs against the fake driver (a test double of
libcuda.so.1), with and without libpagefast.so preloaded, and compares
what they print; pagefast's own view comes from its PAGEFAST_STATS file.
"""
import json
import os
import re
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402

ARGS = None


def paths():
    b = ARGS.build
    return {
        "lib": os.path.join(b, "interpose", "libpagefast.so"),
        "fake": os.path.join(b, "tests", "fakecuda"),
        "bin": os.path.join(b, "tests", "interpose"),
        "run": os.path.join(b, "tools", "pagefast-run"),
    }


def run(argv, preload=None, env_extra=None, timeout=120):
    p = paths()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = p["fake"] + ":" + p["bin"]
    env.setdefault("FAKECUDA_TOTAL_MEM", "8G")
    if preload:
        env["LD_PRELOAD"] = preload
    if env_extra:
        env.update(env_extra)
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)


def with_stats(argv, env_extra=None, preload=None):
    """Runs argv with pagefast preloaded and returns (result, stats)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "stats.json")
        env = dict(env_extra or {})
        env["PAGEFAST_STATS"] = path
        r = run(argv, preload=preload or paths()["lib"], env_extra=env)
        stats = None
        if os.path.exists(path):
            with open(path) as f:
                stats = json.load(f)
        return r, stats


def made_counts(stdout):
    m = re.search(r"^made (.*)$", stdout, re.M)
    if not m:
        return {}
    return {k: int(v) for k, v in (item.split("=") for item in m.group(1).split())}


def door_case(argv, expect_doors):
    p = paths()
    base = run(argv)
    check(base.returncode == 0, f"{argv[0]} runs on the fake driver without pagefast (rc {base.returncode}) {base.stderr[-300:]}")
    made = made_counts(base.stdout)
    check(len(made) == 7, "the workload reports its call counts")
    for conf in ["", "pool:off"]:
        env = {"PAGEFAST_CONF": conf} if conf else {}
        r, stats = with_stats(argv, env)
        label = f"[{conf or 'default'}]"
        check(r.returncode == 0, f"{label} rc 0 under pagefast (got {r.returncode}; stderr {r.stderr[-300:]})")
        check(r.stdout == base.stdout, f"{label} output identical to the run without pagefast")
        if r.stdout != base.stdout:
            import difflib
            print("".join(difflib.unified_diff(base.stdout.splitlines(1), r.stdout.splitlines(1), "without", "with")))
        check(stats is not None, f"{label} stats written")
        if not stats:
            continue
        for name, count in made.items():
            check(stats["calls"].get(name) == count,
                  f"{label} pagefast handled every {name}: {stats['calls'].get(name)} of {count}")
        for door, want in expect_doors(stats).items():
            check(want, f"{label} doors: {door} ({stats['doors']})")
    # PAGEFAST=0: a pure pass-through that counts nothing.
    r, stats = with_stats(argv, {"PAGEFAST": "0"})
    check(r.stdout == base.stdout and r.returncode == base.returncode, "PAGEFAST=0: identical output")
    check(stats and stats["pagefast"]["mode"] == "off" and stats["pagefast"]["reason"] == "PAGEFAST=0", "PAGEFAST=0: mode off")
    check(stats and all(v == 0 for v in stats["calls"].values()) and all(v == 0 for v in stats["doors"].values()),
          "PAGEFAST=0: nothing handled, no door opened")


def case_door_linked():
    door_case([os.path.join(paths()["bin"], "door_linked")],
              lambda s: {"symbol used for the 7 entries": s["doors"]["symbol"] == 7,
                         "no dlsym door": s["doors"]["dlsym"] == 0,
                         "no proc door": s["doors"]["proc_address"] == 0})


def case_door_dlsym():
    door_case([os.path.join(paths()["bin"], "door_dlsym")],
              lambda s: {"dlsym handed out the 7 entries": s["doors"]["dlsym"] == 7,
                         "no symbol door": s["doors"]["symbol"] == 0})


def case_door_proc_11030():
    door_case([os.path.join(paths()["bin"], "door_proc"), "11030"],
              lambda s: {"dlsym handed out cuGetProcAddress_v2 only": s["doors"]["dlsym"] == 1,
                         "the chain handed out itself (v1) and the 7 entries": s["doors"]["proc_address"] == 9,
                         "v1 wrapper answered the chain": s["calls"]["cuGetProcAddress"] == 17,
                         "v2 wrapper answered the first call only": s["calls"]["cuGetProcAddress_v2"] == 1})


def case_door_proc_12000():
    door_case([os.path.join(paths()["bin"], "door_proc"), "12000"],
              lambda s: {"dlsym handed out cuGetProcAddress_v2 only": s["doors"]["dlsym"] == 1,
                         "the chain handed out itself (v2) and the 7 entries": s["doors"]["proc_address"] == 9,
                         "v2 wrapper answered everything": s["calls"]["cuGetProcAddress_v2"] == 18,
                         "v1 wrapper unused": s["calls"]["cuGetProcAddress"] == 0})


def case_dlsym_scope():
    argv = [os.path.join(paths()["bin"], "dlsym_scope"), "libscope.so"]
    base = run(argv)
    check("finds its own symbol: 1" in base.stdout and "RTLD_NEXT from a linked library: 2" in base.stdout,
          "baseline resolves relative to the caller")
    check("table name, no driver: NULL" in base.stdout, "baseline: no driver, no cuMemAlloc_v2")
    r = run(argv, preload=paths()["lib"])
    check(r.returncode == 0 and r.stdout == base.stdout, "names outside the table resolve exactly as without pagefast")
    print(r.stdout)


def case_malloc_interposer():
    p = paths()
    hook = os.path.join(p["bin"], "libmallochook.so")
    argv = [os.path.join(p["bin"], "door_dlsym")]
    base = run(argv)
    for order in [f"{hook}:{p['lib']}", f"{p['lib']}:{hook}"]:
        try:
            r = run(argv, preload=order, timeout=60)
            check(r.returncode == 0 and r.stdout == base.stdout, f"stacked with a malloc interposer ({order.count(':')} sep): same output")
        except subprocess.TimeoutExpired:
            check(False, f"stacked with a malloc interposer: hung ({order})")


# "pagefast[PID rRANK HH:MM:SS.mmm]: LEVEL: message" (interpose/log.cpp).
LOG_LINE = re.compile(r"^pagefast\[(\d+)(?: r(\d+))? (\d\d:\d\d:\d\d\.\d{3})\]: (\w+): (.*)$")


def pagefast_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("pagefast[")]


def log_message(line):
    """'LEVEL: message' of a log line, without the pid, rank and time."""
    m = LOG_LINE.match(line)
    return f"{m.group(4)}: {m.group(5)}" if m else line


def case_config_errors():
    argv = [os.path.join(paths()["bin"], "door_linked")]
    base = run(argv)
    cases = [
        ({"PAGEFAST_CONF": "bogus:1"}, ["unknown key 'bogus'", "chunk_size"]),
        ({"PAGEFAST_CONF": "chunk_size:3M"}, ["bad value '3M'", "'chunk_size'", "multiple of 2M"]),
        ({"PAGEFAST_CONF": "release_threshold:lots"}, ["'release_threshold'", "max"]),
        ({"PAGEFAST_CONF": "numa:sideways"}, ["'numa'", "auto|bind|force|off"]),
        ({"PAGEFAST_CONF": "pool"}, ["'pool' has no value"]),
        ({"PAGEFAST": "2"}, ["PAGEFAST", "1, on, true, 0, off, false"]),
    ]
    for env, needles in cases:
        r, stats = with_stats(argv, env)
        lines = pagefast_lines(r.stderr)
        check(len(lines) == 1, f"{env}: exactly one message (got {lines})")
        check(lines and all(n in lines[0] for n in needles), f"{env}: message names {needles}")
        check(lines and "pass-through" in lines[0], f"{env}: says it runs as pass-through")
        check(r.stdout == base.stdout and r.returncode == 0, f"{env}: program runs on unchanged")
        check(stats and stats["pagefast"]["mode"] == "pass-through", f"{env}: stats say pass-through")
    r, stats = with_stats(argv, {"PAGEFAST_CONF": " chunk_size : 64M , release_threshold:8G,limit:0,prewarm:0,pool:on "})
    check(not pagefast_lines(r.stderr) and stats and stats["pagefast"]["mode"] == "active", "valid keys with spaces accepted")
    check(stats and "chunk_size 64M" in stats["pagefast"]["config"], "configuration reported in stats")


def case_logging():
    argv = [os.path.join(paths()["bin"], "door_linked")]
    r = run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_LOG": "info"})
    active = [l for l in pagefast_lines(r.stderr) if log_message(l).startswith("info: active")]
    check(len(active) == 1, f"info: one 'active' line at the first allocation ({active})")
    check(active and "chunk_size" in active[0], "the banner says how it is configured")
    r = run(argv, preload=paths()["lib"])
    check(not [l for l in pagefast_lines(r.stderr) if ": info:" in l], "default level warn: no info lines")
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "pf.log")
        r = run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_LOG": "info", "PAGEFAST_LOG_FILE": log})
        text = open(log).read() if os.path.exists(log) else ""
        check(any(log_message(l).startswith("info: active") for l in pagefast_lines(text)) and "pagefast[" not in r.stderr,
              "PAGEFAST_LOG_FILE receives the lines")
    r = run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_LOG": "off", "PAGEFAST_CONF": "bogus:1"})
    check(not pagefast_lines(r.stderr), "PAGEFAST_LOG=off: silent")


def case_stats_file():
    argv = [os.path.join(paths()["bin"], "door_linked")]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.json")
        old = os.umask(0)
        try:
            run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_STATS": path})
        finally:
            os.umask(old)
        check(os.path.exists(path) and stat.S_IMODE(os.stat(path).st_mode) == 0o600, "stats file created 0600")
        doc = json.load(open(path))
        check(set(["calls", "doors", "pool", "numa", "pagefast"]) <= set(doc), "stats document has its sections")
        victim = os.path.join(d, "victim")
        open(victim, "w").write("keep")
        link = os.path.join(d, "link.json")
        os.symlink(victim, link)
        r = run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_STATS": link})
        check(open(victim).read() == "keep", "a symbolic link at the stats path is not followed")
        check("PAGEFAST_STATS" in r.stderr, "and that is reported")
        run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_STATS": os.path.join(d, "p-%p.json")})
        check(any(re.match(r"p-\d+\.json$", n) for n in os.listdir(d)), "%p becomes the pid")
    r = run(argv, preload=paths()["lib"], env_extra={"PAGEFAST_STATS": "stderr"})
    check('"calls"' in r.stderr, "PAGEFAST_STATS=stderr")


def case_launcher():
    p = paths()
    r = subprocess.run([p["run"], "--help"], stdout=subprocess.PIPE, text=True)
    check(r.returncode == 0 and "usage:" in r.stdout, "--help")
    r = run([p["run"], "--", "sh", "-c", "exit 7"])
    check(r.returncode == 7, "returns the program's exit status")
    r = run([p["run"], "--lib", "/nonexistent/libpagefast.so", "--", "true"])
    check(r.returncode == 125 and "error" in r.stderr, "fails loudly if the library is missing (125, as env)")
    r = run([p["run"], "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env_extra={"LD_PRELOAD": "libm.so.6 libz.so.1"})
    out = r.stdout.strip()
    check(out.startswith("libm.so.6 libz.so.1:") and out.endswith("libpagefast.so"), f"keeps LD_PRELOAD and appends ({out})")
    r = run([p["run"], "--", p["run"], "--", "sh", "-c", 'echo "$LD_PRELOAD"'])
    check(r.stdout.count("libpagefast.so") == 1, "adds the library once")
    r = run([p["run"], "--if-enabled", "--", "sh", "-c", 'echo "[$LD_PRELOAD]"'])
    check(r.stdout.strip() == "[]", "--if-enabled without PAGEFAST=1 preloads nothing")
    r = run([p["run"], "--if-enabled", "--", "sh", "-c", 'echo "[$LD_PRELOAD]"'], env_extra={"PAGEFAST": "1"})
    check("libpagefast.so" in r.stdout, "--if-enabled with PAGEFAST=1 preloads")
    r = run([p["run"], "--no-pool", "--numa", "off", "--log", "info", "--", "sh", "-c", 'echo "$PAGEFAST_CONF $PAGEFAST_LOG"'])
    check(r.stdout.strip() == "pool:off,numa:off info", f"options become variables ({r.stdout.strip()})")
    r = run([p["run"], "--numa-report"])
    check(r.returncode == 0 and "pagefast NUMA report" in r.stdout and "local ranks" in r.stdout,
          "--numa-report prints the GPUs' nodes and what each rank would get")
    r = run([p["run"], "--bogus", "--", "true"])
    check(r.returncode != 0 and "unknown option" in r.stderr, "unknown option refused")
    with tempfile.TemporaryDirectory() as d:
        stats = os.path.join(d, "s.json")
        r = run([p["run"], "--stats", stats, "--", os.path.join(p["bin"], "door_linked")])
        check(r.returncode == 0 and os.path.exists(stats) and json.load(open(stats))["calls"]["cuMemAlloc_v2"] > 0,
              "a program run through the launcher goes through pagefast")


def case_ctx_reset():
    """cudaDeviceReset mid-run: the device's pool is retired, the driver
    serves the device from then on, and the program sees the driver's answers."""
    argv = [os.path.join(paths()["bin"], "ctx_reset")]
    base = run(argv)
    check(base.returncode == 0 and "done" in base.stdout, f"runs without pagefast ({base.stdout[-200:]})")
    r, stats = with_stats(argv, {"PAGEFAST_LOG": "info"})
    check(r.returncode == 0 and r.stdout == base.stdout, "identical output under pagefast")
    if r.stdout != base.stdout:
        print(base.stdout, "---", r.stdout)
    check("b is pool memory 0" in r.stdout, "after the reset, allocations are the driver's")
    warned = [l for l in pagefast_lines(r.stderr) if "retired" in l]
    check(len(warned) == 1, f"one info line says the pool was retired ({pagefast_lines(r.stderr)})")
    quiet, _ = with_stats(argv, {})
    check(not pagefast_lines(quiet.stderr), "silent at the default level")
    check(stats and stats["calls"]["cuDevicePrimaryCtxReset_v2"] == 1, "the reset went through pagefast")
    check(stats and all(d["device"] != 0 for d in stats["pool"]["devices"]), "the retired pool is not reported as live")


def case_reserve_alignment():
    """cuMemAddressReserve with an alignment that is not a power of two
    answers the driver's CUDA_ERROR_INVALID_VALUE even when the own-VMM
    cache keeps a range of that size (reserve_align.c); a power of two gets
    a range as before."""
    argv = [os.path.join(paths()["bin"], "reserve_align")]
    base = run(argv)
    check(base.returncode == 0 and "reserve alignment not a power of two=CUDA_ERROR_INVALID_VALUE" in base.stdout,
          f"without pagefast the driver refuses the alignment ({base.stdout!r} {base.stderr[-300:]})")
    r, stats = with_stats(argv)
    check(r.returncode == 0 and r.stdout == base.stdout,
          f"the same answers with pagefast\n--- without:\n{base.stdout}--- with:\n{r.stdout}")
    clients = (stats or {}).get("vmm_clients") or {}
    check(clients.get("ranges_kept", 0) >= 1 and clients.get("ranges_reused", 0) >= 1,
          f"the cache kept the freed range, and the aligned request got it back ({clients})")


def case_ctx_destroy():
    """cuCtxDestroy of contexts that hold blocks, 50 rounds of 64 MiB on a
    1 GiB device: the blocks go with their context, as the driver's do, the
    program never runs out of memory, and every answer (frees of such
    blocks afterwards included) is the driver's."""
    argv = [os.path.join(paths()["bin"], "ctx_destroy")]
    small = {"FAKECUDA_TOTAL_MEM": "1G"}
    base = run(argv, env_extra=small)
    check(base.returncode == 0 and "done" in base.stdout, f"runs without pagefast ({base.stdout[-300:]})")
    check("50 rounds, first failure -1" in base.stdout, "the driver alone runs every round")
    r, stats = with_stats(argv, dict(small, PAGEFAST_LOG="debug"))
    check(r.returncode == 0 and r.stdout == base.stdout, "identical output under pagefast")
    if r.stdout != base.stdout:
        print(base.stdout, "---", r.stdout)
    check("pool memory in 50 rounds" in r.stderr, f"every round's block was pool memory ({r.stderr[-300:]})")
    check("kept pool memory 1, lost pool memory 1" in r.stderr, "both blocks of the last part were pool memory")
    check(stats and stats["calls"].get("cuCtxDestroy_v2", 0) >= 53, "the destroys went through pagefast")
    gone = [l for l in pagefast_lines(r.stderr) if "was destroyed" in l]
    check(len(gone) >= 50, f"each destroy gave its blocks back ({len(gone)} debug lines)")


def case_alloc_handles():
    """The VMM handle queries on cuMemAlloc memory (pool blocks under
    pagefast) answer as the driver does: no allocation handle for it, and
    no handle value of pagefast's own chunks answers property queries, and
    cuMemGetAccess answers success with no flags (docs/DRIVER-FACTS.md)."""
    argv = [os.path.join(paths()["bin"], "alloc_handles")]
    base = run(argv)
    check(base.returncode == 0 and "done" in base.stdout, f"runs without pagefast ({base.stdout[-300:]})")
    check("retain big 1, handle untouched" in base.stdout, "the driver refuses a handle of cuMemAlloc memory")
    r, stats = with_stats(argv, {})
    check(r.returncode == 0 and r.stdout == base.stdout, "identical output under pagefast")
    if r.stdout != base.stdout:
        print(base.stdout, "---", r.stdout)
    check(stats and stats["pool"]["devices"] and stats["pool"]["devices"][0]["in_use_bytes"] == 0,
          "the blocks were pool memory, all freed")
    check("access of big 0, flags 0" in base.stdout, f"the driver: success and no flags for cuMemAlloc memory ({base.stdout})")


def case_exports():
    """Only the table's entry points, dlsym, pagefast_* and torch_memory_saver's
    tms_pause and tms_resume leave the library; it needs nothing but glibc
    (no libcuda, libcudart, spdlog, fmt, libstdc++)."""
    lib = paths()["lib"]
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], stdout=subprocess.PIPE, text=True).stdout
    names = sorted(line.split()[-1] for line in nm.splitlines() if line.strip())
    table = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "interpose", "entries.h")).read()
    table = table[table.index("#define PAGEFAST_ENTRIES"):table.index("#define PAGEFAST_REAL_ONLY")]
    entries = set(re.findall(r"^\s*X\((cu\w+),", table, re.M))
    others = {"dlsym", "tms_pause", "tms_resume"}
    unexpected = [n for n in names if n not in entries and n not in others and not n.startswith("pagefast_")]
    check(not unexpected, f"no unexpected exports ({unexpected})")
    check(others <= set(names), f"dlsym, tms_pause and tms_resume exported ({sorted(others - set(names))})")
    check(entries <= set(names), f"every table entry is exported ({sorted(entries - set(names))})")
    needed = subprocess.run(["readelf", "-d", lib], stdout=subprocess.PIPE, text=True).stdout
    libs = re.findall(r"Shared library: \[([^\]]+)\]", needed)
    allowed = re.compile(r"^(libc|libm|libdl|libpthread|librt|ld-linux[-\w]*)\.so")
    check(all(allowed.match(l) for l in libs), f"depends on glibc only ({libs})")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
