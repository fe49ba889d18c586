#!/usr/bin/env python3
"""tests/tools/test_nvml_peak.py: tools/bench/nvml_peak.py against a fake
libnvidia-ml.so.1 (tests/tools/fakenvml): it finds a peak that lasts a few
queries between lower values, counts only the given pid (summing
nothing of others), stops when standard input closes, and exits 3 with one
line when NVML is missing, refuses, or hides per-process memory.

  test_nvml_peak.py FAKE_NVML_DIR (holds libnvidia-ml.so.1)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLER = os.path.join(HERE, "..", "..", "tools", "bench", "nvml_peak.py")
MIB = 1 << 20


def start(fake_dir, state, pid, extra=None):
    env = dict(os.environ, LD_LIBRARY_PATH=fake_dir, FAKE_NVML_FILE=state, **(extra or {}))
    return subprocess.Popen([sys.executable, SAMPLER, str(pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def write(state, lines):
    tmp = state + ".new"
    with open(tmp, "w") as f:
        f.write("".join(f"{p} {b}\n" for p, b in lines))
    os.replace(tmp, state)  # the sampler never reads half a file


def queries(reads):
    """How many process queries the fake NVML has answered (FAKE_NVML_READS)."""
    try:
        return os.path.getsize(reads)
    except FileNotFoundError:
        return 0


def wait_reads(reads, n):
    """Waits for the n-th query; False after a minute (a hang guard)."""
    give_up = time.monotonic() + 60
    while queries(reads) < n:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.001)
    return True


def main():
    fake_dir = sys.argv[1]
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        state = os.path.join(d, "procs")
        reads = os.path.join(d, "reads")
        pid = 4242
        write(state, [(pid, 100 * MIB), (7, 900 * MIB)])
        p = start(fake_dir, state, pid, {"FAKE_NVML_READS": reads})
        # Each value stays until the sampler has queried twice more: the
        # second of those queries began after the value was written (one
        # query at a time), so it saw it, however the sampler is scheduled.
        check(wait_reads(reads, 2), "the sampler queries NVML")
        write(state, [(pid, 700 * MIB), (7, 900 * MIB)])  # a short peak
        check(wait_reads(reads, queries(reads) + 2), "the sampler saw the peak")
        write(state, [(pid, 300 * MIB), (7, 5000 * MIB)])  # another process's, not ours
        check(wait_reads(reads, queries(reads) + 2), "the sampler saw the last value")
        out, err = p.communicate(input="", timeout=60)  # stops when stdin closes (a hang guard)
        check(p.returncode == 0, f"exit 0 (got {p.returncode}: {err.strip()})")
        r = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        check(r.get("peak_mib") == 700, f"peak 700 MiB, a peak among lower samples (got {r.get('peak_mib')})")
        # The first query is the check that NVML shows per-process memory.
        check(r.get("samples", 0) >= 6 and r.get("samples") == queries(reads) - 1,
              f"every query after the first is a sample (got {r.get('samples')} of {queries(reads)} queries)")
        check(r.get("source") == "nvml", "source nvml")

        # Two processes' worth of rows, ours twice (two devices' worth in one
        # list): the sum of ours.
        write(state, [(pid, 100 * MIB), (pid, 50 * MIB), (9, 1 * MIB)])
        os.unlink(reads)
        p = start(fake_dir, state, pid, {"FAKE_NVML_READS": reads})
        check(wait_reads(reads, 2), "the sampler took a sample")
        out, err = p.communicate(input="", timeout=60)
        r = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        check(r.get("peak_mib") == 150, f"rows of the pid summed: 150 (got {r.get('peak_mib')})")

        # Hidden per-process memory, a refusing NVML, and no NVML at all:
        # exit 3 with one line, so that the caller falls back.
        cases = [("hidden memory", None, fake_dir), ("init refused", {"FAKE_NVML_FAIL": "init"}, fake_dir)]
        # A real libnvidia-ml.so.1 (a GPU machine) is found without the fake:
        # "no NVML" is shown only where there is none.
        env = dict(os.environ, LD_LIBRARY_PATH=d)
        real = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        if not real:
            cases.append(("no NVML", None, d))
        for name, extra, lib_dir in cases:
            if name == "hidden memory":
                write(state, [(pid, "-")])
            p = start(lib_dir, state, pid, extra)
            out, err = p.communicate(input="", timeout=30)
            lines = [l for l in err.splitlines() if l.strip()]
            check(p.returncode == 3 and len(lines) == 1 and lines[0].startswith("nvml_peak: "),
                  f"{name}: exit 3, one line (got {p.returncode}: {err.strip()[:200]})")
            check(out.strip() == "", f"{name}: nothing on stdout")

    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
