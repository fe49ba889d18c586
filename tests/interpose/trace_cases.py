#!/usr/bin/env python3
"""tests/interpose/trace_cases.py: PAGEFAST_TRACE and pagefast-replay on the
fake driver, each case a separate meson test: `trace_cases.py CASE --build DIR`.

The trace is decoded here with struct, straight from docs/TRACE.md, so the
format is checked independently of the engine's reader.
"""
import csv
import json
import os
import re
import stat
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402

ARGS = None
HEADER = struct.Struct("<8sIIIIQQII16s")
RECORD = struct.Struct("<QQQIHBB")
OPS = {1: "alloc", 2: "free", 3: "lost"}


def paths():
    b = os.path.abspath(ARGS.build)
    return {
        "lib": os.path.join(b, "interpose", "libpagefast.so"),
        "fake": os.path.join(b, "tests", "fakecuda"),
        "workload": os.path.join(b, "tests", "interpose", "trace_workload"),
        "engine": os.path.join(b, "tools", "replay", "pagefast-replay-engine"),
        "replay": os.path.join(b, "tools", "pagefast-replay"),
    }


def run(argv, preload=False, env_extra=None, timeout=240, cwd=None):
    p = paths()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = p["fake"]
    env.setdefault("FAKECUDA_TOTAL_MEM", "8G")
    if preload:
        env["LD_PRELOAD"] = p["lib"]
    if env_extra:
        env.update(env_extra)
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, cwd=cwd)


def decode(path):
    """(header dict, [record dicts]) in file order."""
    data = open(path, "rb").read()
    magic, version, header_bytes, record_bytes, pid, wall, mono, ring, flags, _ = HEADER.unpack_from(data, 0)
    header = dict(magic=magic, version=version, header_bytes=header_bytes, record_bytes=record_bytes, pid=pid,
                  wall=wall, mono=mono, ring=ring, flags=flags, size=len(data))
    records = []
    for off in range(64, len(data) - len(data) % 32, 32):
        t, addr, nbytes, thread, result, op, device = RECORD.unpack_from(data, off)
        records.append(dict(t=t, addr=addr, bytes=nbytes, thread=thread, result=result, op=OPS.get(op, op),
                            device=device))
    return header, records


def program_calls(stdout):
    return [tuple(line.split()[1:4]) for line in stdout.splitlines() if line.startswith("call ")]


def sequence(stdout):
    """--print-sequence lines: [(op, bytes, result, skipped)]."""
    out = []
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in ("alloc", "free"):
            out.append((parts[0], parts[1], parts[2], len(parts) > 3 and parts[3] == "skipped"))
    return out


def result_line(stdout):
    m = re.search(r"^RESULT (.*)$", stdout, re.M)
    return dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}


def record_seq(tmp, name="t-%p.pftrace"):
    trace_env = os.path.join(tmp, name)
    r = run([paths()["workload"], "seq"], preload=True, env_extra={"PAGEFAST_TRACE": trace_env})
    files = [f for f in os.listdir(tmp) if f.endswith(".pftrace")]
    return r, (os.path.join(tmp, files[0]) if len(files) == 1 else None)


