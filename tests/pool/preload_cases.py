#!/usr/bin/env python3
"""tests/pool/preload_cases.py: the pool's integration cases. Runs
pool_preload (linked with the fake libcuda.so.1) with and without
LD_PRELOAD=libpagefast.so and checks what it prints.

Usage: preload_cases.py <case> --build <build dir>
"""
import os
import re
import subprocess
import tempfile
import sys

from preload_kit import check, expect_ok, failures, run_program

GiB = 1 << 30
MiB = 1 << 20


def paths(build):
    return {
        "lib": os.path.join(build, "interpose", "libpagefast.so"),
        "fake": os.path.join(build, "tests", "fakecuda"),
        "exe": os.path.join(build, "tests", "pool", "pool_preload"),
    }


def sanitizer_runtimes(lib):
    """A sanitizer build's runtime must come first in the preload list."""
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [m for m in re.findall(r"=> (\S*lib(?:asan|tsan|ubsan)\S*)", out)]


def run(build, args, preload=True, env=None):
    return run_program(build, "pool_preload", args, preload=preload, env=env)


def case_simple(build, name, confs):
    r = run(build, [name], preload=False)
    expect_ok(r, name, "without pagefast")
    for conf in confs:
        r = run(build, [name], env={"PAGEFAST_CONF": conf} if conf else {})
        expect_ok(r, name, f"pagefast [{conf or 'default'}]")


def case_ipc(build):
    """CUDA IPC of a pool block between two processes, both preloaded:
    the child reads and writes it; the exporter frees it while the child
    holds it, and the child keeps the bytes. Where the device cannot share
    VMM memory, one warning naming PAGEFAST_CONF=pool:off."""
    for label, preload, env in [("without pagefast", False, {}), ("pagefast", True, {"PAGEFAST_LOG": "warn"}),
                                ("pagefast pool:off", True, {"PAGEFAST_CONF": "pool:off"})]:
        r = run(build, ["ipc"], preload=preload, env=env)
        expect_ok(r, "ipc", label)
        check("ipc get 0 0 same 1 capable 1" in r.stdout, f"{label}: handle twice, the same bytes, IPC-capable "
              f"({r.stdout.strip()[:200]})")
        check("ipc double free 1" in r.stdout, f"{label}: a second free is INVALID_VALUE ({r.stdout.strip()[-80:]})")
        if preload and "pool:off" not in label:
            check("ipc exported fds after trim 0" in r.stdout,
                  f"{label}: no exported descriptor outlives the pool's chunks ({r.stdout.strip()[-120:]})")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        r = run(build, ["ipc"], env={"PAGEFAST_IPC_DIR": d})
        expect_ok(r, "ipc", "PAGEFAST_IPC_DIR")
        check("ipc get 0 0 same 1 capable 1" in r.stdout and "ipc exported fds after trim 0" in r.stdout,
              f"PAGEFAST_IPC_DIR: shared through a socket file ({r.stdout.strip()[-120:]})")
        check(os.listdir(d) == [], f"PAGEFAST_IPC_DIR: the socket file is removed at exit ({os.listdir(d)})")
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "missing")
        r = run(build, ["ipc"], env={"PAGEFAST_IPC_DIR": missing})
        expect_ok(r, "ipc", "PAGEFAST_IPC_DIR missing")
        # One warning from each process (the exporter, and its child that
        # imports), both then using the abstract namespace.
        warned = [l for l in r.stderr.splitlines() if "PAGEFAST_IPC_DIR" in l]
        pids = [re.search(r"pagefast\[(\d+) ", l).group(1) for l in warned if re.search(r"pagefast\[(\d+) ", l)]
        check("ipc get 0 0 same 1" in r.stdout and warned and len(set(pids)) == len(warned) == len(pids) and
              all("abstract namespace" in l for l in warned),
              f"PAGEFAST_IPC_DIR missing: one warning a process, shared through the abstract namespace "
              f"({r.stdout.strip()[:60]} {r.stderr[-300:]})")
    r = run(build, ["ipc"], env={"PAGEFAST_LOG": "warn", "FAKECUDA_NO_POSIX_FD": "1"})
    check("ipc get 1 1 same" in r.stdout and "capable 0" in r.stdout,
          f"no POSIX fd handles: cuIpcGetMemHandle on pool memory is INVALID_VALUE, not IPC-capable ({r.stdout})")
    lines = [l for l in r.stderr.splitlines() if "PAGEFAST_CONF=pool:off" in l]
    check(len(lines) == 1, f"no POSIX fd handles: one warning naming PAGEFAST_CONF=pool:off ({r.stderr[-300:]})")


