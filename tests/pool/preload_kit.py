"""tests/pool/preload_kit.py: what the pool's case scripts share
(preload_cases.py, headroom_cases.py, report_cases.py): a program of
tests/pool run against the fake libcuda.so.1, with or without
LD_PRELOAD=libpagefast.so, in an environment cleared of the caller's
PAGEFAST_* and FAKECUDA_* settings; and the checks that record failures."""
import os
import subprocess
import sys

failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def expect_ok(r, name, label):
    """The program ran case `name` to its end ("ok NAME") and exited 0."""
    check(r.returncode == 0 and f"ok {name}" in r.stdout,
          f"{label}: {name} (rc {r.returncode}) {r.stdout[-400:]} {r.stderr[-400:]}")


_IPC_DIR = []


def ipc_dir():
    """A socket folder of this test's own (made once, mode 0700, removed at
    exit): the programs of one test find each other there, and never a
    pagefast process of another test running at the same time, which the
    fake driver shows on the same PCI bus id (a neighbour's give-back,
    docs/IPC.md "Neighbours", would take its idle memory)."""
    if not _IPC_DIR:
        import atexit
        import shutil
        import tempfile
        _IPC_DIR.append(tempfile.mkdtemp(prefix="pf-ipc-"))
        atexit.register(shutil.rmtree, _IPC_DIR[0], True)
    return _IPC_DIR[0]


def program_env(build, preload=True, env=None):
    """This environment without pagefast's and the fake driver's variables,
    with the fake driver on the library path, the build's libpagefast.so
    preloaded when `preload`, the test's own socket folder (ipc_dir), and
    `env` added last."""
    e = {k: v for k, v in os.environ.items()
         if not (k.startswith("PAGEFAST") or k.startswith("FAKECUDA") or k == "LD_PRELOAD")}
    e["LD_LIBRARY_PATH"] = os.path.join(build, "tests", "fakecuda")
    e["PAGEFAST_IPC_DIR"] = ipc_dir()
    if preload:
        e["LD_PRELOAD"] = os.path.join(build, "interpose", "libpagefast.so")
    e.update(env or {})
    return e


def run_program(build, program, args, preload=True, env=None, timeout=600):
    """Runs build/tests/pool/PROGRAM ARGS in program_env. `timeout` is a
    guard against a hang, not a measure."""
    exe = os.path.join(build, "tests", "pool", program)
    return subprocess.run([exe] + list(args), env=program_env(build, preload, env), capture_output=True, text=True,
                          timeout=timeout)


def exit_with_failures():
    """The count of failed checks, and the exit status that says it."""
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
