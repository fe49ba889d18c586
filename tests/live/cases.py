#!/usr/bin/env python3
"""tests/live/cases.py: live stats end to end on the fake driver. A program
holds pool memory under LD_PRELOAD=libpagefast.so; pagefast-stat lists it
(table and --json) with its figures; the segment is private (0600) and is
gone once the program exits; stats:off publishes nothing; a killed
process's segment is ignored and removed; each tag's figures follow its
sleep and wake in the stats document, pagefast-stat and Prometheus.

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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402
from promcheck import check_tags, strict_parse  # noqa: E402  (tests/tools/promcheck.py)

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


MiB = 2**20
KV_BYTES, SCRATCH_BYTES = 24 * MiB, 6 * MiB  # tests/live/tagged.c


def start_tagged(build, env):
    p = subprocess.Popen([os.path.join(build, "tests", "live", "tagged")], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    check(line == "ready", f"the tagged program is ready ({line!r})")
    if line == "ready":
        return p
    p.communicate(timeout=60)
    return None


def ask(p, line):
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def by_tag(tags):
    return {(t["name"], t["policy"]): t for t in tags}


def document_tags(p):
    """The "tags" of the process's own stats document (pagefast_stats_json)."""
    return by_tag(json.loads(ask(p, "json"))["tags"])


def live_tags(build, d, pid, until):
    """pagefast-stat --json's tags of `pid` once until(tags) holds (the
    library publishes every 0.5 s; a minute is a hang guard)."""
    give_up = time.monotonic() + 60
    while True:
        r = stat_tool(build, d, "--json")
        procs = [x for x in json.loads(r.stdout)["processes"] if x["pid"] == pid] if r.returncode == 0 else []
        tags = by_tag(procs[0].get("tags", [])) if procs else {}
        if until(tags) or time.monotonic() > give_up:
            return tags
        time.sleep(0.05)


def check_awake_figures(tags, where, sleeps, wakes):
    kv, scratch = tags.get(("kv", "keep")), tags.get(("scratch", "discard"))
    check(kv is not None and scratch is not None, f"{where}: tags kv (keep) and scratch (discard) ({list(tags)})")
    if not kv or not scratch:
        return
    check(kv["state"] == "awake" and scratch["state"] == "awake", f"{where}: both awake")
    check(KV_BYTES <= kv["in_use_bytes"] < KV_BYTES + SCRATCH_BYTES, f"{where}: kv in use {kv['in_use_bytes']}")
    check(SCRATCH_BYTES <= scratch["in_use_bytes"] < KV_BYTES, f"{where}: scratch in use {scratch['in_use_bytes']}")
    check(kv["resident_bytes"] >= kv["in_use_bytes"], f"{where}: kv resident {kv['resident_bytes']}")
    check(kv["asleep_bytes"] == 0 and kv["kept_bytes"] == 0, f"{where}: nothing of kv asleep ({kv})")
    check((kv["sleeps"], kv["wakes"]) == (sleeps, wakes), f"{where}: kv slept {sleeps}, woke {wakes} ({kv})")
    check((scratch["sleeps"], scratch["wakes"]) == (0, 0), f"{where}: scratch never slept ({scratch})")


def check_asleep_figures(tags, where):
    kv, scratch = tags.get(("kv", "keep")), tags.get(("scratch", "discard"))
    check(kv is not None and scratch is not None, f"{where}: both tags listed ({list(tags)})")
    if not kv or not scratch:
        return
    check(kv["state"] == "asleep" and kv["slot"] >= 1, f"{where}: kv asleep ({kv})")
    check(kv["asleep_bytes"] >= KV_BYTES and kv["resident_bytes"] == 0, f"{where}: kv's memory asleep ({kv})")
    check(kv["kept_bytes"] == kv["asleep_bytes"], f"{where}: kv keeps all it put asleep ({kv})")
    check(kv["in_use_bytes"] >= KV_BYTES, f"{where}: kv's blocks still the program's ({kv})")
    check((kv["sleeps"], kv["wakes"]) == (1, 0), f"{where}: one sleep of kv ({kv})")
    check(scratch["state"] == "awake" and scratch["resident_bytes"] >= SCRATCH_BYTES, f"{where}: scratch awake")


