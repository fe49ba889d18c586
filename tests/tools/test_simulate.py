#!/usr/bin/env python3
"""tests/tools/test_simulate.py: pagefast-simulate (tools/replay/simulate.cpp)
on synthetic traces: a two-thread training-shaped trace, where the adaptive
allowance (slack, the default) must hold less than slack:off and not much
more than the program's peak; the JSON output; the command-line contract
(rc 2 and one message for a bad option, a bad key, a truncated trace).
Usage: test_simulate.py PAGEFAST-SIMULATE"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

SIM = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_trace(path, records):
    header = b"PFTRACE1" + struct.pack("<IIIIQQII", 1, 64, 32, 1, 0, 0, 65536, 0) + b"\0" * 16
    with open(path, "wb") as f:
        f.write(header)
        for r in records:
            f.write(struct.pack("<QQQIHBB", *r))


def training_trace():
    """30 steps: thread 0 allocates 40 activations, thread 1 frees each after
    allocating a gradient, then frees the gradients; 20 us per call."""
    recs, t, addr = [], 0, 0x7f0000000000
    for _ in range(30):
        acts = []
        for l in range(40):
            t += 20000
            addr += 64 << 20
            recs.append((t, addr, (48 << 20) + (l % 3 << 20), 0, 0, 1, 0))
            acts.append(addr)
        grads = []
        for a in reversed(acts):
            t += 20000
            addr += 64 << 20
            recs.append((t, addr, 20 << 20, 1, 0, 1, 0))
            grads.append(addr)
            t += 20000
            recs.append((t, a, 0, 1, 0, 2, 255))
        for g in grads:
            t += 20000
            recs.append((t, g, 0, 1, 0, 2, 255))
    return recs


def sim(*args):
    return subprocess.run([SIM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


with tempfile.TemporaryDirectory() as d:
    trace = os.path.join(d, "train.pftrace")
    write_trace(trace, training_trace())
    got = {}
    for conf in ["slack:off", "slack:2ms"]:
        r = sim(trace, "--conf", conf + ",release_delay:off,idle_share:0", "--json")
        check(r.returncode == 0, f"{conf}: rc {r.returncode} {r.stderr}")
        if r.returncode == 0:
            got[conf] = json.loads(r.stdout)
    if len(got) == 2:
        off, ada = got["slack:off"], got["slack:2ms"]
        print(f"slack:off held {off['held_vs_live']:.3f}x, {off['synchronizations']} syncs; "
              f"slack:2ms held {ada['held_vs_live']:.3f}x, {ada['synchronizations']} syncs")
        check(off["allocs"] == 2400 and off["frees"] == 2400 and off["threads"] == 2, f"counts {off}")
        check(ada["peak_live_bytes"] == off["peak_live_bytes"], "same program peak")
        check(off["held_vs_live"] > 1.5, "the fixed allowance holds > 1.5x (as on the H200)")
        check(ada["held_vs_live"] <= 1.35, "the adaptive allowance holds <= 1.35x")
        check(ada["synchronizations"] >= off["synchronizations"], "fewer bytes waiting costs syncs, not fewer")
    # The table form names the figures.
    r = sim(trace)
    check(r.returncode == 0 and "pool peak held" in r.stdout and "synchronizations" in r.stdout, "table output")
    # --growths: a line per rise of held memory (the first growth, from
    # nothing, has none; two growths in one call share one), on stderr
    # with --json.
    r = sim(trace, "--conf", "slack:off,release_delay:off,idle_share:0", "--growths")
    lines = [l for l in r.stdout.splitlines() if l.startswith("growth at ")]
    m = re.search(r"growths (\d+)", r.stdout)
    check(r.returncode == 0 and m and 1 <= len(lines) <= int(m.group(1)) - 1 and
          all(re.search(r"held \d+ MiB \(\+\d+\), program \d+ MiB, in use \d+, waiting \d+, cached \d+, free \d+ in \d+ runs; "
                        r"request \d+ MiB$", l) for l in lines),
          f"--growths: a line per rise of held memory ({len(lines)} lines, {m and m.group(0)})")
    # --layout: after each growth line, the runs block by block; the
    # lengths of a run's blocks add up to what the arena maps.
    r = sim(trace, "--conf", "slack:off,release_delay:off,idle_share:0", "--layout")
    out = r.stdout.splitlines()
    pairs = [(a, b) for a, b in zip(out, out[1:]) if a.startswith("growth at ")]
    def layout_granules(l):
        return sum(int(x[1:]) for x in re.findall(r"[FUQCLS]\d+", l))
    check(r.returncode == 0 and pairs and all(b.startswith("  layout [") for _, b in pairs) and
          all(layout_granules(b) * 2 == int(re.search(r"held (\d+) MiB", a).group(1)) for a, b in pairs),
          f"--layout: a layout line after each growth line, its blocks adding up to what is held ({len(pairs)})")
    r = sim(trace, "--conf", "slack:off,release_delay:off,idle_share:0", "--growths", "--json")
    check(r.returncode == 0 and json.loads(r.stdout)["growths"] >= 1 and "growth at " in r.stderr,
          "--growths with --json: the object on stdout, the lines on stderr")
    # A timeline CSV, one row per change of held memory.
    tl = os.path.join(d, "t.csv")
    r = sim(trace, "--timeline", tl)
    check(r.returncode == 0 and open(tl).readline().strip() == "t_s,live_bytes,held_bytes", "timeline header")
    # The contract: rc 2 and a message.
    for args, what in [([trace, "--bogus"], "unknown option"), ([trace, "--conf", "slack:soon"], "slack"),
                       ([trace, "--device", "1K"], "--device"), ([], "usage")]:
        r = sim(*args)
        check(r.returncode == 2 and what in r.stderr, f"{args}: rc {r.returncode}, stderr {r.stderr!r}")
    cut = os.path.join(d, "cut.pftrace")
    with open(trace, "rb") as f, open(cut, "wb") as g:
        g.write(f.read()[:64 + 32 * 10 + 7])
    r = sim(cut)
    check(r.returncode == 2 and "byte offset" in r.stderr, f"truncated trace: rc {r.returncode} {r.stderr!r}")
    r = sim("--version")
    check(r.returncode == 0 and r.stdout.startswith("pagefast-simulate "), "--version")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