def case_trace_roundtrip():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        r, trace = record_seq(d)
        check(r.returncode == 0 and trace, f"the workload runs traced and leaves one file (rc {r.returncode}) {r.stderr[-300:]}")
        if not trace:
            return
        calls = program_calls(r.stdout)
        check(len(calls) > 30, f"the program logged its calls ({len(calls)})")
        header, records = decode(trace)
        check(header["magic"] == b"PFTRACE1" and header["version"] == 1 and header["header_bytes"] == 64
              and header["record_bytes"] == 32, "header: magic, version, sizes")
        check(trace.endswith("t-%d.pftrace" % header["pid"]), "header pid is the pid that %p became")
        check(header["wall"] > 1_500_000_000 * 10**9 and header["ring"] == 65536, "header: wall-clock start, ring size")
        check((header["size"] - 64) % 32 == 0, "whole records")
        ordered = sorted(records, key=lambda x: x["t"])  # stable, as the engine sorts
        got = [(x["op"], str(x["bytes"]), str(x["result"])) for x in ordered]
        check(got == calls, "decoded records = the program's calls, in order (op, bytes, result)")
        if got != calls:
            print("trace:  ", got[:12], "\nprogram:", calls[:12])
        check(all(x["thread"] == 0 for x in records), "one thread, index 0")
        allocs = [x for x in ordered if x["op"] == "alloc"]
        check(allocs[0]["device"] == 255 and all(x["device"] == 0 for x in allocs[1:]),
              "device: 255 without a context, then 0")
        check(all(x["device"] == 255 for x in ordered if x["op"] == "free"), "frees record device 255")
        check(all(x["addr"] != 0 for x in allocs if x["result"] == 0) and
              all(x["addr"] == 0 for x in allocs if x["result"] != 0), "addresses of the successful allocations")
        chk = run([p["engine"], "--check", trace])
        check(chk.returncode == 0 and f"records={len(records)}" in chk.stdout and "lost_markers=0" in chk.stdout,
              f"the engine reads it ({chk.stdout.strip()})")
        for mode in ["cudaMalloc", "pagefast"]:
            second = os.path.join(d, f"replay-{mode}.trace")
            rr = run([p["engine"], "--allocator", mode, "--print-sequence", trace], preload=(mode == "pagefast"),
                     env_extra={"PAGEFAST_TRACE": second} if mode == "pagefast" else None)
            check(rr.returncode == 0, f"[{mode}] replay runs (rc {rr.returncode}) {rr.stderr[-300:]}")
            seq = sequence(rr.stdout)
            check([s[:3] for s in seq] == calls, f"[{mode}] replayed sequence (op, bytes, result) = the program's")
            if [s[:3] for s in seq] != calls:
                for a, b in zip(seq, calls):
                    if a[:3] != b:
                        print("  replay", a, "program", b)
            check(all((s[3]) == (c[2] != "0") for s, c in zip(seq, calls)),
                  f"[{mode}] exactly the calls that failed in the trace are skipped")
            res = result_line(rr.stdout)
            check(res.get("allocator") == mode and int(res.get("peak_live_bytes", 0)) > 0
                  and int(res.get("peak_reserved_bytes", 0)) >= int(res.get("peak_live_bytes", 1))
                  and 0 <= float(res.get("fragmentation", -1)) < 1, f"[{mode}] RESULT line {res}")
            check(res.get("skipped_failed") == str(sum(1 for c in calls if c[2] != "0")), f"[{mode}] skipped count")
            if mode == "pagefast":
                # A second recording: the replay's own calls, traced by pagefast.
                check(os.path.exists(second), "[pagefast] the replay was itself traced")
                if os.path.exists(second):
                    _, again = decode(second)
                    issued = [s[:3] for s in seq if not s[3]]
                    again_seq = [(x["op"], str(x["bytes"]), str(x["result"])) for x in sorted(again, key=lambda x: x["t"])]
                    # The engine frees what the trace left live after its pass: those come last.
                    check(again_seq[:len(issued)] == issued and all(x[0] == "free" for x in again_seq[len(issued):]),
                          "the second recording matches the replayed calls")


