#!/usr/bin/env python3
"""tests/interpose/file_cases.py: pagefast's own files through the preloaded
library (docs/SECURITY.md, docs/STATS.md): every path variable against a
symbolic link, another user's file, a directory and a FIFO; secure
execution (a setuid copy of a probe run by an unprivileged user); a
torchrun-style launcher with four ranks; processes that make no CUDA call;
the log line's prefix and levels. `file_cases.py CASE --build DIR`."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402
from casekit import check  # noqa: E402
import cases  # noqa: E402  (run, paths, pagefast_lines, LOG_LINE)

ARGS = None
NOBODY = 65534


def paths():
    cases.ARGS = ARGS
    return cases.paths()


def run(argv, env_extra=None, preload=True, timeout=60):
    return cases.run(argv, preload=paths()["lib"] if preload else None, env_extra=env_extra, timeout=timeout)


def door_linked():
    return os.path.join(paths()["bin"], "door_linked")


# ---- every path variable against hostile targets ----

VARIABLES = {
    "PAGEFAST_STATS": {},
    "PAGEFAST_REPORT": {"PAGEFAST_CONF": "report:exit"},
    "PAGEFAST_LOG_FILE": {"PAGEFAST_LOG": "info"},
    "PAGEFAST_TRACE": {},
}


def case_file_targets():
    for var, extra in VARIABLES.items():
        with tempfile.TemporaryDirectory() as d:
            victim = os.path.join(d, "victim")
            with open(victim, "w") as f:
                f.write("keep")
            targets = {"symlink": os.path.join(d, "link"), "directory": os.path.join(d, "dir"),
                       "fifo": os.path.join(d, "fifo"), "missing parent": os.path.join(d, "missing", "f")}
            os.symlink(victim, targets["symlink"])
            os.mkdir(targets["directory"])
            os.mkfifo(targets["fifo"])
            if os.geteuid() == 0:
                theirs = os.path.join(d, "theirs")
                with open(theirs, "w") as f:
                    f.write("their data")
                os.chown(theirs, NOBODY, NOBODY)
                os.chmod(theirs, 0o666)
                targets["another user's file"] = theirs
            for what, target in targets.items():
                env = dict(extra, **{var: target})
                try:
                    r = run([door_linked()], env)
                except subprocess.TimeoutExpired:
                    check(False, f"{var} at a {what}: the program hung")
                    continue
                warned = [l for l in cases.pagefast_lines(r.stderr) if var in l]
                check(r.returncode == 0 and "done" in r.stdout or r.returncode == 0,
                      f"{var} at a {what}: the program runs on (rc {r.returncode})")
                check(len(warned) == 1, f"{var} at a {what}: one warning names it ({cases.pagefast_lines(r.stderr)})")
            check(open(victim).read() == "keep", f"{var}: the link's target untouched")
            check(not os.path.exists(os.path.join(d, "missing")), f"{var}: no parent directory made")
            if "another user's file" in targets:
                t = targets["another user's file"]
                check(open(t).read() == "their data" and stat.S_IMODE(os.stat(t).st_mode) == 0o666,
                      f"{var}: another user's file neither emptied nor changed")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "made-%p")
            old = os.umask(0)
            try:
                r = run([door_linked()], dict(extra, **{var: path}))
            finally:
                os.umask(old)
            made = [n for n in os.listdir(d)]
            check(len(made) == 1 and stat.S_IMODE(os.stat(os.path.join(d, made[0])).st_mode) == 0o600,
                  f"{var}: a new file is 0600 under umask 0 and %p is expanded ({made})")
    if os.geteuid() != 0:
        print("note: not root, the other-user targets were not tried")


# ---- secure execution ----

def case_secure_exec():
    if os.geteuid() != 0:
        print("SKIP: a setuid-root copy needs root to make (running as uid", os.geteuid(), ")")
        return
    setpriv = shutil.which("setpriv")
    if not setpriv:
        print("SKIP: setpriv is not installed")
        return
    p = paths()
    d = tempfile.mkdtemp(prefix="pagefast-secure-")
    try:
        os.chmod(d, 0o755)
        probe = os.path.join(d, "secure_probe")
        shutil.copy(os.path.join(p["bin"], "secure_probe"), probe)
        lib = os.path.join(d, "libpagefast.so")
        shutil.copy(p["lib"], lib)
        os.chmod(lib, 0o755)
        os.chmod(probe, 0o4755)  # setuid root
        victims = {}
        for name in ["stats", "report", "trace", "log"]:
            v = os.path.join(d, name)
            with open(v, "w") as f:
                f.write("root's own")
            os.chmod(v, 0o600)
            victims[name] = v
        live = os.path.join(d, "live")
        os.mkdir(live)
        env = {"PAGEFAST_STATS": victims["stats"], "PAGEFAST_REPORT": victims["report"],
               "PAGEFAST_TRACE": victims["trace"], "PAGEFAST_LOG_FILE": os.path.join(d, "etc", "made", "log"),
               "PAGEFAST_LIVE_DIR": live, "PAGEFAST_CONF": "report:exit", "FAKECUDA_TOTAL_MEM": "8G"}
        fake = os.path.join(p["fake"], "libcuda.so.1")
        # The control: the same probe, not secure (root runs it), honours them.
        control = os.path.join(d, "control.json")
        r = run([probe, fake, lib], {"PAGEFAST_STATS": control}, preload=False)
        check(r.returncode == 0 and "secure 0" in r.stdout, f"control run ({r.stdout.strip()} {r.stderr[-300:]})")
        check(os.path.exists(control) and json.load(open(control))["calls"]["cuMemAlloc_v2"] == 1,
              "control: a non-secure run of the probe writes PAGEFAST_STATS")
        r = run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", probe, fake, lib], env,
                preload=False)
        if "secure 1" not in r.stdout:
            print(f"SKIP: the setuid copy did not run in secure execution here ({r.stdout.strip()} {r.stderr[-300:]})")
            return
        check(r.returncode == 0 and "alloc 0" in r.stdout, f"secure run: the probe ran and allocated ({r.stdout.strip()})")
        for name, v in victims.items():
            check(open(v, "rb").read() == b"root's own", f"secure: root's 0600 file for {name} untouched")
        check(not os.path.exists(os.path.join(d, "etc")), "secure: no directory made for PAGEFAST_LOG_FILE")
        check(os.listdir(live) == [], "secure: nothing in PAGEFAST_LIVE_DIR")
        lines = cases.pagefast_lines(r.stderr)
        secure = [l for l in lines if "secure execution" in l]
        check(len(secure) == 1, f"secure: one line says so ({lines})")
        check(secure and all(v in secure[0] for v in ["PAGEFAST_STATS", "PAGEFAST_REPORT", "PAGEFAST_TRACE",
                                                     "PAGEFAST_LOG_FILE", "PAGEFAST_LIVE_DIR"]),
              "secure: the line names every variable it ignored")
        check("pagefast memory report" in r.stderr, "secure: report:exit still reports, to stderr")
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- launchers and ranks ----

LAUNCHER = r"""
import os, subprocess, sys
procs = []
for rank in range(4):
    env = dict(os.environ, LOCAL_RANK=str(rank))
    procs.append(subprocess.Popen([sys.argv[1]], env=env, stdout=subprocess.DEVNULL))