def case_meminfo(build):
    case_simple(build, "meminfo", [""])
    r = run(build, ["meminfo"], env={"PAGEFAST_CONF": "limit:1G"})
    m = re.search(r"total (\d+) free0 (\d+) free1 (\d+) free2 (\d+)", r.stdout)
    check(m is not None, f"meminfo with a limit ran ({r.stdout} {r.stderr})")
    if m:
        total, free0, free1, free2 = map(int, m.groups())
        check(total == GiB, f"with limit:1G, cuMemGetInfo total is the limit ({total})")
        check(free0 == GiB and free2 == GiB, f"with limit:1G, free is limit - in use ({free0}, {free2})")
        check(free1 == GiB - 100 * MiB, f"with limit:1G, free after 100 MiB is limit - 100 MiB ({free1})")
    # Two devices: each answer is the current device's (its budget: the
    # pool's 100 MiB in use on device 0 is not device 1's).
    r = run(build, ["meminfo_devices"], env={"PAGEFAST_CONF": "limit:1G", "FAKECUDA_DEVICES": "2"})
    m = re.search(r"total0 (\d+) free0 (\d+) total1 (\d+) free1 (\d+)", r.stdout)
    check(m is not None, f"meminfo on two devices ran ({r.stdout} {r.stderr})")
    if m:
        total0, free0, total1, free1 = map(int, m.groups())
        check(total0 == GiB and free0 == GiB - 100 * MiB, f"device 0: limit - 100 MiB in use ({total0}, {free0})")
        check(total1 == GiB and free1 == GiB, f"device 1: the whole limit, nothing in use there ({total1}, {free1})")
    # Many threads asking while the device is reset, with a pool growing
    # and giving back, and with none.
    for arg in ["pooled", "none"]:
        r = run(build, ["meminfo_threads", arg], preload=False)
        expect_ok(r, "meminfo_threads", f"without pagefast ({arg})")
        for conf in ["limit:1G", "limit:1G,vmm_cache:off", ""]:
            r = run(build, ["meminfo_threads", arg], env={"PAGEFAST_CONF": conf} if conf else {})
            expect_ok(r, "meminfo_threads", f"pagefast [{conf or 'default'}] ({arg})")


def counts(text):
    return {int(b): int(n) for b, n in re.findall(r"^count (\d+) (\d+)$", text, re.M)}


def case_capacity(build):
    sizes = [20 * MiB, 700 * MiB, 3 * MiB, 64 * 1024, 2 * MiB, 1000, 5 * MiB + 1]
    arg = ",".join(map(str, sizes))
    env = {"FAKECUDA_TOTAL_MEM": "2G"}
    without = counts(run(build, ["capacity", arg], preload=False, env=env).stdout)
    check(len(without) == len(sizes), f"capacity without pagefast ran ({without})")
    # A shortfall prints the pool's stats.
    for conf in ["", "chunk_size:2M", "chunk_size:1G", "idle_share:5"]:
        e = dict(env)
        if conf:
            e["PAGEFAST_CONF"] = conf
        with tempfile.TemporaryDirectory() as d:
            stats = os.path.join(d, "stats.json")
            r = run(build, ["capacity", arg], env=dict(e, PAGEFAST_STATS=stats))
            with_pool = counts(r.stdout)
            short = [b for b in sizes if with_pool.get(b, -1) * 100 < without.get(b, 0) * 99]
            for b in sizes:
                n0, n1 = without.get(b, 0), with_pool.get(b, -1)
                check(n1 * 100 >= n0 * 99,
                      f"[{conf or 'default'}] {b}-byte blocks: {n1} with the pool, {n0} without (>= 99%, also after free-alls)")
            if short:  # where the memory was, for whoever reads the failure
                print(f"[{conf or 'default'}] stats at exit: {open(stats).read() if os.path.exists(stats) else 'none'}")
                print(f"[{conf or 'default'}] stderr: {r.stderr[-2000:]}")
    # At PAGEFAST_LOG=debug each growth says where the held memory was
    # (docs/POOL.md "Stats"), and the stats name the most the pool held.
    stats = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"preload-capacity-{os.getpid()}.json")
    r = run(build, ["capacity", arg], env=dict(env, PAGEFAST_LOG="debug", PAGEFAST_STATS=stats))
    grew = re.findall(r"device 0: grew to (\d+) MiB for a (\d+) MiB (block|slab): it held (\d+) MiB, of which "
                      r"(\d+) MiB free in (\d+) runs \(the longest (\d+) MiB\) and (\d+) MiB waiting", r.stderr)
    check(len(grew) >= 1 and all(int(g[0]) > 0 and int(g[4]) <= int(g[3]) for g in grew),
          f"debug: a line per growth, with where the memory was ({len(grew)} lines) {r.stderr[-300:]}")
    try:
        peak = int(re.search(r'"peak_mapped_bytes": (\d+)', open(stats).read()).group(1))
        os.unlink(stats)
    except (OSError, AttributeError):
        peak = -1
    check(peak >= max(int(g[0]) for g in grew) * MiB if grew else False,
          f"stats: peak_mapped_bytes is at least the largest size a growth reached ({peak})")