def check_prometheus_tags(text, pid):
    try:
        families = strict_parse(text)
        check_tags(families)
    except ValueError as e:
        check(False, f"the exposition with tags: {e}")
        return
    def value(family, tag, policy):
        for labels, v in families.get(family, (None, None, []))[2]:
            if labels.get("pid") == str(pid) and labels.get("tag") == tag and labels.get("policy") == policy:
                return v
        return None
    check(value("pagefast_tag_asleep", "kv", "keep") == 1, "pagefast_tag_asleep{tag=kv,policy=keep} is 1")
    check(value("pagefast_tag_asleep", "scratch", "discard") == 0, "scratch's pagefast_tag_asleep is 0")
    check(value("pagefast_tag_sleeps_total", "kv", "keep") == 1, "pagefast_tag_sleeps_total of kv is 1")
    check(value("pagefast_tag_wakes_total", "kv", "keep") == 0, "pagefast_tag_wakes_total of kv is 0")
    check((value("pagefast_tag_asleep_bytes", "kv", "keep") or 0) >= KV_BYTES, "kv's asleep bytes")
    check(value("pagefast_tag_kept_bytes", "kv", "keep") == value("pagefast_tag_asleep_bytes", "kv", "keep"),
          "kv's kept bytes are its asleep bytes")


def case_tags():
    """A program with regions of two tags sleeps one (its own
    pagefast_sleep_tag) and wakes it: the stats document, pagefast-stat's
    JSON, table and Prometheus show each tag's policy, state and figures,
    the other tag untouched, and counters that never go back."""
    build = ARGS.build
    with tempfile.TemporaryDirectory() as d:
        p = start_tagged(build, env_for(build, d))
        if not p:
            return
        check_awake_figures(document_tags(p), "document, before", 0, 0)
        check_awake_figures(live_tags(build, d, p.pid, lambda t: len(t) == 2), "live, before", 0, 0)
        check(ask(p, "sleep kv") == "answer 0", "pagefast_sleep_tag(kv) answers 0")
        check(ask(p, "asleep kv") == "asleep 1", "kv asleep")
        check_asleep_figures(document_tags(p), "document, asleep")
        asleep = live_tags(build, d, p.pid, lambda t: t.get(("kv", "keep"), {}).get("state") == "asleep")
        check_asleep_figures(asleep, "live, asleep")
        r = stat_tool(build, d)
        lines = [l.strip() for l in r.stdout.splitlines() if l.strip().startswith("tag ")]
        check(any(l.startswith("tag kv (keep): asleep") for l in lines) and
              any(l.startswith("tag scratch (discard): awake") for l in lines), f"the table's tag lines ({lines})")
        check_prometheus_tags(stat_tool(build, d, "--prometheus").stdout, p.pid)
        check(ask(p, "wake kv") == "answer 0", "pagefast_wake_tag(kv) answers 0")
        check(ask(p, "check") == "ok", "kv's blocks hold what they held")
        check_awake_figures(document_tags(p), "document, after", 1, 1)
        check_awake_figures(live_tags(build, d, p.pid, lambda t: t.get(("kv", "keep"), {}).get("wakes") == 1),
                            "live, after", 1, 1)
        check(ask(p, "sleep nosuch") == "answer -2", "an unknown tag answers -2")
        out, err = p.communicate("go\n", timeout=60)
        check(p.returncode == 0 and "done" in out, f"program finished normally rc {p.returncode} {err[-500:]}")


