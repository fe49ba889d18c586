#!/usr/bin/env python3
"""tests/tools/cases.py: the command-line contract of the tools, on the fake
driver. Every tool answers --version (the project's version) and --help,
and exits 2 for a usage error (pagefast-run: 125, as env does); pagefast-run
exits 126/127 for a program that cannot be run / is not found and the
program's status otherwise, and 125 for a PAGEFAST or PAGEFAST_CONF the
library would refuse (the closest key named), before the program starts;
--if-enabled accepts exactly the PAGEFAST
spellings the library accepts; pagefast-stat --prometheus prints a valid
exposition whose figures match --json, and --textfile writes it atomically;
segments of another pid namespace are listed and never removed.

usage: cases.py CASE --build DIR
"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402
from promcheck import strict_parse  # noqa: E402  (tests/tools/promcheck.py)

ARGS = None  # set by casekit.main


def tool(*parts):
    return os.path.join(ARGS.build, *parts)


def project_version():
    with open(tool("meson-info", "intro-projectinfo.json")) as f:
        return json.load(f)["version"]


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env.update(extra or {})
    return env


def run(argv, env=None, timeout=60, stdin=None):
    return subprocess.run(argv, env=env if env is not None else clean_env(), input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def hold_env(live_dir, extra=None):
    env = clean_env({"LD_LIBRARY_PATH": tool("tests", "fakecuda"), "FAKECUDA_TOTAL_MEM": "8G",
                     "LD_PRELOAD": tool("interpose", "libpagefast.so"), "PAGEFAST_LIVE_DIR": live_dir})
    env.update(extra or {})
    return env


def start_hold(live_dir, extra=None, argv=None):
    p = subprocess.Popen((argv or []) + [tool("tests", "live", "hold")], env=hold_env(live_dir, extra),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    check(line == "ready", f"the holding program is ready ({line!r})")
    return p


def wait_published(live_dir, count=1, extra_args=()):
    """Waits until pagefast-stat lists `count` processes whose published
    figures show the holding program's three allocations (each process
    publishes every 0.5 s on a thread of its own: when is the scheduler's).
    False after a minute (a hang guard)."""
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        r = run([tool("tools", "pagefast-stat"), "--dir", live_dir, "--json", *extra_args])
        try:
            procs = json.loads(r.stdout)["processes"] if r.returncode == 0 else []
        except ValueError:
            procs = []
        if len([x for x in procs if x.get("calls", {}).get("cuMemAlloc_v2") == 3]) >= count:
            return True
        time.sleep(0.05)
    return False


def finish(p):
    out, err = p.communicate("go\n", timeout=60)
    return p.returncode, out, err


# ---- --version, --help, usage errors ------------------------------------------

TOOLS = [  # (path under the build, exit status of a usage error)
    (("tools", "pagefast-run"), 125),
    (("tools", "pagefast-stat"), 2),
    (("tools", "pagefast-replay"), 2),
    (("tools", "replay", "pagefast-replay-engine"), 2),
    (("tools", "pagefast-enabled"), 2),
]


def case_cli():
    version = project_version()
    for parts, usage_status in TOOLS:
        name = parts[-1]
        r = run([tool(*parts), "--version"])
        check(r.returncode == 0 and r.stdout.strip() == f"{name} {version}",
              f"{name} --version: rc {r.returncode} {r.stdout.strip()!r}")
        r = run([tool(*parts), "--help"])
        check(r.returncode == 0 and "usage" in r.stdout.lower(), f"{name} --help: rc {r.returncode}, usage on stdout")
        r = run([tool(*parts), "--no-such-option"])
        check(r.returncode == usage_status and r.stderr.strip() != "",
              f"{name} --no-such-option: rc {r.returncode} (want {usage_status}), a message: {r.stderr.strip()[:80]!r}")
    stat_tool = tool("tools", "pagefast-stat")
    for bad in (["--json", "--prometheus"], ["--textfile", "/tmp"], ["--watch", "0"], ["--count", "x"], ["extra"]):
        r = run([stat_tool, *bad])
        check(r.returncode == 2, f"pagefast-stat {' '.join(bad)}: usage error rc {r.returncode}")


def case_exit_codes():
    launcher = tool("tools", "pagefast-run")
    with tempfile.TemporaryDirectory() as d:
        not_exec = os.path.join(d, "plain")
        with open(not_exec, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(not_exec, 0o644)
        cases = [
            ([launcher, "--bogus", "--", "true"], 125, "its own bad option"),
            ([launcher, "--conf"], 125, "an option without its value"),
            ([launcher], 125, "no program"),
            ([launcher, "--lib", os.path.join(d, "missing.so"), "--", "true"], 125, "no library"),
            ([launcher, "--", os.path.join(d, "missing")], 127, "a program that does not exist"),
            ([launcher, "--", "pagefast-no-such-program-anywhere"], 127, "a program not on PATH"),
            ([launcher, "--", not_exec], 126, "a file that is not executable"),
            ([launcher, "--", d], 126, "a directory"),
            ([launcher, "--", "sh", "-c", "exit 7"], 7, "the program's status"),
            ([launcher, "--", "sh", "-c", "exit 0"], 0, "the program's success"),
            ([launcher, "--", "sh", "-c", "exit 125"], 125, "the program's own 125"),
        ]
        for argv, want, what in cases:
            r = run(argv)
            check(r.returncode == want, f"pagefast-run, {what}: rc {r.returncode} (want {want}) {r.stderr.strip()[:100]}")


# ---- pagefast-run checks the settings before the program starts ---------------------


def conf_keys():
    """The PAGEFAST_CONF keys, from the options table (pagefast-options)."""
    out = run([tool("tools", "pagefast-options")]).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()[1:3] == ["conf", "key"]]


def case_conf_check():
    """A bad PAGEFAST, PAGEFAST_CONF or --conf: pagefast-run exits 125 with
    the library's own message (an unknown key: the closest one named) and
    never starts the program; the library itself still runs the program as
    a pass-through with one message."""
    launcher = tool("tools", "pagefast-run")
    with tempfile.TemporaryDirectory() as d:
        mark = os.path.join(d, "ran")
        program = ["sh", "-c", f'touch "{mark}"']
        bad = [({"PAGEFAST_CONF": "chunksize:256M"}, [], "unknown key 'chunksize': did you mean chunk_size?"),
               ({}, ["--conf", "chunksize:256M"], "did you mean chunk_size?"),
               ({"PAGEFAST_CONF": "numa:off"}, ["--conf=Slak:1ms"], "unknown key 'Slak': did you mean slack?"),
               ({}, ["--conf", "chunk_size:3M"], "bad value '3M' for key 'chunk_size' (accepted: a size, 2M..1T"),
               ({}, ["--conf", "pool:of"], "bad value 'of' for key 'pool'"),
               ({}, ["--numa", "bogus"], "bad value 'bogus' for key 'numa'"),
               ({}, ["--conf", "chunk_size"], "key 'chunk_size' has no value"),
               ({}, ["--conf", "zzzzzz:1"], "unknown key 'zzzzzz' (accepted keys: pool, chunk_size"),
               ({"PAGEFAST": "maybe"}, [], "PAGEFAST: bad value 'maybe'")]
        for env, args, want in bad:
            r = run([launcher, *args, "--", *program], env=clean_env(env))
            check(r.returncode == 125 and want in r.stderr and r.stderr.startswith("pagefast-run: error: ")
                  and not os.path.exists(mark),
                  f"pagefast-run {env} {args}: rc {r.returncode} (want 125), {r.stderr.strip()!r}, program not run")
        # Each key with its last letter lost: that key is named.
        keys = conf_keys()
        check(len(keys) >= 10 and "chunk_size" in keys, f"the table's keys ({keys})")
        for key in keys:
            r = run([launcher, "--conf", key[:-1] + ":1", "--", *program])
            check(r.returncode == 125 and f"did you mean {key}?" in r.stderr, f"'{key[:-1]}' names {key}: {r.stderr.strip()!r}")
        check(not os.path.exists(mark), "no program ran")
        # Good settings: the program runs.
        for env, args in [({"PAGEFAST_CONF": "chunk_size:4M, release_delay:off"}, ["--conf", "numa:off"]),
                          ({"PAGEFAST": "0", "PAGEFAST_CONF": "pool:off"}, []), ({"PAGEFAST_LOG": "info"}, []),
                          ({}, ["--no-pool", "--numa", "off"])]:
            r = run([launcher, *args, "--", *program], env=clean_env(env))
            check(r.returncode == 0 and os.path.exists(mark), f"pagefast-run {env} {args}: the program ran ({r.stderr!r})")
            if os.path.exists(mark):
                os.unlink(mark)
    # The library's own way stays: one message, and the program runs.
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(d, {"PAGEFAST_CONF": "chunksize:256M"})
        rc, out, err = finish(p)
        lines = [l for l in err.splitlines() if "PAGEFAST_CONF" in l]
        check(rc == 0 and "done" in out and len(lines) == 1 and "unknown key 'chunksize'" in lines[0]
              and "pass-through" in lines[0], f"preloaded as it is: one message, the program runs ({err.strip()!r})")


# ---- a refused setting under plain preload: impossible to miss -----------------

def case_refused():
    """PAGEFAST_CONF with a typo, preloaded without the launcher: the
    program runs as a pass-through with the launcher's very message (the
    nearest key named), and pagefast-stat lists it (table, JSON,
    Prometheus) with its mode and the reason; pool:off lists as off;
    PAGEFAST_STRICT=1 stops the program at load with exit status 125."""
    launcher = tool("tools", "pagefast-run")
    said = run([launcher, "--conf", "chunksize:256M", "--", "true"]).stderr.strip()
    check(said.startswith("pagefast-run: error: ") and "did you mean chunk_size?" in said, f"launcher: {said!r}")
    message = said[len("pagefast-run: error: "):]
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(d, {"PAGEFAST_CONF": "chunksize:256M"})
        q = start_hold(d, {"PAGEFAST_CONF": "pool:off"})
        # The pass-through segment is written at the first driver call,
        # before "ready": no wait needed for it.
        r = run([tool("tools", "pagefast-stat"), "--dir", d, "--json"])
        procs = {x["pid"]: x for x in json.loads(r.stdout)["processes"]}
        mine = procs.get(p.pid, {})
        check(mine.get("mode") == "pass-through" and mine.get("reason") == message,
              f"listed as pass-through with the launcher's message as reason ({mine})")
        r = run([tool("tools", "pagefast-stat"), "--dir", d], env=clean_env({"COLUMNS": "400"}))
        rows = [l for l in r.stdout.splitlines() if l.split()[:1] == [str(p.pid)]]
        check(len(rows) == 1 and rows[0].split()[2] == "pass-through", f"the table's MODE column ({r.stdout!r})")
        check(f"pass-through: {message}" in r.stdout, "the table says why under the row")
        check(rows and rows[0].endswith("  hold"), f"COMMAND: the program without its folder ({rows})")
        r = run([tool("tools", "pagefast-stat"), "--dir", d], env=clean_env({"COLUMNS": "150"}))
        check(all(len(l) <= 150 for l in r.stdout.splitlines()[1:]), f"COLUMNS=150: every line fits ({r.stdout!r})")
        r = run([tool("tools", "pagefast-stat"), "--dir", d, "--prometheus"])
        strict_parse(r.stdout)
        info = [l for l in r.stdout.splitlines() if l.startswith("pagefast_process_info{") and f'pid="{p.pid}"' in l]
        check(len(info) == 1 and 'mode="pass-through"' in info[0] and "did you mean chunk_size?" in info[0],
              f"pagefast_process_info names the mode and the reason ({info})")
        check(f'pagefast_active{{pid="{p.pid}",' in r.stdout and
              [l for l in r.stdout.splitlines() if l.startswith(f'pagefast_active{{pid="{p.pid}",')][0].endswith(" 0"),
              "pagefast_active is 0 for it")
        check(wait_published(d, 1), "the pool:off process publishes its calls")
        r = run([tool("tools", "pagefast-stat"), "--dir", d, "--json"])
        off = {x["pid"]: x for x in json.loads(r.stdout)["processes"]}.get(q.pid, {})
        check(off.get("mode") == "off" and off.get("reason") == "pool:off", f"pool:off is listed as off ({off})")
        for proc in (p, q):
            rc, out, err = finish(proc)
            check(rc == 0 and "done" in out, "the program ran to its end")
    # PAGEFAST_STRICT=1: the message, exit status 125, the program never runs.
    for env in [{"PAGEFAST_CONF": "chunksize:256M"}, {"PAGEFAST_CONF": "slack:5"}, {"PAGEFAST": "maybe"}]:
        with tempfile.TemporaryDirectory() as d:
            r = run([tool("tests", "live", "hold")], env=hold_env(d, dict(env, PAGEFAST_STRICT="1")), stdin="go\n")
            check(r.returncode == 125 and "ready" not in r.stdout and "PAGEFAST_STRICT=1: stopping" in r.stderr,
                  f"strict with {env}: rc {r.returncode}, {r.stderr.strip()!r}")
    with tempfile.TemporaryDirectory() as d:
        r = run([tool("tests", "live", "hold")], env=hold_env(d, {"PAGEFAST_STRICT": "sure"}), stdin="go\n")
        check(r.returncode == 0 and "PAGEFAST_STRICT: bad value 'sure'" in r.stderr,
              f"a bad PAGEFAST_STRICT is itself refused, not strict ({r.stderr.strip()!r})")
    r = run([launcher, "--", "true"], env=clean_env({"PAGEFAST_STRICT": "sure"}))
    check(r.returncode == 125 and "PAGEFAST_STRICT: bad value 'sure'" in r.stderr, "the launcher refuses it too")


def case_launcher_values():
    """pagefast-run checks every value before the program starts: a time
    without a unit (the message names the units), a bad --log level, a
    --stats or --log-file whose folder does not exist or cannot be
    written; good values run the program."""
    launcher = tool("tools", "pagefast-run")
    with tempfile.TemporaryDirectory() as d:
        mark = os.path.join(d, "ran")
        program = ["sh", "-c", f'touch "{mark}"']
        bad = [(["--conf", "slack:5"], "bad value '5' for key 'slack' (accepted: a time with a unit: us, ms, s or m"),
               (["--conf", "release_delay:2"], "for key 'release_delay'"),
               (["--log", "verbose"], "PAGEFAST_LOG: bad value 'verbose' (accepted: off, critical, error, warn"),
               (["--log=loud"], "PAGEFAST_LOG: bad value 'loud'"),
               (["--stats", "/nonexistent/x.json"], "--stats: folder '/nonexistent' does not exist"),
               (["--log-file", "/nonexistent/log"], "--log-file: folder '/nonexistent' does not exist")]
        for args, want in bad:
            r = run([launcher, *args, "--", *program])
            check(r.returncode == 125 and want in r.stderr and not os.path.exists(mark),
                  f"pagefast-run {args}: rc {r.returncode} (want 125), {r.stderr.strip()!r}, program not run")
        for args in [["--conf", "slack:5ms,release_delay:0"], ["--log", "info"], ["--stats", "stderr"],
                     ["--stats", os.path.join(d, "s-%p.json")], ["--log-file", os.path.join(d, "log")]]:
            r = run([launcher, *args, "--", *program])
            check(r.returncode == 0 and os.path.exists(mark), f"pagefast-run {args}: the program ran ({r.stderr!r})")
            if os.path.exists(mark):
                os.unlink(mark)
    # The library refuses the same bare number, as a pass-through.
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(d, {"PAGEFAST_CONF": "slack:5"})
        rc, out, err = finish(p)
        check(rc == 0 and "bad value '5' for key 'slack'" in err and "pass-through" in err,
              f"the library refuses slack:5 alike ({err.strip()!r})")


def case_quiet():
    """A process that never calls CUDA says nothing, at the default level
    and at info: a chain of shells under pagefast-run --log info (as a
    pyenv shim) prints only the lines of the one process that allocates,
    its NUMA lines among them, and at exit its one-line summary."""
    launcher = tool("tools", "pagefast-run")
    with tempfile.TemporaryDirectory() as d:
        env = hold_env(d)
        del env["LD_PRELOAD"]
        for level in [[], ["--log", "info"]]:
            r = run([launcher, *level, "--", "sh", "-c", "sh -c 'sh -c true'; true"], env=env)
            check(r.returncode == 0 and r.stderr == "", f"shells under pagefast-run {level} say nothing ({r.stderr!r})")
        hold = tool("tests", "live", "hold")
        r = run([launcher, "--log", "info", "--", "sh", "-c", f"sh -c true; sh -c 'exec {hold}'; sh -c true"], env=env,
                stdin="go\n")
        lines = r.stderr.splitlines()
        pids = {l.split("[", 1)[1].split()[0] for l in lines if l.startswith("pagefast[")}
        check(r.returncode == 0 and len(pids) == 1 and lines and all(l.startswith("pagefast[") for l in lines),
              f"only the allocating process speaks ({r.stderr!r})")
        numa = [l for l in lines if ": info: numa: " in l]
        active = [i for i, l in enumerate(lines) if ": info: active (" in l]
        check(numa and active and lines.index(numa[0]) < active[0] + 2, f"its NUMA decision is said ({lines})")
        summary = [l for l in lines if ": info: at exit: 3 allocation calls, " in l]
        check(len(summary) == 1 and "from memory the pool already held" in summary[0] and "in the driver's memory calls" in summary[0],
              f"one summary line at exit ({summary})")
        r = run([hold], env=dict(hold_env(d), PAGEFAST_LOG="warn"), stdin="go\n")
        check(r.returncode == 0 and r.stderr == "", f"at the default level a working program hears nothing ({r.stderr!r})")


# ---- PAGEFAST_* names that are no setting; a refused setting said once per job ----


def case_names():
    """A PAGEFAST_* variable the library does not read is named with what
    was meant: one warning line under plain preload (the program runs with
    the pool), exit 125 at load under PAGEFAST_STRICT=1 and from
    pagefast-run. The launcher checks PAGEFAST_LOG and the files from the
    environment as from its options. A refused setting is said once per job
    however many processes the program starts, and shortly when there is a
    suggestion."""
    launcher = tool("tools", "pagefast-run")
    meant = [("PAGEFAST_LIMIT", "1Q", "did you mean PAGEFAST_CONF=limit:?"),
             ("PAGEFAST_LIMT", "1G", "did you mean PAGEFAST_CONF=limit:?"),
             ("PAGEFAST_LOGG", "info", "did you mean PAGEFAST_LOG?"),
             ("PAGEFAST_ZZZZZZZ", "1", "(its variables: PAGEFAST, PAGEFAST_CONF,")]
    hold = tool("tests", "live", "hold")
    with tempfile.TemporaryDirectory() as d:
        mark = os.path.join(d, "ran")
        for name, value, want in meant:
            r = run([hold], env=hold_env(d, {name: value}), stdin="go\n")
            lines = [l for l in r.stderr.splitlines() if name in l]
            check(r.returncode == 0 and "done" in r.stdout and len(lines) == 1 and ": warning: " in lines[0]
                  and want in lines[0] and f"{name}: not a variable pagefast reads" in lines[0],
                  f"{name}={value} preloaded: one warning, the program runs ({r.stderr.strip()!r})")
            r = run([hold], env=hold_env(d, {name: value, "PAGEFAST_STRICT": "1"}), stdin="go\n")
            check(r.returncode == 125 and "ready" not in r.stdout and want in r.stderr
                  and "PAGEFAST_STRICT=1: stopping" in r.stderr, f"{name} under strict: rc {r.returncode}")
            r = run([launcher, "--", "sh", "-c", f'touch "{mark}"'], env=clean_env({name: value}))
            check(r.returncode == 125 and r.stderr.startswith("pagefast-run: error: ") and want in r.stderr
                  and not os.path.exists(mark), f"pagefast-run with {name}: rc {r.returncode} {r.stderr.strip()!r}")
        # The project's own names are no typo.
        for name, value in (("PAGEFAST_COMMIT", "abc"), ("PAGEFAST_LIBRARY", "x.so"), ("PAGEFAST_IPC_IDLE", "30s")):
            r = run([hold], env=hold_env(d, {name: value, "PAGEFAST_STRICT": "1"}), stdin="go\n")
            check(r.returncode == 0 and name not in r.stderr, f"{name} is a variable of the table ({r.stderr!r})")
        # The launcher checks values from the environment as from its options.
        for env, want in [({"PAGEFAST_LOG": "verbose"}, "PAGEFAST_LOG: bad value 'verbose'"),
                          ({"PAGEFAST_STATS": "/nonexistent/x.json"}, "PAGEFAST_STATS: folder '/nonexistent'"),
                          ({"PAGEFAST_LOG_FILE": "/nonexistent/log"}, "PAGEFAST_LOG_FILE: folder '/nonexistent'"),
                          ({"PAGEFAST_TRACE": "/nonexistent/t"}, "PAGEFAST_TRACE: folder '/nonexistent'"),
                          ({"PAGEFAST_LIVE_DIR": "/nonexistent"}, "PAGEFAST_LIVE_DIR: '/nonexistent'")]:
            r = run([launcher, "--", "sh", "-c", f'touch "{mark}"'], env=clean_env(env))
            check(r.returncode == 125 and want in r.stderr and not os.path.exists(mark),
                  f"pagefast-run with {env}: rc {r.returncode} (want 125) {r.stderr.strip()!r}")
        # The library checks the same at load: a warning in a process that
        # never calls CUDA (the stats file would be written only at exit),
        # the stop at load under PAGEFAST_STRICT=1.
        for env, want in [({"PAGEFAST_STATS": "/nonexistent/x.json"}, "PAGEFAST_STATS: folder '/nonexistent' does not"),
                          ({"PAGEFAST_TRACE": "/nonexistent/t"}, "PAGEFAST_TRACE: folder '/nonexistent' does not"),
                          ({"PAGEFAST_LOG_FILE": "/nonexistent/l"}, "PAGEFAST_LOG_FILE: cannot open '/nonexistent/l'")]:
            r = run(["true"], env=hold_env(d, env))
            check(r.returncode == 0 and want in r.stderr and len(r.stderr.splitlines()) == 1,
                  f"{env} preloaded into true: one warning at load ({r.stderr.strip()!r})")
        for env, want in [({"PAGEFAST_STATS": "/nonexistent/x.json"}, "PAGEFAST_STATS: folder '/nonexistent' does not"),
                          ({"PAGEFAST_TRACE": "/nonexistent/t"}, "PAGEFAST_TRACE: folder '/nonexistent' does not"),
                          ({"PAGEFAST_LOG_FILE": "/nonexistent/l"}, "PAGEFAST_LOG_FILE: cannot open '/nonexistent/l'"),
                          ({"PAGEFAST_LIVE_DIR": "/nonexistent"}, "PAGEFAST_LIVE_DIR: folder '/nonexistent' does not")]:
            r = run([hold], env=hold_env(d, dict(env, PAGEFAST_STRICT="1")), stdin="go\n")
            check(r.returncode == 125 and "ready" not in r.stdout and want in r.stderr
                  and "PAGEFAST_STRICT=1: stopping" in r.stderr, f"{env} under strict: rc {r.returncode} {r.stderr!r}")
        # Said once per job: a chain of processes (as a pyenv shim's helpers)
        # with the same refused setting and the same unknown name.
        chain = f"sh -c 'sh -c true; sh -c true'; sh -c true; exec {hold}"
        for env, want in [({"PAGEFAST_CONF": "chunksize:256M"}, "did you mean chunk_size?"),
                          ({"PAGEFAST_LIMIT": "1G"}, "did you mean PAGEFAST_CONF=limit:?")]:
            r = run(["sh", "-c", chain], env=hold_env(d, env), stdin="go\n")
            lines = [l for l in r.stderr.splitlines() if l.startswith("pagefast[")]
            check(r.returncode == 0 and "done" in r.stdout and len(lines) == 1 and want in lines[0],
                  f"{env} through six processes: said once ({r.stderr.strip()!r})")
            check("accepted keys" not in r.stderr and len(lines[0] if lines else "") < 250,
                  f"short, no list of keys beside a suggestion ({len(lines[0]) if lines else 0} characters)")
        # Loaded into a running program with another thread (dlopen), the
        # library leaves the environment alone: setenv would race its reads.
        probe = ("import ctypes, sys, threading\n"
                 "done = threading.Event()\n"
                 "t = threading.Thread(target=done.wait)\n"
                 "if sys.argv[2] == 'thread': t.start()\n"
                 "ctypes.CDLL(sys.argv[1])\n"
                 "libc = ctypes.CDLL(None)\n"
                 "libc.getenv.restype = ctypes.c_char_p\n"
                 "print(libc.getenv(b'PAGEFAST_SAID'))\n"
                 "done.set()\n")
        lib = tool("interpose", "libpagefast.so")
        env = clean_env({"PAGEFAST_LIMIT": "1G", "LD_LIBRARY_PATH": tool("tests", "fakecuda")})
        alone = run([sys.executable, "-c", probe, lib, "alone"], env=env)
        threaded = run([sys.executable, "-c", probe, lib, "thread"], env=env)
        check(alone.stdout.startswith("b'") and threaded.stdout.strip() == "None"
              and "PAGEFAST_LIMIT" in threaded.stderr,
              f"the marker: set by a process of one thread ({alone.stdout.strip()}), not with two "
              f"({threaded.stdout.strip()}), the warning said either way")
        # A different setting in a child is said again.
        r = run(["sh", "-c", f"sh -c true; PAGEFAST_CONF=slack:5 exec {hold}"],
                env=hold_env(d, {"PAGEFAST_CONF": "chunksize:256M"}), stdin="go\n")
        lines = [l for l in r.stderr.splitlines() if l.startswith("pagefast[")]
        check(len(lines) == 2 and "slack" in lines[1], f"another refused value is said again ({lines})")


# ---- --if-enabled and the library read PAGEFAST alike ----------------------------

SPELLINGS = ["1", "0", "on", "off", "true", "false", " 1", "1 ", "\t0", "TRUE", "True", "On", "yes", "no", "2",
             "01", "enable", "1,", "-1", "y"]


def library_says(value, live_dir):
    """What libpagefast.so does with PAGEFAST=value: 'on' (the pool runs and
    publishes its segment), 'off' (pass-through, silent) or 'refused' (a
    message naming PAGEFAST, pass-through)."""
    for name in os.listdir(live_dir):
        os.unlink(os.path.join(live_dir, name))
    p = start_hold(live_dir, {"PAGEFAST": value})
    segments = os.listdir(live_dir)
    rc, out, err = finish(p)
    check(rc == 0 and "done" in out, f"PAGEFAST={value!r}: the program runs (rc {rc})")
    if any("PAGEFAST:" in line and "bad value" in line for line in err.splitlines()):
        return "refused"
    return "on" if segments else "off"


def launcher_says(value):
    r = run([tool("tools", "pagefast-run"), "--if-enabled", "--", "sh", "-c", 'printf "%s" "${LD_PRELOAD:-}"'],
            env=clean_env({"PAGEFAST": value}))
    check(r.returncode == 0, f"pagefast-run --if-enabled with PAGEFAST={value!r}: rc {r.returncode}")
    preloaded = "libpagefast.so" in r.stdout
    if "warning" in r.stderr and "PAGEFAST" in r.stderr:
        return "refused" if not preloaded else "refused but preloaded"
    return "on" if preloaded else "off"


def case_if_enabled():
    with tempfile.TemporaryDirectory() as d:
        answers = {}
        for value in SPELLINGS:
            lib, launcher = library_says(value, d), launcher_says(value)
            answers[value] = lib
            check(lib == launcher, f"PAGEFAST={value!r}: library {lib}, pagefast-run --if-enabled {launcher}")
        # The comparison means something only if both sides vary.
        check({"on", "off", "refused"} <= set(answers.values()), f"the spellings cover on, off, refused: {answers}")
        check(answers["1"] == "on" and answers["0"] == "off", "1 is on, 0 is off")
        # Unset or empty: the library's default is on; --if-enabled is opt-in.
        for env in (clean_env(), clean_env({"PAGEFAST": ""})):
            r = run([tool("tools", "pagefast-run"), "--if-enabled", "--", "sh", "-c", 'printf "%s" "${LD_PRELOAD:-}"'],
                    env=env)
            check(r.returncode == 0 and "libpagefast.so" not in r.stdout, "--if-enabled without PAGEFAST: no preload")


# ---- Prometheus ----------------------------------------------------------------

def client_parse(text):
    """prometheus_client's own parser, when the package is there."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return None
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def case_prometheus():
    stat_tool = tool("tools", "pagefast-stat")
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(d, {"LOCAL_RANK": "3"})
        check(wait_published(d), "the process published its figures")
        r = run([stat_tool, "--dir", d, "--prometheus"])
        check(r.returncode == 0, f"--prometheus rc {r.returncode} {r.stderr}")
        try:
            fams = strict_parse(r.stdout)
        except ValueError as e:
            check(False, f"strict format check: {e}")
            fams = {}
        client = client_parse(r.stdout)
        if client is None:
            print("note: prometheus_client not importable; the strict check alone was used")
        else:
            check(len(client) == sum(len(f[2]) for f in fams.values()), "prometheus_client reads every sample")
        doc = json.loads(run([stat_tool, "--dir", d, "--json"]).stdout)
        proc = [x for x in doc["processes"] if x["pid"] == p.pid]
        check(len(proc) == 1, "the process is in --json")
        for name, (kind, help_text, samples) in fams.items():
            check(help_text.strip() != "", f"{name} has a HELP text")
            if kind == "counter":
                check(name.endswith("_total"), f"counter {name} ends in _total")
            if name.endswith("_bytes"):
                check(kind == "gauge", f"{name} is a gauge")
        check(fams.get("pagefast_processes", (0, 0, [({}, -1)]))[2][0][1] == 1, "pagefast_processes is 1")
        dev = proc[0]["devices"]["0"] if proc else {}
        for figure in ("reserved_bytes", "mapped_bytes", "in_use_bytes", "idle_bytes", "peak_in_use_bytes"):
            samples = fams.get("pagefast_" + figure, (0, 0, []))[2]
            check(len(samples) == 1, f"one {figure} series")
            if samples:
                labels, value = samples[0]
                check(labels.get("pid") == str(p.pid) and labels.get("device") == "0" and labels.get("rank") == "3"
                      and labels.get("host") and labels.get("pidns"), f"{figure} labels {labels}")
        for figure in ("hits", "growths", "releases"):
            samples = fams.get(f"pagefast_{figure}_total", (0, 0, []))[2]
            check(len(samples) == 1 and samples[0][1] == dev.get(figure), f"{figure}_total matches --json")
        samples = fams.get("pagefast_alloc_calls_total", (0, 0, []))[2]
        check(len(samples) == 1 and samples[0][1] == 3, "3 allocations counted")
        if client is not None:
            key = ("pagefast_growths_total", tuple(sorted(fams["pagefast_growths_total"][2][0][0].items())))
            check(client.get(key) == dev.get("growths"), "prometheus_client agrees on growths_total")
        finish(p)
        r = run([stat_tool, "--dir", d, "--prometheus"])
        fams = strict_parse(r.stdout)
        check(fams["pagefast_processes"][2][0][1] == 0 and not fams["pagefast_in_use_bytes"][2],
              "no process: families declared, no series")
    # The strict check itself refuses what it must.
    for bad in ("x 1\n", "# HELP a_total h\n# TYPE a_total counter\na_total{l=\"\\x\"} 1\n",
                "# HELP a h\n# TYPE a counter\na 1\n", "# HELP a h\na 1\n",
                "# HELP a h\n# TYPE a gauge\na 1\na 2\n", "# HELP a h\n# TYPE a gauge\na one\n"):
        try:
            strict_parse(bad)
            check(False, f"strict check refuses {bad!r}")
        except ValueError:
            check(True, f"strict check refuses {bad!r}")