def case_sizes(build):
    """Every size answered as the driver answers it, with idle memory held
    and with prewarm (a size near 2^64 once wrapped to 0 granules and
    aliased a live block); under a limit, out of memory sets the pointer to 0."""
    base = run(build, ["sizes"], preload=False)
    expect_ok(base, "sizes", "without pagefast")
    want = [l for l in base.stdout.splitlines() if l.startswith("size ")]
    check(len(want) > 190, f"sizes: {len(want)} sizes tried")
    for conf in ["", "prewarm:64M", "chunk_size:2M"]:
        r = run(build, ["sizes"], env={"PAGEFAST_CONF": conf} if conf else {})
        expect_ok(r, "sizes", f"pagefast [{conf or 'default'}]")
        got = [l for l in r.stdout.splitlines() if l.startswith("size ")]
        diff = [f"{a} | {b}" for a, b in zip(want, got) if a != b]
        check(got == want, f"[{conf or 'default'}] every size answered as the driver answers it "
              f"({len(diff)} differ: {diff[:4]})")
    r = run(build, ["sizes"], env={"PAGEFAST_CONF": "limit:1G"})
    refused = [l for l in r.stdout.splitlines() if l.startswith("size ") and " -> 2" in l]
    check(refused and all(l.endswith(" ptr 0") for l in refused),
          f"[limit:1G] out of memory sets the pointer to 0 ({[l for l in refused if not l.endswith('ptr 0')][:3]})")


def case_config(build):
    """Settings the device cannot honour are said once, and the program runs."""
    r = run(build, ["reuse"], env={"PAGEFAST_CONF": "reserve:128T"})
    expect_ok(r, "reuse", "reserve:128T")
    lines = [l for l in r.stderr.splitlines() if "reserve" in l and "warn" in l]
    check(len(lines) == 1, f"reserve:128T: one warning naming the reservation ({r.stderr[-300:]})")
    r = run(build, ["reuse"], env={"PAGEFAST_CONF": "prewarm:64G", "PAGEFAST_STATS": "stderr"})
    expect_ok(r, "reuse", "prewarm:64G")
    lines = [l for l in r.stderr.splitlines() if "prewarm" in l and "warn" in l]
    check(len(lines) == 1, f"prewarm beyond the device: one warning ({r.stderr[-300:]})")
    m = re.search(r'"peak_mapped_bytes": (\d+)', r.stderr) or re.search(r'"mapped_bytes": (\d+)', r.stderr)
    check(m is not None and int(m.group(1)) < 16 * GiB, f"prewarm beyond the device did not take the device ({m and m.group(1)})")
    r = run(build, ["reuse"], env={"PAGEFAST_CONF": "limit:1"})
    check("'limit'" in r.stderr and "at least 2M" in r.stderr, f"limit:1 refused with the accepted values ({r.stderr[-300:]})")
    # Keys an earlier version had: one warning naming them, and the pool
    # still serves the program (not a pass-through).
    r = run(build, ["reuse"], env={"PAGEFAST_CONF": "sync_ahead:on,chunk_size:2M,split_growth:on", "PAGEFAST_STATS": "stderr"})
    expect_ok(r, "reuse", "removed keys")
    lines = [l for l in r.stderr.splitlines() if "removed" in l]
    check(len(lines) == 1 and "'sync_ahead' was removed" in lines[0] and "'split_growth' was removed" in lines[0]
          and "ignored" in lines[0], f"removed keys: one warning naming both ({r.stderr[-400:]})")
    m = re.search(r'"growths": (\d+)', r.stderr)
    check("pass-through" not in r.stderr and m is not None and int(m.group(1)) > 0,
          f"removed keys: the pool still serves ({r.stderr[-300:]})")


