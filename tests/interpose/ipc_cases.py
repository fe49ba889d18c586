#!/usr/bin/env python3
"""tests/interpose/ipc_cases.py: legacy CUDA IPC (cuIpcGetMemHandle /
cuIpcOpenMemHandle / cuIpcCloseMemHandle) of cuMemAlloc memory between
processes, with and without libpagefast.so, on the fake driver.
Each case a separate meson test in suite 'ipc': `ipc_cases.py CASE --build DIR`.

ipc_exporter (ipc_exporter.c) allocates, writes, exports and starts
ipc_importer children (ipc_importer.c) that get each handle as raw 64 bytes
on a pipe. The importers inherit the exporter's environment (LD_PRELOAD,
PAGEFAST_CONF) unless a case says otherwise. A run without pagefast is the
reference: every configuration must print exactly what it prints.

Configurations: "none" (no pagefast), "pool:off" (pagefast forwarding every
allocation), "pool" (pagefast with its pool, the default). The *_pool cases
run the pool configuration: pool blocks shared through pagefast's own
handles (docs/IPC.md).
"""
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402

ARGS = None
REQUEST = struct.Struct("<BBB5xQQ64s")  # struct ipc_request (ipc_common.h)
REPLY = struct.Struct("<iiQQ")  # struct ipc_reply
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
SKIP = 77


def paths():
    b = os.path.abspath(ARGS.build)
    return {
        "lib": os.path.join(b, "interpose", "libpagefast.so"),
        "fake": os.path.join(b, "tests", "fakecuda"),
        "exporter": os.path.join(b, "tests", "interpose", "ipc_exporter"),
        "importer": os.path.join(b, "tests", "interpose", "ipc_importer"),
    }


def config_env(config):
    """The environment of a configuration: a clean one (no PAGEFAST*, no
    LD_PRELOAD from outside) with the fake driver on the library path."""
    p = paths()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = p["fake"]
    env.setdefault("FAKECUDA_TOTAL_MEM", "8G")
    if config != "none":
        env["LD_PRELOAD"] = p["lib"]
        env["PAGEFAST_LOG"] = "error"  # warnings (a pool that cannot listen says so once) would differ; the output must compare
    if config == "pool:off":
        env["PAGEFAST_CONF"] = "pool:off"
    return env


