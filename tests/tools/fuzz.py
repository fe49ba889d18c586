#!/usr/bin/env python3
"""tests/tools/fuzz.py: mutated inputs for the tools that read what other
processes wrote, with fixed seeds (a few seconds):

  segments: live-stats segments (a real one, then bytes flipped, text
      fields filled with broken UTF-8, quotes, control characters and cut
      JSON, counts and header fields changed, files cut or grown; FIFOs,
      links and directories beside them). pagefast-stat in every output
      mode must not crash or hang, --json must parse with Python's json and
      --prometheus with the strict format check, and everything must be
      valid UTF-8.
  traces: PAGEFAST_TRACE files (a valid one, then mutated).
      pagefast-replay-engine --check/--dump and a replay on the fake driver
      must not crash or hang; a bad file is exit status 2 with a message.

usage: fuzz.py CASE --build DIR
"""
import json
import os
import random
import struct
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
TIMEOUT_S = 60  # far above a normal run (milliseconds): a run this long hangs (a hang guard)

# interpose/live/segment.h: the header's 64-bit words, then the text fields.
HEADER_WORDS = ["magic", "version", "bytes", "pid", "uid", "start_ticks", "created_unix_ns", "seq",
                "updated_unix_ns", "publishes", "alloc_calls", "free_calls", "device_count", "pidns", "local_rank"]
TEXT_FIELDS = [("command", 128), ("config", 320), ("numa", 512), ("host", 64)]


def tool(*parts):
    return os.path.join(ARGS.build, *parts)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env.update(extra or {})
    return env