def case_faults(build):
    case_simple(build, "faults", ["", "chunk_size:2M"])


def ctl_by_tag(build, ctl, env):
    """pagefast-ctl sleep / wake / status --tag of a program with regions of
    two tags (tests/live/tagged.c: kv keeps its contents, scratch discards
    them): one tag sleeps and wakes, the other stays awake; a tag the
    process never opened exits 4; a malformed one is a usage error."""
    t = subprocess.Popen([os.path.join(build, "tests", "live", "tagged")], env=dict(env, PAGEFAST_CONF=""),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = str(t.pid)

        def ask(line):
            t.stdin.write(line + "\n")
            t.stdin.flush()
            return t.stdout.readline().strip()

        def ctl_run(*args):
            return subprocess.run([ctl] + list(args), capture_output=True, text=True, timeout=60)

        # Refused before anything is asked.
        for args, why in ((["sleep", pid, "--tag", "kv", "--keep", "--discard"], "both --keep and --discard"),
                          (["sleep", pid, "--tag", "no tag"], "a tag with a space"),
                          (["wake", pid, "--tag"], "--tag without a tag"),
                          (["sleep", "--tag", "kv"], "no PID")):
            r = ctl_run(*args)
            check(r.returncode == 2, f"[tag] {why}: a usage error (rc {r.returncode})")
        line = t.stdout.readline().strip()
        check(line == "ready", f"[tag] the target with regions is ready ({line!r})")
        if line != "ready":
            return

        r = ctl_run("status", pid)
        check(r.returncode == 0 and ": awake" in r.stdout and "tag kv (keep): awake" in r.stdout and
              "tag scratch (discard): awake" in r.stdout, f"[tag] status lists the tags ({r.stdout} {r.stderr})")
        r = ctl_run("sleep", pid, "--tag", "kv")
        check(r.returncode == 0 and "sleep tag kv done" in r.stdout,
              f"[tag] sleep --tag kv, as its regions said (rc {r.returncode} {r.stdout} {r.stderr})")
        check(ask("asleep kv") == "asleep 1" and ask("asleep scratch") == "asleep 0", "[tag] kv asleep, scratch not")
        r = ctl_run("status", pid, "--tag", "kv")
        check(r.returncode == 0 and "tag kv (keep): asleep" in r.stdout and "scratch" not in r.stdout,
              f"[tag] status --tag kv ({r.stdout} {r.stderr})")
        for args in (["sleep", pid, "--tag", "nosuch", "--discard"], ["wake", pid, "--tag", "nosuch"],
                     ["status", pid, "--tag", "nosuch"]):
            r = ctl_run(*args)
            check(r.returncode == 4 and "no tag nosuch" in r.stderr, f"[tag] {args[0]} of an unknown tag exits 4 "
                  f"(rc {r.returncode} {r.stderr})")
        r = ctl_run("wake", pid, "--tag", "kv")
        check(r.returncode == 0 and "wake tag kv done" in r.stdout, f"[tag] wake --tag kv ({r.stdout} {r.stderr})")
        check(ask("asleep kv") == "asleep 0", "[tag] kv awake")
        check(ask("check") == "ok", "[tag] kv's contents kept across its sleep")
        r = ctl_run("sleep", pid, "--tag", "scratch", "--discard")
        check(r.returncode == 0 and ask("asleep scratch") == "asleep 1" and ask("asleep kv") == "asleep 0",
              f"[tag] sleep --tag scratch --discard ({r.stdout} {r.stderr})")
        r = ctl_run("wake", pid, "--tag", "scratch")
        check(r.returncode == 0 and ask("asleep scratch") == "asleep 0", f"[tag] scratch awake ({r.stdout})")
        check(ask("asleep kv") == "asleep 0", "[tag] nothing slept by a refused request")
    finally:
        t.stdin.close()
        t.wait(timeout=60)


def case_ctl(build):
    """pagefast-ctl sleep --keep / status / wake from another process, of
    everything and by tag."""
    p = paths(build)
    ctl = os.path.join(build, "tools", "pagefast-ctl")
    for conf in ["", "control:off"]:
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("PAGEFAST") or k.startswith("FAKECUDA") or k == "LD_PRELOAD":
                del e[k]
        e.update({"LD_LIBRARY_PATH": p["fake"], "LD_PRELOAD": p["lib"], "PAGEFAST_CONF": conf})
        t = subprocess.Popen([p["exe"], "ctl-target"], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            check(t.stdout.readline().strip() == "ready", f"[{conf}] the target is ready")
            pid = str(t.pid)

            def ask(line):
                t.stdin.write(line + "\n")
                t.stdin.flush()
                return t.stdout.readline().strip()

            def ctl_run(*args):
                return subprocess.run([ctl] + list(args) + [pid], capture_output=True, text=True, timeout=60)

            if conf == "control:off":
                r = ctl_run("sleep", "--keep")
                check(r.returncode == 3 and ask("status") == "asleep 0",
                      f"[control:off] not reachable, nothing slept (rc {r.returncode} {r.stderr})")
            else:
                r = ctl_run("sleep", "--keep")
                check(r.returncode == 0 and "done" in r.stdout, f"ctl sleep --keep (rc {r.returncode} {r.stdout} {r.stderr})")
                check(ask("status") == "asleep 1", "the target's pool is asleep")
                r = ctl_run("status")
                check(r.returncode == 0 and ": asleep" in r.stdout, f"ctl status asleep ({r.stdout})")
                r = ctl_run("wake")
                check(r.returncode == 0 and "done" in r.stdout, f"ctl wake (rc {r.returncode} {r.stdout} {r.stderr})")
                check(ask("status") == "asleep 0", "the target's pool is awake")
                r = subprocess.run([ctl, "nap", pid], capture_output=True, text=True)
                check(r.returncode == 2, "a bad command is a usage error")
                r = ctl_run("sleep")
                check(r.returncode == 2 and "--keep" in r.stderr and "--discard" in r.stderr,
                      f"sleep without --keep or --discard is refused, saying what each does ({r.stderr})")
                r = ctl_run("sleep", "--keep", "--discard")
                check(r.returncode == 2, "sleep with both is refused")
                check(ask("status") == "asleep 0", "nothing slept")
            out = ask("check")
            check(out == "ok ctl", f"[{conf}] contents the same at the same addresses ({out})")
        finally:
            t.stdin.close()
            t.wait(timeout=60)
    # Without keep (the contents go, so no check at the end).
    t = subprocess.Popen([p["exe"], "ctl-target"], env=dict(e, PAGEFAST_CONF=""), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        check(t.stdout.readline().strip() == "ready", "[discard] the target is ready")
        r = subprocess.run([ctl, "sleep", "--discard", str(t.pid)], capture_output=True, text=True, timeout=60)
        t.stdin.write("status\n")
        t.stdin.flush()
        check(r.returncode == 0 and "done" in r.stdout and t.stdout.readline().strip() == "asleep 1",
              f"ctl sleep --discard ({r.stdout} {r.stderr})")
        r = subprocess.run([ctl, "wake", str(t.pid)], capture_output=True, text=True, timeout=60)
        t.stdin.write("status\n")
        t.stdin.flush()
        check(r.returncode == 0 and t.stdout.readline().strip() == "asleep 0", "[discard] woken")
    finally:
        t.stdin.close()
        t.wait(timeout=60)
    ctl_by_tag(build, ctl, e)
    r = subprocess.run([ctl, "status", "999999999"], capture_output=True, text=True)
    check(r.returncode == 3, "no such process: not reachable")
    r = subprocess.run([ctl, "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "--keep" in r.stdout and "--discard" in r.stdout and "status" in r.stdout,
          f"--help says what each command does ({r.stdout[:200]})")
    r = subprocess.run([ctl, "--version"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.startswith("pagefast-ctl ") and len(r.stdout.split()) == 2,
          f"--version ({r.stdout.strip()})")
    r = subprocess.run([ctl], capture_output=True, text=True)
    check(r.returncode == 2 and "usage" in r.stderr, "no arguments: usage")


SKIP = 77  # meson's "skipped"


# A thousand cycles where each copies little (2 MiB chunks). 100M chunks:
# the copies' 32 MiB pieces do not divide them.
SLEEP_CASES = {
    "sleep": ("", 5),
    "sleep_8M": ("chunk_size:8M", 20),
    "sleep_release0": ("release_delay:0", 5),
    "sleep_100M": ("chunk_size:100M", 3),
    "sleep_cycles": ("chunk_size:2M", 1000),
    "sleep_host_nokeep": ("chunk_size:2M,sleep_host_keep:off", 1000),
}


def main():
    name = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if sanitizer_runtimes(paths(build)["lib"]):
        # A sanitized libpagefast.so cannot be preloaded into a program
        # (its runtime must come first, and then the dlsym door runs before
        # the runtime is up); the policy tests cover sanitizers.
        print("skipped: sanitizer build")
        return SKIP
    if name == "ipc":
        case_ipc(build)
    elif name == "meminfo":
        case_meminfo(build)
    elif name == "capacity":
        case_capacity(build)
    elif name == "faults":
        case_faults(build)
    elif name == "sizes":
        case_sizes(build)
    elif name == "config":
        case_config(build)
    elif name in ("reuse", "threads"):
        # The fake driver counts any reuse before the device is done.
        # idle_share: reclaims before growth on the program's threads.
        case_simple(build, name, ["", "release_threshold:0", "chunk_size:2M", "slack:0", "idle_share:5"])
    elif name == "devices":
        for preload in (False, True):
            expect_ok(run(build, ["devices"], preload=preload, env={"FAKECUDA_DEVICES": "2"}), "devices",
                      "pagefast" if preload else "without pagefast")
    elif name == "peers":
        env = {"FAKECUDA_DEVICES": "2"}
        expect_ok(run(build, ["peers"], preload=False, env=env), "peers", "without pagefast")
        for conf in ["", "chunk_size:8M"]:
            r = run(build, ["peers"], env=dict(env, PAGEFAST_CONF=conf) if conf else env)
            expect_ok(r, "peers", f"pagefast [{conf or 'default'}]")
            if conf:
                check("ok peers stitch 1" in r.stdout, f"[{conf}] the peer case covered a stitch ({r.stdout[-200:]})")
    elif name == "ctl":
        case_ctl(build)
    elif name in SLEEP_CASES:
        # One test per configuration, so that each copies its few GiB
        # through the fake driver well inside its own time limit.
        for conf, cycles in [SLEEP_CASES[name]]:
            r = run(build, ["sleep", str(cycles)], env={"PAGEFAST_CONF": conf} if conf else None)
            expect_ok(r, "sleep", f"pagefast [{conf or 'default'}]")
            check(f"ok sleep cycles {cycles} creates" in r.stdout and "creates 0" not in r.stdout,
                  f"[{conf}] {cycles} cycles made and released chunks ({r.stdout[-200:]})")
    elif name == "sleep_own_vmm":
        # With the own-VMM cache and without it: the answer comes from
        # what the program holds, not from what the cache tracks.
        for conf in ["", "vmm_cache:off"]:
            r = run(build, ["sleep_own_vmm"], env={"PAGEFAST_CONF": conf} if conf else None)
            expect_ok(r, "sleep_own_vmm", f"pagefast [{conf or 'default'}]")
            # It slept with the pool's (docs/OWN-VMM.md "Sleep and wake"):
            # no line names memory left resident.
            lines = [l for l in r.stderr.splitlines() if "own VMM memory" in l]
            check(not lines, f"[{conf or 'default'}] nothing of the program's stays resident ({r.stderr[-400:]})")
    elif name in ("sleep_own_other", "sleep_own_import"):
        # The program's own memory where the ledger has to look further
        # (own_vmm_preload.cpp): on a device without a pool, and held
        # through an import of its own export. With and without the cache.
        sub = "other_device" if name == "sleep_own_other" else "import"
        for conf in ["", "vmm_cache:off"]:
            env = {"FAKECUDA_DEVICES": "2"}
            if conf:
                env["PAGEFAST_CONF"] = conf
            r = run_program(build, "own_vmm_preload", [sub], env=env)
            expect_ok(r, sub, f"pagefast [{conf or 'default'}]")
            # The memory on device 1 slept; the imported handle stays
            # resident (another process may map it), named in one warning.
            lines = [l for l in r.stderr.splitlines() if "own VMM memory" in l]
            if sub == "other_device":
                check(not lines, f"[{conf or 'default'}] nothing stays resident ({r.stderr[-400:]})")
            else:
                check(len(lines) == 1 and "4.0 MiB" in lines[0] and "exported or imported" in lines[0] and
                      "warn" in lines[0], f"[{conf or 'default'}] one warning names the 4 MiB imported ({r.stderr[-400:]})")
                check(lines and "the memory outside any region" in lines[0] and "slot" not in lines[0],
                      f"[{conf or 'default'}] it names the untagged memory, not a slot ({lines})")
    elif name in ("capture", "fork", "capi"):
        case_simple(build, name, [""]) if name != "capi" else expect_ok(run(build, ["capi"]), "capi", "pagefast")
    else:
        print("unknown case " + name)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