def case_trace_million():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "m.pftrace")
        stats = os.path.join(d, "m.json")
        r = run([p["workload"], "threads", "4", "250000"], preload=True,
                env_extra={"PAGEFAST_TRACE": trace, "PAGEFAST_STATS": stats}, timeout=280)
        check(r.returncode == 0 and "calls 2000000 failures 0" in r.stdout,
              f"4 threads x 250k alloc/free pairs ran ({r.stdout.strip()} {r.stderr[-300:]})")
        # The call counters of the four threads' blocks (interpose/stats.cpp), summed at exit: none lost.
        calls = json.load(open(stats))["calls"] if os.path.exists(stats) else {}
        check(calls.get("cuMemAlloc_v2") == 1_000_000 and calls.get("cuMemFree_v2") == 1_000_000,
              f"the stats count every call of every thread ({calls.get('cuMemAlloc_v2')}, {calls.get('cuMemFree_v2')})")
        header, records = decode(trace)
        lost = [x for x in records if x["op"] == "lost"]
        check(len(records) == 2_000_000, f"2,000,000 records ({len(records)})")
        check(not lost, f"no lost markers ({len(lost)})")
        check(sorted(set(x["thread"] for x in records)) == [0, 1, 2, 3], "four thread indices")
        per_thread = {}
        for x in records:
            per_thread.setdefault(x["thread"], []).append(x)
        ok = True
        for recs in per_thread.values():
            ts = [x["t"] for x in recs]
            ok = ok and ts == sorted(ts) and [x["op"] for x in recs[:4]] == ["alloc", "free", "alloc", "free"]
        check(ok, "per thread, records in call order, alternating alloc/free")
        chk = run([p["engine"], "--check", trace])
        check("allocs=1000000 frees=1000000 lost_markers=0 lost_records=0 threads=4" in chk.stdout,
              f"engine agrees ({chk.stdout.strip()})")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def case_trace_errors():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        r, good = record_seq(d)
        data = open(good, "rb").read()
        bad_op = bytearray(data)
        bad_op[64 + 32 * 2 + 30] = 9
        bad_size = bytearray(data)
        struct.pack_into("<I", bad_size, 16, 48)
        cases = [
            ("empty", b"", 0, "empty"),
            ("short-header", data[:30], 30, "truncated header"),
            ("bad-magic", b"NOTATRACE" + data[9:], 0, "bad magic"),
            ("garbage", os.urandom(200).replace(b"P", b"Q"), 0, "bad magic"),
            ("record-size", bytes(bad_size), 16, "wrong record size 48"),
            ("truncated-record", data[:64 + 32 * 3 + 10], 64 + 32 * 3, "truncated record 3"),
            ("unknown-op", bytes(bad_op), 64 + 32 * 2 + 30, "unknown op 9"),
        ]
        for name, content, offset, words in cases:
            path = os.path.join(d, name + ".bin")
            write(path, content)
            for argv in ([p["engine"], "--check", path], [p["engine"], "--allocator", "cudaMalloc", path],
                         [p["replay"], "--engine", p["engine"], "--repeats", "1", path]):
                e = run(argv)
                tool = os.path.basename(argv[0])
                check(e.returncode == 2, f"{name}: {tool} exits 2 (got {e.returncode})")
                check(path in e.stderr and f"byte offset {offset}" in e.stderr and words in e.stderr,
                      f"{name}: {tool} names the file, offset {offset} and '{words}' ({e.stderr.strip()[-200:]})")
                check("Traceback" not in e.stderr and "RESULT" not in e.stdout, f"{name}: {tool} clean failure")
        e = run([p["engine"], "--check", os.path.join(d, "missing")])
        check(e.returncode == 2 and "cannot open" in e.stderr, "a missing file: rc 2, says so")


def case_trace_files():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        old = os.umask(0)
        try:
            r, trace = record_seq(d)
        finally:
            os.umask(old)
        check(trace and stat.S_IMODE(os.stat(trace).st_mode) == 0o600, "trace file created 0600 (umask 0)")
        victim = os.path.join(d, "victim")
        write(victim, b"keep")
        link = os.path.join(d, "link.trace")
        os.symlink(victim, link)
        r = run([p["workload"], "seq"], preload=True, env_extra={"PAGEFAST_TRACE": link})
        check(r.returncode == 0 and open(victim, "rb").read() == b"keep", "a symbolic link at the trace path is not followed")
        check("PAGEFAST_TRACE" in r.stderr and "cannot open" in r.stderr, f"and that is reported ({r.stderr.strip()[-200:]})")
        check("writer 0" in r.stdout, "no writer thread left running when the file cannot be opened")
        wide = os.path.join(d, "wide.trace")
        write(wide, b"old contents")
        os.chmod(wide, 0o644)
        run([p["workload"], "seq"], preload=True, env_extra={"PAGEFAST_TRACE": wide})
        check(stat.S_IMODE(os.stat(wide).st_mode) == 0o600 and open(wide, "rb").read(8) == b"PFTRACE1",
              "an existing file is truncated, rewritten and narrowed to 0600")