def run_checked(argv, what, env=None, okay=(0,)):
    """Runs argv; checks no hang, no signal, an expected status, and UTF-8
    output. Returns (rc, stdout, stderr) or None after a failure."""
    try:
        r = subprocess.run(argv, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: hung (over {TIMEOUT_S} s)")
        return None
    if r.returncode < 0 or r.returncode not in okay:
        check(False, f"{what}: exit status {r.returncode} {r.stderr[-300:]!r}")
        return None
    try:
        return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8", "replace")
    except UnicodeDecodeError as e:
        check(False, f"{what}: output is not UTF-8 ({e})")
        return None


# ---- segments ----------------------------------------------------------------------


def real_segment():
    """The bytes of a segment published by a real process on the fake driver."""
    with tempfile.TemporaryDirectory() as d:
        env = clean_env({"LD_LIBRARY_PATH": tool("tests", "fakecuda"), "FAKECUDA_TOTAL_MEM": "8G",
                         "LD_PRELOAD": tool("interpose", "libpagefast.so"), "PAGEFAST_LIVE_DIR": d,
                         "LOCAL_RANK": "1"})
        p = subprocess.Popen([tool("tests", "live", "hold")], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        check(p.stdout.readline().strip() == "ready", "the holding program is ready")
        # Published figures (every 0.5 s, on the library's own thread): wait
        # until they show the three allocations; a minute at most (a hang guard).
        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            r = subprocess.run([tool("tools", "pagefast-stat"), "--dir", d, "--json"], env=clean_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
            try:
                procs = json.loads(r.stdout)["processes"]
            except ValueError:
                procs = []
            if any(x["pid"] == p.pid and x["calls"].get("cuMemAlloc_v2") == 3 for x in procs):
                break
            time.sleep(0.05)
        names = os.listdir(d)
        data = open(os.path.join(d, names[0]), "rb").read() if len(names) == 1 else b""
        p.communicate("go\n", timeout=60)
    check(len(data) > 8 * len(HEADER_WORDS) + sum(n for _, n in TEXT_FIELDS), f"a segment of {len(data)} bytes")
    return data


def text_offsets():
    offsets, at = {}, 8 * len(HEADER_WORDS)
    for name, n in TEXT_FIELDS:
        offsets[name] = (at, n)
        at += n
    return offsets, at  # at: where devices[] starts


NASTY = [b'"', b"\\", b"\\u00", b"\\u", b"\x00", b"\x01\x1f\x7f", b"\n\r\t", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98",
         b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", "é€😀".encode(), b"{", b"}", b"[", b"]",
         b'{"a": ', b'"x":', b",", b"null", b"1e999", b"-", b"\xe2\x80\xa8", b"#", b"} ,{"]


def nasty_text(rng, room):
    out = b""
    while len(out) < room and rng.random() < 0.95:
        out += rng.choice(NASTY) if rng.random() < 0.6 else bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))
    if rng.random() < 0.3:
        out = out.ljust(room, b"x")  # no terminating NUL at all
    return out[:room]


def nasty_numa(rng, room):
    kind = rng.randrange(5)
    if kind == 0:
        return ("[" * rng.randrange(1, 300)).encode()[:room]  # deep nesting
    if kind == 1:  # valid JSON with text in it
        return json.dumps({"mode": "auto", "reason": "é\"\\\x01" * rng.randrange(1, 20)}).encode()[:room]
    if kind == 2:  # a valid document cut anywhere
        doc = json.dumps({"mode": "auto", "cpus": "0-63", "x": [1, 2.5e3, None, True]}).encode()
        return doc[:rng.randrange(len(doc))]
    if kind == 3:
        return b'{"a": 1} {"b": 2}'
    return nasty_text(rng, room)


def mutate_segment(rng, seg, offsets, devices_at):
    b = bytearray(seg)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(8)
        if kind == 0 and b:  # flip bytes anywhere
            for _ in range(rng.randrange(1, 40)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif len(b) < len(seg):  # cut already: what follows writes inside a whole segment
            continue
        elif kind in (1, 2, 3):  # a text field
            name = rng.choice(list(offsets))
            at, room = offsets[name]
            text = nasty_numa(rng, room) if name == "numa" and kind == 3 else nasty_text(rng, room)
            b[at:at + room] = text.ljust(room, b"\0")
        elif kind == 4:  # a header word
            word = rng.choice(HEADER_WORDS[3:])  # magic, version, bytes: kind 6
            value = rng.choice([0, 1, 16, 17, 2**63, 2**64 - 1, rng.randrange(2**64)])
            struct.pack_into("<Q", b, 8 * HEADER_WORDS.index(word), value)
        elif kind == 5:  # devices: ordinals and figures
            for _ in range(rng.randrange(1, 20)):
                struct.pack_into("<Q", b, devices_at + 8 * rng.randrange((len(b) - devices_at) // 8),
                                 rng.choice([0, 2**64 - 1, 2**63, 2**31, rng.randrange(2**64)]))
        elif kind == 6:  # the header's checks
            struct.pack_into("<Q", b, 8 * rng.randrange(3), rng.choice([0, 2, rng.randrange(2**64)]))
        if kind == 7:  # cut or grown
            b = b[:rng.randrange(len(b) + 1)] if rng.random() < 0.7 else b + bytes(rng.randrange(1, 5000))
    return bytes(b)


def set_word(b, name, value):
    if len(b) >= 8 * (HEADER_WORDS.index(name) + 1):
        struct.pack_into("<Q", b, 8 * HEADER_WORDS.index(name), value)


def check_outputs(d, what):
    """Returns how many processes --json listed."""
    stat_tool = tool("tools", "pagefast-stat")
    listed = 0
    r = run_checked([stat_tool, "--dir", d, "--json", "--all"], what + " --json")
    if r:
        try:
            doc = json.loads(r[1])
            check(isinstance(doc.get("processes"), list), what + ": --json has its processes")
            listed = len(doc["processes"])
        except ValueError as e:
            check(False, f"{what}: --json does not parse: {e}: {r[1][:2000]!r}")
    r = run_checked([stat_tool, "--dir", d, "--prometheus"], what + " --prometheus")
    if r:
        try:
            strict_parse(r[1])
        except ValueError as e:
            check(False, f"{what}: --prometheus does not parse: {e}")
    run_checked([stat_tool, "--dir", d, "--all"], what + " table")
    return listed


def case_segments():
    seg = real_segment()
    if not seg:
        return
    offsets, devices_at = text_offsets()
    uid, own_ns = os.getuid(), os.stat("/proc/self/ns/pid").st_ino
    with open("/proc/self/stat") as f:
        own_start = int(f.read().rsplit(")", 1)[1].split()[19])
    failures_before = len(casekit.FAILURES)
    listed = 0
    for seed in range(40):
        rng = random.Random(seed)
        with tempfile.TemporaryDirectory() as d:
            for i in range(10):
                b = bytearray(mutate_segment(rng, seg, offsets, devices_at))
                if rng.random() < 0.8:  # name and header agree, so it is listed as a process
                    ns, pid, start = own_ns + 1 + seed, 1000 + i, 5
                    for name, value in (("pidns", ns), ("pid", pid), ("start_ticks", start), ("uid", uid)):
                        set_word(b, name, value)
                else:
                    ns, pid, start = own_ns + 1, 2000 + i, 7
                name = f"pagefast.{uid}.{ns}.{pid}.{start}"
                with open(os.path.join(d, name), "wb") as f:
                    f.write(b)
                os.chmod(os.path.join(d, name), 0o600)
            # One in our own namespace under our own (live) name.
            b = bytearray(mutate_segment(rng, seg, offsets, devices_at))
            for name, value in (("pidns", own_ns), ("pid", os.getpid()), ("start_ticks", own_start)):
                set_word(b, name, value)
            with open(os.path.join(d, f"pagefast.{uid}.{own_ns}.{os.getpid()}.{own_start}"), "wb") as f:
                f.write(b)
            # Things named like segments that are not segments.
            os.mkfifo(os.path.join(d, f"pagefast.{uid}.{own_ns}.999999991.1"))
            os.mkfifo(os.path.join(d, f"pagefast.{uid}.999999990"))
            os.symlink("/etc/passwd", os.path.join(d, f"pagefast.{uid}.{own_ns}.999999992.1"))
            os.mkdir(os.path.join(d, f"pagefast.{uid}.{own_ns}.999999993.1"))
            listed += check_outputs(d, f"segments seed {seed}")
            if seed % 10 == 0:
                run_checked([tool("tools", "pagefast-stat"), "--dir", d, "--watch", "0.05", "--count", "3"],
                            f"segments seed {seed} --watch")
    check(len(casekit.FAILURES) == failures_before, "440 mutated segments: no crash, no hang, JSON and text valid")
    # Most mutations leave a readable segment: the printing paths were fed.
    check(listed >= 200, f"{listed} mutated segments were listed as processes")


# ---- traces --------------------------------------------------------------------------

MAGIC = b"PFTRACE1"


def valid_trace(rng, records=64):
    header = struct.pack("<8sIIIIQQII16s", MAGIC, 1, 64, 32, 4242, 1, 2, 1024, 0, bytes(16))
    body, live, t = b"", [], 0
    for _ in range(records):
        t += rng.randrange(1, 1000)
        if live and rng.random() < 0.45:
            addr = live.pop(rng.randrange(len(live)))
            body += struct.pack("<QQQIHBB", t, addr, 0, rng.randrange(3), 0, 2, 0)
        else:
            addr = 0x7f0000000000 + len(body) * 4096
            live.append(addr)
            body += struct.pack("<QQQIHBB", t, addr, rng.choice([1, 512, 1 << 20, 3 << 20]), rng.randrange(3), 0, 1, 0)
    return header + body


def mutate_trace(rng, data):
    b = bytearray(data)
    kind = rng.randrange(7)
    if kind == 0:
        for _ in range(rng.randrange(1, 30)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1:
        b = b[:rng.randrange(len(b) + 1)]
    elif kind == 2:
        b += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100)))
    elif kind == 3:  # a header field
        at = rng.choice([8, 12, 16, 20, 24, 32, 40, 44])
        struct.pack_into("<I", b, at, rng.choice([0, 1, 2, 31, 32, 33, 64, 2**32 - 1]))
    elif kind == 4:  # record fields that stay well-formed: sizes, addresses, results, threads, devices
        for _ in range(rng.randrange(1, 10)):
            r = 64 + 32 * rng.randrange((len(b) - 64) // 32)
            field = rng.choice([(8, "<Q"), (16, "<Q"), (24, "<I"), (28, "<H"), (31, "<B")])
            struct.pack_into(field[1], b, r + field[0],
                             rng.choice([0, 1, 2**64 - 1, 2**63, 2**32 - 1, 255, 65535]) % (256 ** struct.calcsize(field[1])))
    elif kind == 5:  # ops, including lost markers and unknown ones
        for _ in range(rng.randrange(1, 5)):
            r = 64 + 32 * rng.randrange((len(b) - 64) // 32)
            b[r + 30] = rng.choice([0, 1, 2, 3, 4, 255])
    else:  # times out of order
        for _ in range(rng.randrange(1, 10)):
            r = 64 + 32 * rng.randrange((len(b) - 64) // 32)
            struct.pack_into("<Q", b, r, rng.randrange(2**64))
    return bytes(b)


def case_traces():
    engine = tool("tools", "replay", "pagefast-replay-engine")
    driver_env = clean_env({"LD_LIBRARY_PATH": tool("tests", "fakecuda"), "FAKECUDA_TOTAL_MEM": "8G"})
    failures_before = len(casekit.FAILURES)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.bin")
        rng = random.Random(1)
        good = valid_trace(rng)
        with open(path, "wb") as f:
            f.write(good)
        r = run_checked([engine, "--check", path], "the valid trace")
        check(r is not None and r[0] == 0, "the unmutated trace checks out")
        for seed in range(150):
            rng = random.Random(1000 + seed)
            with open(path, "wb") as f:
                f.write(mutate_trace(rng, valid_trace(rng)))
            for mode in ("--check", "--dump"):
                r = run_checked([engine, mode, path], f"trace seed {seed} {mode}", okay=(0, 2))
                if r and r[0] == 2:
                    check(r[2].startswith("pagefast-replay-engine: ") and "trace.bin" in r[2],
                          f"trace seed {seed} {mode}: a bad trace is named in a message ({r[2][:100]!r})")
            if seed % 3 == 0:
                r = run_checked([engine, "--allocator", "cudaMalloc", path], f"trace seed {seed} replay",
                                env=driver_env, okay=(0, 1, 2, 3))
                if r and r[0] != 0:
                    check(r[2].strip() != "", f"trace seed {seed} replay: exit {r[0]} says why")
        # Not a file of records at all.
        os.unlink(path)
        os.mkfifo(path)
        r = run_checked([engine, "--check", path], "a FIFO as the trace", okay=(2,))
        for junk in (b"", b"PFTR", MAGIC, b"\0" * 64):
            with open(os.path.join(d, "junk"), "wb") as f:
                f.write(junk)
            run_checked([engine, "--check", os.path.join(d, "junk")], f"trace {junk[:8]!r}", okay=(2,))
    check(len(casekit.FAILURES) == failures_before, "mutated traces: no crash, no hang, bad ones refused with status 2")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