def case_textfile():
    stat_tool = tool("tools", "pagefast-stat")
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as out:
        p = start_hold(d)
        check(wait_published(d), "the process published its figures")
        r = run([stat_tool, "--dir", d, "--prometheus", "--textfile", out])
        path = os.path.join(out, "pagefast.prom")
        check(r.returncode == 0 and r.stdout == "", f"--textfile rc {r.returncode}, nothing on stdout")
        check(os.listdir(out) == ["pagefast.prom"], f"only pagefast.prom is left ({os.listdir(out)})")
        st = os.stat(path)
        check(stat.S_IMODE(st.st_mode) == 0o644, f"readable by the collector ({oct(st.st_mode)})")
        with open(path) as f:
            fams = strict_parse(f.read())
        check(fams["pagefast_processes"][2][0][1] == 1, "the file holds the process")
        # --watch rewrites it each round by rename (a freed inode number may
        # come back: inode and modification time together tell versions apart).
        # The watch runs until three versions were seen (a minute at most: a
        # hang guard), however often this loop gets to look.
        inodes = set()
        w = subprocess.Popen([stat_tool, "--dir", d, "--prometheus", "--textfile", out, "--watch", "0.05",
                              "--count", "100000"], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        give_up = time.monotonic() + 60
        missing = 0
        while w.poll() is None and len(inodes) < 3 and time.monotonic() < give_up:
            try:
                st = os.stat(path)
                inodes.add((st.st_ino, st.st_mtime_ns))
            except FileNotFoundError:
                missing += 1
            time.sleep(0.005)
        running = w.poll() is None
        w.kill()
        w.wait(timeout=60)
        check(missing == 0, f"pagefast.prom is never missing ({missing} looks found none)")
        check(running and len(inodes) >= 3, f"--watch rewrote the file ({len(inodes)} versions seen)")
        w = run([stat_tool, "--dir", d, "--prometheus", "--textfile", out, "--watch", "0.05", "--count", "3"])
        check(w.returncode == 0 and w.stdout == "", f"--watch --count 3 ends by itself, rc 0 ({w.returncode})")
        finish(p)
        r = run([stat_tool, "--dir", d, "--prometheus", "--textfile", os.path.join(out, "missing")])
        check(r.returncode == 1 and "textfile" in r.stderr, f"an unwritable directory: rc {r.returncode}, a message")


# ---- pid namespaces --------------------------------------------------------------


def case_words():
    """One set of words for a process's state (docs/STATS.md "State
    words"): the stats document, pagefast-stat's table and JSON, Prometheus
    and the info banner say active, off or pass-through alike; pool:off
    says at exit and in pagefast-stat what happened to its calls; --pid
    with no such process exits 3."""
    stat_tool = tool("tools", "pagefast-stat")
    cases = [({}, "active", ""), ({"PAGEFAST_CONF": "pool:off"}, "off", "pool:off"),
             ({"PAGEFAST_CONF": "chunksize:256M"}, "pass-through", "did you mean chunk_size?")]
    for extra, word, why in cases:
        with tempfile.TemporaryDirectory() as d:
            stats = os.path.join(d, "stats.json")
            live = os.path.join(d, "live")
            os.mkdir(live)
            p = start_hold(live, dict(extra, PAGEFAST_STATS=stats, PAGEFAST_LOG="info"))
            if word != "pass-through":
                check(wait_published(live, 1), f"{word}: published")
            procs = json.loads(run([stat_tool, "--dir", live, "--json"]).stdout)["processes"]
            mine = [x for x in procs if x["pid"] == p.pid]
            check(len(mine) == 1 and mine[0]["mode"] == word and why in mine[0]["reason"],
                  f"{word}: pagefast-stat --json says {mine[:1]}")
            table = run([stat_tool, "--dir", live], env=clean_env({"COLUMNS": "400"})).stdout
            rows = [l for l in table.splitlines() if l.split()[:1] == [str(p.pid)]]
            check(len(rows) == 1 and rows[0].split()[2] == word, f"{word}: the table's MODE ({table!r})")
            prom = run([stat_tool, "--dir", live, "--prometheus"]).stdout
            check(f'mode="{word}"' in prom, f"{word}: Prometheus's mode label")
            if word == "off":
                check("pool:off: 3 allocation calls, each forwarded to the driver" in table,
                      f"pool:off: the table says what happened to the calls ({table!r})")
                check("0.0%" not in table and "already held" not in table, "pool:off: no pool share is stated")
            rc, out, err = finish(p)
            check(rc == 0 and "done" in out, f"{word}: the program ran to its end")
            with open(stats) as f:
                doc = json.load(f)
            check(doc["schema"] == 2 and doc["pagefast"]["mode"] == word,
                  f"{word}: the stats document says {doc['pagefast']['mode']!r}")
            banner = [l for l in err.splitlines() if "(pid " in l and "version" in l]
            if word != "pass-through":
                check(len(banner) == 1 and f"info: {word} (pid " in banner[0], f"{word}: the banner ({banner})")
            if word == "off":
                ends = [l for l in err.splitlines() if "at exit:" in l]
                check(len(ends) == 1 and "3 allocation calls, each forwarded to the driver" in ends[0] and
                      "already held" not in ends[0], f"pool:off: the exit line says what happened ({ends})")
    with tempfile.TemporaryDirectory() as d:
        r = run([stat_tool, "--dir", d, "--pid", "999999"])
        check(r.returncode == 3 and "no process with pagefast with that pid" in r.stdout,
              f"--pid with no such process: exit 3 (rc {r.returncode})")
        r = run([stat_tool, "--dir", d, "--pid", "999999", "--json"])
        check(r.returncode == 3 and json.loads(r.stdout)["processes"] == [], "--json too")
        p = start_hold(d)
        check(wait_published(d, 1), "published")
        r = run([stat_tool, "--dir", d, "--pid", str(p.pid)])
        check(r.returncode == 0, f"--pid of a listed process: exit 0 (rc {r.returncode})")
        finish(p)


def case_pidns():
    """Two processes that are pid 1 of their own pid namespaces (as in two
    containers) share one live directory: two segments, both listed and
    marked, neither removed, even once their processes are killed."""
    unshare = shutil.which("unshare")
    if os.getuid() != 0 or not unshare or run([unshare, "--pid", "--fork", "--mount-proc", "true"]).returncode != 0:
        print("skipped: needs root and unshare --pid (tests/live/test_segment.cpp covers the naming)")
        return
    stat_tool = tool("tools", "pagefast-stat")
    with tempfile.TemporaryDirectory() as d:
        wrap = [unshare, "--pid", "--fork", "--mount-proc", "--kill-child"]
        a, b = start_hold(d, argv=wrap), start_hold(d, argv=wrap)
        check(wait_published(d, count=2, extra_args=["--all"]), "both processes published their figures")
        names = sorted(os.listdir(d))
        check(len(names) == 2, f"two segments ({names})")
        check(all(n.split(".")[3] == "1" for n in names), "each is pid 1 of its namespace")
        check(len({n.split(".")[2] for n in names}) == 2, "in two pid namespaces")
        doc = json.loads(run([stat_tool, "--dir", d, "--json", "--all"]).stdout)
        procs = doc["processes"]
        check(len(procs) == 2 and all(x["pid"] == 1 and x["foreign"] for x in procs),
              f"both listed as pid 1 of another namespace ({[(x['pid'], x['foreign']) for x in procs]})")
        table = run([stat_tool, "--dir", d]).stdout
        check(len(re.findall(r"^ +1\* ", table, re.M)) == 2, "the table marks them")
        prom = strict_parse(run([stat_tool, "--dir", d, "--prometheus"]).stdout)
        check(len(prom["pagefast_in_use_bytes"][2]) == 2, "two series, told apart by pidns")
        for p in (a, b):  # SIGKILL the unshare: --kill-child kills the program, which leaves its segment
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=60)
        time.sleep(0.2)
        run([stat_tool, "--dir", d, "--all"])
        check(sorted(os.listdir(d)) == names, "segments of another pid namespace are never removed")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