def case_partly():
    """One tag of two asleep: the process is "partly asleep (1 of 2
    tags)" in pagefast-stat's table, JSON and pagefast-ctl status, the
    device's SLEEP column says partly, pagefast_asleep stays 0 and
    pagefast_partly_asleep is 1; the device's in-use never reads above its
    mapped bytes, and the asleep tag keeps its in-use in its own line."""
    build = ARGS.build
    ctl = os.path.join(build, "tools", "pagefast-ctl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST")}
    with tempfile.TemporaryDirectory() as d:
        # Small chunks: the awake memory maps less than kv's 24 MiB in use.
        p = start_tagged(build, env_for(build, d, {"PAGEFAST_CONF": "chunk_size:2M"}))
        if not p:
            return
        live_tags(build, d, p.pid, lambda t: len(t) == 2)
        check(ask(p, "sleep kv") == "answer 0", "pagefast_sleep_tag(kv) answers 0")
        tags = live_tags(build, d, p.pid, lambda t: t.get(("kv", "keep"), {}).get("state") == "asleep")
        check(tags.get(("kv", "keep"), {}).get("in_use_bytes", 0) >= KV_BYTES, f"kv keeps its in-use ({tags})")
        procs = [x for x in json.loads(stat_tool(build, d, "--json").stdout)["processes"] if x["pid"] == p.pid]
        check(len(procs) == 1 and procs[0]["sleep"] == "partly asleep (1 of 2 tags)", f"JSON: {procs[:1]}")
        dev = procs[0]["devices"]["0"] if procs else {}
        check(dev.get("sleep") == "partly" and dev.get("asleep") is False, f"the device is partly asleep ({dev})")
        check(dev.get("in_use_bytes", 1) <= dev.get("mapped_bytes", 0),
              f"in use {dev.get('in_use_bytes')} is not above mapped {dev.get('mapped_bytes')}")
        doc = json.loads(ask(p, "json"))["pool"]["devices"][0]
        check(doc["in_use_bytes"] <= doc["mapped_bytes"], f"the stats document too ({doc})")
        table = stat_tool(build, d).stdout
        rows = [l for l in table.splitlines() if l.split()[:1] == [str(p.pid)]]
        check(rows and rows[0].split()[4] == "partly", f"the table's SLEEP column ({rows})")
        check("partly asleep (1 of 2 tags)" in table, f"the table says which ({table!r})")
        prom = stat_tool(build, d, "--prometheus").stdout
        strict_parse(prom)
        mine = [l for l in prom.splitlines() if f'pid="{p.pid}"' in l]
        check(any(l.startswith("pagefast_asleep{") and l.endswith(" 0") for l in mine) and
              any(l.startswith("pagefast_partly_asleep{") and l.endswith(" 1") for l in mine),
              f"pagefast_asleep 0, pagefast_partly_asleep 1 ({[l for l in mine if 'asleep{' in l]})")
        # The memory report names each pool by its tag, and the asleep one.
        report = os.path.join(d, "report.txt")
        check(ask(p, "report " + report) == "answer 0", "pagefast_report answers 0")
        with open(report) as f:
            heads = [l for l in f.read().splitlines() if l.startswith("device ")]
        check(heads == ["device 0", 'device 0, tag "kv" (keep), asleep: its blocks in use are not mapped',
                        'device 0, tag "scratch" (discard)'], f"the report's pool lines ({heads})")
        r = subprocess.run([ctl, "status", str(p.pid)], env=env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and f"{p.pid}: partly asleep (1 of 2 tags)" in r.stdout,
              f"pagefast-ctl status ({r.stdout!r} {r.stderr!r})")
        # Every tag asleep, the memory outside any region awake: still partly.
        check(ask(p, "sleep scratch") == "answer 0", "pagefast_sleep_tag(scratch) answers 0")
        r = subprocess.run([ctl, "status", str(p.pid)], env=env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and f"{p.pid}: partly asleep (all 2 tags; the untagged memory awake)" in r.stdout,
              f"pagefast-ctl status with every tag asleep ({r.stdout!r} {r.stderr!r})")
        check(ask(p, "wake scratch") == "answer 0", "scratch wakes")
        check(ask(p, "wake kv") == "answer 0", "kv wakes")
        r = subprocess.run([ctl, "status", str(p.pid)], env=env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and f"{p.pid}: awake" in r.stdout, f"then awake ({r.stdout!r})")
        p.communicate("go\n", timeout=60)


# A stand-in that holds a process's control socket name itself (its own
# pid and start time, so pagefast-ctl trusts it), reads one request, then
# exits, answers garbage, or closes the connection and waits.
STAND_IN = r"""
import os, socket, sys
st = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
name = "pagefast-ipc.%d.%d.%d.%s" % (os.geteuid(), os.stat("/proc/self/ns/pid").st_ino, os.getpid(), st[19])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + name)
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
c.recv(4096)
if sys.argv[1] == "exit":
    os._exit(0)
if sys.argv[1] == "foreign":
    c.sendall(bytes([0xab]) * 256)
else:
    c.close()
sys.stdin.readline()
"""


def case_ctl_words():
    """pagefast-ctl tells apart a process that exited before it answered
    (killed during a sleep), one that answers in another protocol (another
    version) and one that closed the connection; and names the state of a
    process without a control socket from its live segment (pool:off)."""
    build = ARGS.build
    ctl = os.path.join(build, "tools", "pagefast-ctl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    for how, said in [("exit", "exited before it answered"), ("foreign", "a different pagefast version"),
                      ("close", "closed the connection without an answer")]:
        p = subprocess.Popen([sys.executable, "-c", STAND_IN, how], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        check(p.stdout.readline().strip() == "ready", f"{how}: the stand-in listens")
        r = subprocess.run([ctl, "sleep", "--keep", str(p.pid)], env=env, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 3 and said in r.stderr, f"{how}: rc {r.returncode}, {r.stderr.strip()!r}")
        check(how == "exit" or "exited" not in r.stderr, f"{how}: not said to have exited")
        p.communicate("\n", timeout=60)
    with tempfile.TemporaryDirectory() as d:
        p = start_hold(build, d, {"PAGEFAST_CONF": "pool:off"})
        give_up = time.monotonic() + 60
        while not os.listdir(d) and time.monotonic() < give_up:
            time.sleep(0.05)
        r = subprocess.run([ctl, "status", str(p.pid)], env=dict(env, PAGEFAST_LIVE_DIR=d), capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 3 and "live segment says off (pool:off)" in r.stderr,
              f"pool:off read from the live segment ({r.stderr.strip()!r})")
        p.communicate("go\n", timeout=60)


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