print("workers", " ".join(str(p.pid) for p in procs))
sys.exit(max(p.wait() for p in procs))
"""


def case_launcher_ranks():
    """torchrun's shape: a preloaded launcher that makes no CUDA call starts
    four workers with LOCAL_RANK 0..3 and exits last."""
    with tempfile.TemporaryDirectory() as d:
        env = {"PAGEFAST_STATS": os.path.join(d, "s-%r-%p.json"), "PAGEFAST_LOG": "info",
               "PAGEFAST_LOG_FILE": os.path.join(d, "log-%r-%p.txt"), "PAGEFAST_CONF": "report:exit",
               "PAGEFAST_REPORT": os.path.join(d, "report-%h-%r-%p.txt")}
        r = run([sys.executable, "-c", LAUNCHER, door_linked()], env)
        check(r.returncode == 0, f"launcher and workers exit 0 ({r.stderr[-300:]})")
        workers = [int(x) for x in re.search(r"workers (.*)", r.stdout).group(1).split()]
        names = sorted(n for n in os.listdir(d) if n.startswith("s-"))
        want = sorted(f"s-{rank}-{pid}.json" for rank, pid in enumerate(workers))
        check(names == want, f"exactly 4 stats files, one per worker, none from the launcher ({names} vs {want})")
        for n in names:
            doc = json.load(open(os.path.join(d, n)))
            check(doc.get("schema") == 2, f"{n}: schema 2")
            check(doc["calls"]["cuMemAlloc_v2"] > 0 and doc["calls"]["cuMemFree_v2"] > 0, f"{n}: counts > 0")
            devs = doc["pool"]["devices"]
            check(isinstance(devs, list) and devs and devs[0]["device"] == 0 and devs[0]["hits"] >= 0,
                  f"{n}: devices as a labelled list")
        host = cases_host()
        reports = sorted(n for n in os.listdir(d) if n.startswith("report-"))
        check(reports == sorted(f"report-{host}-{rank}-{pid}.txt" for rank, pid in enumerate(workers)),
              f"%h %r %p in PAGEFAST_REPORT: one report per worker ({reports})")
        logs = sorted(n for n in os.listdir(d) if n.startswith("log-"))
        check(len(logs) >= 4 and all(f"log-{rank}-{pid}.txt" in logs for rank, pid in enumerate(workers)),
              f"%r %p in PAGEFAST_LOG_FILE: a log per worker ({logs})")
        for rank, pid in enumerate(workers):
            name = os.path.join(d, f"log-{rank}-{pid}.txt")
            lines = open(name).read().splitlines() if os.path.exists(name) else []
            parsed = [cases.LOG_LINE.match(l) for l in lines]
            check(lines and all(m and m.group(1) == str(pid) and m.group(2) == str(rank) for m in parsed),
                  f"rank {rank}: every line says pagefast[{pid} r{rank} time] ({lines[:1]})")


def cases_host():
    import socket
    return socket.gethostname().replace("/", "_")


def case_no_call():
    """A process that reached no driver entry writes no stats or report:
    a wrapper that exits last leaves its worker's file alone."""
    with tempfile.TemporaryDirectory() as d:
        stats = os.path.join(d, "s.json")
        report = os.path.join(d, "r.txt")
        env = {"PAGEFAST_STATS": stats, "PAGEFAST_REPORT": report, "PAGEFAST_CONF": "report:exit"}
        r = run(["sh", "-c", 'true'], env)
        check(not os.path.exists(stats) and not os.path.exists(report), "no CUDA call: no stats, no report")
        # The wrapper outlives the worker; the worker's figures survive.
        r = run(["sh", "-c", f'"{door_linked()}" >/dev/null; sleep 0.2'], env)
        doc = json.load(open(stats)) if os.path.exists(stats) else None
        check(doc and doc["calls"]["cuMemAlloc_v2"] > 0, "a wrapper exiting last leaves the worker's stats")
        check(os.path.exists(report) and "device 0" in open(report).read(), "and the worker's report")
        for conf, what in [({"PAGEFAST": "0"}, "pass-through"), ({"PAGEFAST_CONF": "stats:off"}, "stats:off")]:
            os.unlink(stats)
            run([os.path.join(paths()["bin"], "door_dlsym")], dict(conf, PAGEFAST_STATS=stats))
            check(os.path.exists(stats), f"{what}: a process that used the driver still writes its stats")
            os.unlink(stats)
            run(["true"], dict(conf, PAGEFAST_STATS=stats))
            check(not os.path.exists(stats), f"{what}: one that did not writes none")
            open(stats, "w").close()


