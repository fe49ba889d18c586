#!/usr/bin/env python3
"""tests/live/cases.py: live stats end to end on the fake driver. A program
holds pool memory under LD_PRELOAD=libpagefast.so; pagefast-stat lists it
(table and --json) with its figures; the segment is private (0600) and is
gone once the program exits; stats:off publishes nothing; a killed
process's segment is ignored and removed.

usage: cases.py CASE --build DIR
"""
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402

ARGS = None  # set by casekit.main


def env_for(build, live_dir, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "tests", "fakecuda")
    env["FAKECUDA_TOTAL_MEM"] = "8G"
    env["LD_PRELOAD"] = os.path.join(build, "interpose", "libpagefast.so")
    env["PAGEFAST_LIVE_DIR"] = live_dir
    env.update(extra or {})
    return env


def start_hold(build, live_dir, extra=None):
    p = subprocess.Popen([os.path.join(build, "tests", "live", "hold")], env=env_for(build, live_dir, extra),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    check(line == "ready", f"the holding program is ready ({line!r})")
    return p


def stat_tool(build, live_dir, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST")}
    r = subprocess.run([os.path.join(build, "tools", "pagefast-stat"), "--dir", live_dir, *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    return r


def own_pidns():
    return os.stat("/proc/self/ns/pid").st_ino


def start_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22


def segment_path(live_dir, pid):
    """pagefast.<uid>.<pidns>.<pid>.<start ticks> (docs/STATS.md "Live stats")."""
    return os.path.join(live_dir, f"pagefast.{os.getuid()}.{own_pidns()}.{pid}.{start_ticks(pid)}")


def case_listed():
    build = ARGS.build
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(build, d)
        path = segment_path(d, p.pid)
        check(os.path.exists(path), "the process has a segment")
        st = os.lstat(path)
        check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, f"segment mode {oct(st.st_mode)}")
        # The library publishes every 0.5 s on a thread of its own: wait
        # for figures that show the three allocations (a minute at most: a
        # hang guard), not for a time.
        give_up = time.monotonic() + 60
        while True:
            r = stat_tool(build, d, "--json")
            try:
                listed = [x for x in json.loads(r.stdout)["processes"] if x["pid"] == p.pid]
            except ValueError:
                listed = []
            if (listed and listed[0]["calls"].get("cuMemAlloc_v2") == 3) or time.monotonic() > give_up:
                break
            time.sleep(0.05)
        check(r.returncode == 0, f"pagefast-stat --json rc {r.returncode} {r.stderr}")
        doc = json.loads(r.stdout)
        procs = [x for x in doc["processes"] if x["pid"] == p.pid]
        check(len(procs) == 1, "the process is listed once")
        if procs:
            x = procs[0]
            check(x["calls"]["cuMemAlloc_v2"] == 3, f"3 allocations seen ({x['calls']})")
            dev = x["devices"].get("0")
            check(dev is not None, "device 0 has figures")
            if dev:
                check(dev["in_use_bytes"] >= 64 * 2**20 + 2**20, f"in use {dev['in_use_bytes']}")
                check(dev["mapped_bytes"] >= dev["in_use_bytes"], "mapped >= in use")
                check(dev["reserved_bytes"] >= dev["mapped_bytes"], "reserved >= mapped")
                check(dev["growths"] >= 1, "a growth counted")
            check("hold" in x["command"], f"command {x['command']!r}")
            check("pool on" in x["config"], f"config {x['config']!r}")
            check(x["numa"] is not None, "NUMA report present")
        t = stat_tool(build, d)
        check(t.returncode == 0 and str(p.pid) in t.stdout and "RESERVED" in t.stdout, "table lists the process")
        w = stat_tool(build, d, "--watch", "0.2", "--count", "3")
        check(w.returncode == 0 and w.stdout.count("pagefast-stat ") == 3, "--watch prints 3 rounds")
        f = stat_tool(build, d, "--pid", "1", "--json")
        check(json.loads(f.stdout)["processes"] == [], "--pid filters")
        out, err = p.communicate("go\n", timeout=60)
        check(p.returncode == 0 and "done" in out, f"program finished normally rc {p.returncode} {err[-500:]}")
        check(not os.path.exists(path), "segment removed at exit")
        r = stat_tool(build, d, "--json")
        check(json.loads(r.stdout)["processes"] == [], "nothing listed after exit")


def case_asleep():
    """pagefast-ctl sleep and wake of a holding program: pagefast-stat's
    JSON, table and Prometheus say asleep, then awake; reserved bytes stay
    and growths never go back at any sample. Each state is waited for
    (the library publishes every 0.5 s; a minute is a hang guard), never
    assumed after a time."""
    build = ARGS.build
    ctl = os.path.join(build, "tools", "pagefast-ctl")
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(build, d)
        seen = []

        def device0():
            r = stat_tool(build, d, "--json")
            procs = [x for x in json.loads(r.stdout)["processes"] if x["pid"] == p.pid]
            dev = procs[0]["devices"].get("0") if procs else None
            if dev and (seen or dev["growths"] > 0):  # from the first figures after the pool grew
                seen.append(dev)
            return dev

        def wait_for(asleep):
            give_up = time.monotonic() + 60
            while time.monotonic() < give_up:
                dev = device0()
                if dev and dev["asleep"] == asleep and dev["growths"] > 0:
                    return dev
                time.sleep(0.05)
            return None

        awake = wait_for(False)
        check(awake is not None, "published awake, with its growths")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST")}
        r = subprocess.run([ctl, "sleep", "--keep", str(p.pid)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        check(r.returncode == 0, f"pagefast-ctl sleep: {r.returncode} {r.stderr.strip()!r}")
        asleep = wait_for(True)
        check(asleep is not None, "pagefast-stat --json says asleep")
        r = stat_tool(build, d)
        rows = [l for l in r.stdout.splitlines() if l.split()[:1] == [str(p.pid)]]
        check(rows and rows[0].split()[4] == "asleep", f"the table's SLEEP column ({rows})")
        r = stat_tool(build, d, "--prometheus")
        check(f'pagefast_asleep{{pid="{p.pid}",' in r.stdout and any(
            l.startswith(f'pagefast_asleep{{pid="{p.pid}",') and l.endswith(" 1") for l in r.stdout.splitlines()),
            "pagefast_asleep is 1")
        r = subprocess.run([ctl, "wake", str(p.pid)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        check(r.returncode == 0, f"pagefast-ctl wake: {r.returncode} {r.stderr.strip()!r}")
        check(wait_for(False) is not None, "awake again")
        base = seen[0]
        check(all(x["reserved_bytes"] == base["reserved_bytes"] for x in seen),
              f"reserved bytes stayed ({sorted(set(x['reserved_bytes'] for x in seen))})")
        growths = [x["growths"] for x in seen]
        check(growths == sorted(growths), f"growths never went back ({growths})")
        p.communicate("go\n", timeout=60)


def case_off():
    build = ARGS.build
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(build, d, {"PAGEFAST_CONF": "stats:off"})
        check(os.listdir(d) == [], f"stats:off makes no segment ({os.listdir(d)})")
        p.communicate("go\n", timeout=60)
        check(p.returncode == 0, "program finished")


def case_killed():
    build = ARGS.build
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(build, d)
        path = segment_path(d, p.pid)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        check(os.path.exists(path), "a killed process leaves its segment")
        r = stat_tool(build, d, "--json", "--all")
        doc = json.loads(r.stdout)
        check(doc["processes"] == [], "a dead process is not listed")
        other = doc.get("other_segments", [])
        check(any(o["stale"] and o["removed"] for o in other), f"stale segment reported and removed ({other})")
        check(not os.path.exists(path), "stale segment removed")


def case_unwritable():
    build = ARGS.build
    # No segment directory: the program runs on, one line says why.
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "missing")
        p = start_hold(build, missing, {"PAGEFAST_LOG": "info"})
        out, err = p.communicate("go\n", timeout=60)
        check(p.returncode == 0 and "done" in out, "program unaffected")
        lines = [l for l in err.splitlines() if "live stats off" in l]
        check(len(lines) == 1, f"one line says live stats are off ({lines})")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