def case_trace_unset():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        base = run([p["workload"], "seq"], cwd=d)
        # stats:off, release_delay:off, headroom:0, control:off:
        # the live-stats thread (pagefast-live), the decay thread (pagefast-trim),
        # and the control socket's (pagefast-ipc) are not the subject here.
        plain = run([p["workload"], "seq"], preload=True, cwd=d,
                    env_extra={"PAGEFAST_CONF": "stats:off,release_delay:off,headroom:0,control:off"})
        m_base = re.search(r"threads (\d+) writer (\d+)", base.stdout)
        m_plain = re.search(r"threads (\d+) writer (\d+)", plain.stdout)
        check(m_base and m_plain and m_plain.group(1) == m_base.group(1) and m_plain.group(2) == "0",
              f"unset: no extra thread (without pagefast {m_base and m_base.group(0)}, with {m_plain and m_plain.group(0)})")
        check(os.listdir(d) == [], f"unset: no file written ({os.listdir(d)})")
        traced = run([p["workload"], "seq"], preload=True, cwd=d,
                     env_extra={"PAGEFAST_TRACE": os.path.join(d, "t"), "PAGEFAST_CONF": "stats:off,release_delay:off,headroom:0,control:off"})
        m = re.search(r"threads (\d+) writer (\d+)", traced.stdout)
        check(m and m.group(2) == "1" and int(m.group(1)) == int(m_base.group(1)) + 1,
              f"set: exactly one writer thread ({m and m.group(0)})")
        off = run([p["workload"], "seq"], preload=True, env_extra={"PAGEFAST_TRACE": os.path.join(d, "off"),
                                                                    "PAGEFAST": "0"})
        _, recs = decode(os.path.join(d, "off"))
        check(off.returncode == 0 and len(recs) == len(program_calls(off.stdout)), "PAGEFAST=0: still traced")
        # A process that never allocates (a child that inherits the variable,
        # say) writes no file, so it cannot truncate its parent's trace.
        none = os.path.join(d, "none.trace")
        run(["true"], preload=True, env_extra={"PAGEFAST_TRACE": none})
        check(not os.path.exists(none), "no traced call: no file")


def case_trace_fork():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "f-%p.trace")
        r = run([p["workload"], "fork"], preload=True, env_extra={"PAGEFAST_TRACE": trace})
        files = os.listdir(d)
        check(r.returncode == 0 and "child exited 0" in r.stdout, f"fork workload ran ({r.stdout.strip()})")
        check(len(files) == 1, f"one trace file: the child opens none ({files})")
        if files:
            _, recs = decode(os.path.join(d, files[0]))
            check([(x["op"], x["bytes"]) for x in recs] == [("alloc", 1024), ("free", 0), ("alloc", 4096), ("free", 0)],
                  f"only the parent's calls are in the trace ({[(x['op'], x['bytes']) for x in recs]})")