def exporter(case, config, importer_options=(), timeout=120):
    p = paths()
    argv = [p["exporter"], case, p["importer"], *importer_options]
    return subprocess.run(argv, env=config_env(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def reference(case, expected_lines):
    """Runs `case` without pagefast; checks it printed every expected line."""
    r = exporter(case, "none")
    if r.returncode == SKIP:
        print(r.stdout.strip())
        sys.exit(SKIP)
    check(r.returncode == 0, f"[none] {case}: rc 0 (got {r.returncode}; stderr {r.stderr[-400:]})")
    lines = r.stdout.splitlines()
    for line in expected_lines:
        check(line in lines, f"[none] {case}: prints {line!r} (got {r.stdout[-600:]!r})")
    return r


def same_as(ref, case, config, importer_options=(), label=None):
    label = label or config
    r = exporter(case, config, importer_options)
    check(r.returncode == ref.returncode, f"[{label}] {case}: rc {ref.returncode} as without pagefast "
          f"(got {r.returncode}; stderr {r.stderr[-400:]})")
    check(r.stdout == ref.stdout, f"[{label}] {case}: output identical to the run without pagefast\n"
          f"--- without:\n{ref.stdout}--- with:\n{r.stdout}")
    return r


SHARE_LINES = [
    "get small=CUDA_SUCCESS large=CUDA_SUCCESS",
    "child 0 small open=CUDA_SUCCESS read=1 write=CUDA_SUCCESS close=CUDA_SUCCESS",
    "child 2 large open=CUDA_SUCCESS read=1 write=CUDA_SUCCESS close=CUDA_SUCCESS",
    "child 1 exit=0",
    "exporter sees the children's writes=1 neighbours untouched=1",
]
CAPABLE_LINES = ["legacy ipc capable small=CUDA_SUCCESS:1 large=CUDA_SUCCESS:1"]
FREE_LINES = [
    "open small=CUDA_SUCCESS large=CUDA_SUCCESS",
    "free large=CUDA_SUCCESS",
    "after free small old=1 large old=1",
    "close small=CUDA_SUCCESS large=CUDA_SUCCESS",
    "new allocations untouched=1",
]
CYCLES_LINES = ["cycles=1000 failures=0 exporter fd delta=0 importer fd delta=0", "importer exit=0"]
UID_LINES = ["get=CUDA_SUCCESS", "open as nobody=CUDA_ERROR_INVALID_VALUE within 2 s=1", "importer exit=0"]


def same_everywhere(case, lines, configs):
    ref = reference(case, lines)
    for config in configs:
        same_as(ref, case, config)


# --- exporter and importers in the same configuration ------------------------------

def case_share():
    """Children open the 3rd of five small blocks and a 3 MiB block, check
    the pattern, write back and close; the exporter sees their writes."""
    same_everywhere("share", SHARE_LINES, ["pool:off"])


def case_share_pool():
    same_everywhere("share", SHARE_LINES, ["pool"])


def case_capable():
    same_everywhere("capable", CAPABLE_LINES, ["pool:off"])


def case_capable_pool():
    same_everywhere("capable", CAPABLE_LINES, ["pool"])


def case_free():
    """The exporter frees while the importers hold the blocks: they still
    read the old bytes; its new allocations do not alias them."""
    same_everywhere("free", FREE_LINES, ["pool:off"])


def case_free_pool():
    same_everywhere("free", FREE_LINES, ["pool"])


def case_cycles():
    """1000 get/open/close cycles leak no file descriptor in either process."""
    same_everywhere("cycles", CYCLES_LINES, ["pool:off"])


def case_cycles_pool():
    same_everywhere("cycles", CYCLES_LINES, ["pool"])


def case_wrong_uid():
    """An importer running as nobody is refused with INVALID_VALUE, fast."""
    same_everywhere("uid", UID_LINES, ["pool:off"])


def case_wrong_uid_pool():
    same_everywhere("uid", UID_LINES, ["pool"])


def dead_exporter(config):
    """The exporter prints its handle and exits; an importer opens it after."""
    r = exporter("dead", config)
    check(r.returncode == 0 and "get=CUDA_SUCCESS" in r.stdout,
          f"[{config}] the exporter exports and exits (rc {r.returncode}, {r.stdout!r}, {r.stderr[-300:]!r})")
    hex_handle = next((l[len("handle="):] for l in r.stdout.splitlines() if l.startswith("handle=")), "")
    if len(hex_handle) != 128:
        check(False, f"[{config}] the exporter printed a 64-byte handle")
        return
    request = REQUEST.pack(ord("O"), 0, 0, 0, 0, bytes.fromhex(hex_handle)) + REQUEST.pack(ord("Q"), 0, 0, 0, 0, b"")
    try:  # the timeout is a hang guard, not a measure
        imp = subprocess.run([paths()["importer"]], input=request, env=config_env(config),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"[{config}] opening a dead exporter's handle does not hang")
        return
    check(imp.returncode == 0, f"[{config}] the importer exits normally (rc {imp.returncode}, {imp.stderr[-300:]!r})")
    if len(imp.stdout) != REPLY.size:
        check(False, f"[{config}] the importer answered the open ({len(imp.stdout)} bytes)")
        return
    rc, _, _, ms = REPLY.unpack(imp.stdout)
    check(rc == CUDA_ERROR_INVALID_VALUE, f"[{config}] a dead exporter's handle: CUDA_ERROR_INVALID_VALUE (got {rc})")
    print(f"[{config}] the open was answered in {ms} ms")


def case_dead_exporter():
    for config in ["none", "pool:off"]:
        dead_exporter(config)


def case_dead_exporter_pool():
    dead_exporter("pool")


# --- exporter and importers in different configurations ----------------------------

def case_passthrough():
    """A handle of memory the driver gave (no pagefast, or pool:off in the
    exporter) opens in importers running pagefast with its pool."""
    ref = reference("share", SHARE_LINES)
    lib = paths()["lib"]
    same_as(ref, "share", "pool:off", ["--importer-unset", "PAGEFAST_CONF"], "exporter pool:off, importers pool")
    same_as(ref, "share", "none", ["--importer-set", "LD_PRELOAD=" + lib, "--importer-set", "PAGEFAST_LOG=error"],
            "exporter without pagefast, importers pool")


def case_importer_without_pagefast():
    """Importers without pagefast open what an exporter with pool:off shares."""
    ref = reference("share", SHARE_LINES)
    same_as(ref, "share", "pool:off", ["--importer-unset", "LD_PRELOAD"], "exporter pool:off, importers none")


def case_importer_without_pagefast_pool():
    """An importer without pagefast gets an error for a pool block's handle
    (its bytes mean nothing to the driver), never a crash; the exporter's
    memory stays as it was."""
    r = exporter("share", "pool", ["--importer-unset", "LD_PRELOAD"])
    check(r.returncode == 0, f"[exporter pool, importers none] rc 0 (got {r.returncode}; {r.stderr[-400:]})")
    lines = r.stdout.splitlines()
    check("get small=CUDA_SUCCESS large=CUDA_SUCCESS" in lines, f"the pool exports its blocks ({r.stdout[:200]!r})")
    for k in range(3):
        for which in ["small", "large"]:
            line = next((l for l in lines if l.startswith(f"child {k} {which} open=")), "")
            check(line != "" and "open=CUDA_SUCCESS" not in line and "importer-died" not in line,
                  f"child {k} without pagefast: the {which} handle opens with an error, no crash ({line!r})")
        check(f"child {k} exit=0" in lines, f"child {k} without pagefast exits normally")
    check("exporter sees the children's writes=1 neighbours untouched=1" in lines, "the exporter's memory is unchanged")


def main():
    return casekit.main(globals())


if __name__ == "__main__":
    sys.exit(main())