# ---- the log line ----

def case_log_lines():
    argv = [door_linked()]
    r = run(argv, {"PAGEFAST_LOG": "info", "LOCAL_RANK": "3"})
    lines = cases.pagefast_lines(r.stderr)
    parsed = [cases.LOG_LINE.match(l) for l in lines]
    check(lines and all(m and m.group(2) == "3" for m in parsed), f"rank 3: pagefast[PID r3 HH:MM:SS.mmm] ({lines[:1]})")
    r = run(argv, {"PAGEFAST_LOG": "info"})
    parsed = [cases.LOG_LINE.match(l) for l in cases.pagefast_lines(r.stderr)]
    check(parsed and all(m and m.group(2) is None for m in parsed), "no rank variable: no rank in the prefix")
    # A bad level: one warning, and the pool stays on.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.json")
        r = run(argv, {"PAGEFAST_LOG": "loud", "PAGEFAST_STATS": path})
        lines = cases.pagefast_lines(r.stderr)
        check(len(lines) == 1 and "PAGEFAST_LOG" in lines[0] and "'loud'" in lines[0] and ": warning:" in lines[0],
              f"bad PAGEFAST_LOG: one warning naming it ({lines})")
        doc = json.load(open(path))
        check(doc["pagefast"]["mode"] == "active", "bad PAGEFAST_LOG: the pool stays on")
    # spdlog's names.
    r = run(argv, {"PAGEFAST_LOG": "trace"})
    check(any(": info: active" in l for l in cases.pagefast_lines(r.stderr)), "trace: as verbose as debug")
    r = run(argv, {"PAGEFAST_LOG": "critical", "PAGEFAST_CONF": "bogus:1"})
    lines = cases.pagefast_lines(r.stderr)
    check(len(lines) == 1 and ": error:" in lines[0], f"critical: errors only ({lines})")
    r = run(argv, {"PAGEFAST_LOG": "err", "PAGEFAST_STATS": "/nonexistent/dir/s.json"})
    check(not cases.pagefast_lines(r.stderr), "err: no warnings")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