def case_replay_table():
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        r, trace = record_seq(d)
        out_csv, out_svg = os.path.join(d, "r.csv"), os.path.join(d, "r.svg")
        rr = run([p["replay"], "--repeats", "2", "--seed", "1", "--lib", p["lib"], "--engine", p["engine"],
                  "--csv", out_csv, "--svg", out_svg, trace])
        check(rr.returncode == 0, f"pagefast-replay runs (rc {rr.returncode}) {rr.stderr[-400:]}")
        print(rr.stdout)
        check("cudaMallocAsync: skipped" in rr.stderr and "lacks cuMemAllocAsync" in rr.stderr,
              "cudaMallocAsync skipped with a clear message on the fake driver")
        lines = rr.stdout.splitlines()
        check(any(l.startswith("cudaMalloc ") and "1.00x" in l for l in lines), "a cudaMalloc row, ratio 1.00x")
        check(any(l.startswith("pagefast ") for l in lines), "a pagefast row")
        rows = list(csv.DictReader(open(out_csv))) if os.path.exists(out_csv) else []
        check([r["allocator"] for r in rows] == ["cudaMalloc", "cudaMallocAsync", "pagefast"], "CSV: one row each")
        check(rows and rows[0]["runs"] == "2" and float(rows[2]["peak_reserved_bytes"]) > 0, "CSV: medians of 2 runs")
        # The chart: the benchmarks' plotting module (found beside the
        # script), with its axis label, ticks and every bar a visible height.
        try:
            root = ET.parse(out_svg).getroot()
        except (OSError, ET.ParseError) as e:
            check(False, f"SVG written and well formed ({e})")
            root = None
        if root is not None:
            words = ["".join(e.itertext()).strip() for e in root.iter() if e.tag.endswith("text")]
            check("ratio to cudaMalloc (lower is better)" in words and "cudaMalloc" in words and "pagefast" in words
                  and "1" in words, f"the chart has its axis label, categories and ticks ({words[:12]})")
            bars = [float(e.get("height")) for e in root.iter() if e.tag.endswith("rect") and e.get("fill") is None
                    and e.get("height")]
            check(b"matplotlib" in open(out_svg, "rb").read() or (len(bars) == 4 and min(bars) >= 1),
                  f"every bar has a height ({bars})")
        # The default run finds the library through pagefast-run and the engine beside itself.
        rr = run([p["replay"], "--repeats", "1", "--allocators", "pagefast", trace])
        check(rr.returncode == 0 and "pagefast " in rr.stdout, f"finds engine and library by itself {rr.stderr[-300:]}")


def case_replay_no_gpu():
    """Without a GPU the replay says so and names pagefast-simulate, rather
    than 'pagefast failed (rc 1)'."""
    p = paths()
    with tempfile.TemporaryDirectory() as d:
        r, trace = record_seq(d)
        check(r.returncode == 0 and trace, "a trace recorded")
        if not trace:
            return
        # The fake driver with no device: cuInit answers CUDA_ERROR_NO_DEVICE.
        rr = run([p["replay"], "--repeats", "1", "--lib", p["lib"], "--engine", p["engine"], trace],
                 env_extra={"FAKECUDA_DEVICES": "0"})
        check(rr.returncode == 4, f"no device: exit status 4 (got {rr.returncode})")
        check("no GPU here" in rr.stderr and "pagefast-simulate" in rr.stderr and trace in rr.stderr
              and "failed (rc" not in rr.stderr, f"it says so and names pagefast-simulate: {rr.stderr!r}")
        simulate = next((l.split()[0] for l in rr.stderr.splitlines() if "pagefast-simulate" in l and trace in l), "")
        check(os.access(simulate, os.X_OK), f"the pagefast-simulate it names is there: {simulate!r}")
        if os.access(simulate, os.X_OK):
            rs = run([simulate, trace])
            check(rs.returncode == 0, f"and runs the trace ({rs.returncode}) {rs.stderr[-200:]}")
        # No driver at all (where this machine has none of its own).
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
        has_driver = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        if has_driver:
            print("this machine has a libcuda.so.1: the no-driver half is skipped")
            return
        rr = subprocess.run([p["replay"], "--repeats", "1", "--allocators", "cudaMalloc", "--engine", p["engine"], trace],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
        check(rr.returncode == 4 and "no CUDA driver" in rr.stderr and "pagefast-simulate" in rr.stderr,
              f"no driver: exit status 4, said, pagefast-simulate named ({rr.returncode}, {rr.stderr!r})")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
