#!/usr/bin/env python3
"""tests/pool/across_cases.py: memory a program frees reaching another
process on its GPU (docs/POOL.md "Given back at once", docs/IPC.md
"Neighbours"). Two processes of across_processes (across_processes.cpp)
share one fake device of 4 GiB (FAKECUDA_SHARED_MEM): A fills 3 GiB in
256 MiB blocks, frees it all and says so; B then takes 3 GiB at once,
never retrying. Without pagefast in A, B has it all; so must it with
pagefast in A:

  given   A with pagefast's defaults (idle memory over keep_idle goes back
          at the free), B without pagefast: no refusal;
  asked   A keeps everything idle (keep_idle:100), B with pagefast: B's
          pool, short, asks A over its socket, and has it all;
  kept    A keeps everything idle, B without pagefast: B is refused (what
          the two cases above prevent: the test can fail);
  loop    A's default in a loop that frees and allocates again within
          keep_idle: nothing goes back between rounds (PAGEFAST_STATS).
In every case A then fills the 3 GiB again once B has exited.

Usage: across_cases.py given|asked|kept|loop --build <build dir>
"""
import json
import os
import subprocess
import sys
import tempfile

from preload_kit import check, exit_with_failures, program_env

GIB = 1 << 30
BYTES = 3 * GIB
BLOCK = 256 << 20


def env_for(build, shared, preload, conf, extra=None):
    # Only the neighbour's answer may give A's memory back here: no decay,
    # and no headroom kept by A's trim thread while B fills the device.
    return program_env(build, preload, dict({
        "FAKECUDA_TOTAL_MEM": "4G", "FAKECUDA_SHARED_MEM": shared, "PAGEFAST_LOG": "debug",
        "PAGEFAST_CONF": ",".join(c for c in ["release_delay:off", "headroom:0", conf] if c)}, **(extra or {})))


def run_pair(build, a_conf, b_preload, b_conf=""):
    """A (pagefast, a_conf) fills and frees; B takes. Returns (B's result,
    A's stdout, A's stderr, A's rc, A's stats or None)."""
    exe = os.path.join(build, "tests", "pool", "across_processes")
    with tempfile.TemporaryDirectory() as tmp:
        shared = os.path.join(tmp, "device")
        stats = os.path.join(tmp, "a.json")
        a = subprocess.Popen([exe, "fill", str(BYTES), str(BLOCK)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=env_for(build, shared, True, a_conf, {"PAGEFAST_STATS": stats}))
        try:
            said = a.stdout.readline().strip()
            check(said == "freed", f"A filled and freed 3 GiB (it said {said!r})")
            b = subprocess.run([exe, "take", str(BYTES), str(BLOCK)], capture_output=True, text=True, timeout=300,
                               env=env_for(build, shared, b_preload, b_conf))
            out, err = a.communicate("go\n", timeout=300)
        finally:
            if a.poll() is None:
                a.kill()
                a.wait()
        figures = None
        if os.path.exists(stats):
            with open(stats) as f:
                figures = json.load(f)
        return b, said + "\n" + out, err, a.returncode, figures


def device0(figures):
    for d in ((figures or {}).get("pool") or {}).get("devices", []):
        if d.get("device") == 0:
            return d
    return {}


def main():
    what = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if what == "given":
        b, out, err, rc, figures = run_pair(build, "", False)
        check(b.returncode == 0 and "ok took" in b.stdout, f"B without pagefast took 3 GiB at once: {b.stdout.strip()}")
        check(rc == 0 and "ok filled again" in out, f"A filled again after B: {out.strip()} {err[-400:]}")
        given = device0(figures).get("given_back_bytes", 0)
        check(given >= 2 * GIB, f"A's stats count what went back at the free: given_back_bytes {given}")
    elif what == "asked":
        b, out, err, rc, _ = run_pair(build, "keep_idle:100", True)
        check(b.returncode == 0 and "ok took" in b.stdout,
              f"B with pagefast took 3 GiB, A's idle memory given back when asked: {b.stdout.strip()} {b.stderr[-600:]}")
        check("other pagefast process(es) asked" in b.stderr, "B's log says it asked the other processes")
        check("another process ran short on device" in err, "A's log says it gave back for another process")
        check(rc == 0 and "ok filled again" in out, f"A filled again after B: {out.strip()}")
    elif what == "kept":
        b, out, err, rc, _ = run_pair(build, "keep_idle:100", False)
        check(b.returncode != 0 and "refused after" in b.stdout,
              f"B without pagefast is refused while A keeps its idle memory: {b.stdout.strip()}")
        check(rc == 0 and "ok filled again" in out, f"A filled again after B: {out.strip()}")
    elif what == "loop":
        # 3 GiB freed and allocated again, twice, in one process: under
        # keep_idle:80 (3.2 GiB of the 4 GiB device) nothing goes back.
        b, out, err, rc, figures = run_pair(build, "keep_idle:80", False, "")
        check(rc == 0 and "ok filled again" in out, f"A filled, freed and filled again: {out.strip()}")
        check(device0(figures).get("given_back_bytes", -1) == 0,
              f"within keep_idle nothing went back: given_back_bytes {device0(figures).get('given_back_bytes')}")
    else:
        check(False, f"unknown case {what}")
    exit_with_failures()


if __name__ == "__main__":
    main()
