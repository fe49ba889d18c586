#!/usr/bin/env python3
"""tests/interpose/ipc_peer_cases.py: who the exporter of pool blocks sees
at the other end of its socket, and when it counts that process as dead
(docs/IPC.md "Holds", "Limits on connections"): an importer whose main
thread exited while another thread still uses the block, clients in a pid
namespace the exporter cannot see, a client of another uid, the exports
of a device that was reset.
Each case a meson test in suite 'ipc': `ipc_peer_cases.py CASE --build DIR`.

The exporter is ipc_target, the importers ipc_importer and ipc_orphan
(ipc_orphan.c: its main thread calls pthread_exit after the first open),
all on the fake driver with libpagefast.so preloaded; the helpers are
ipc_safety_cases.py's. Nothing here measures time: every wait is a hang
guard, and the sleeps (LIVENESS_S, IDLE_S) are lower bounds that let the
exporter's periodic look at its holders, or its idle limit, come round
before the test checks that they changed nothing. The idle limit the
cases set (IDLE) is far longer than an importer takes from its connect to
its request, so that only the connections meant to be idle are.
"""
import argparse
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402
import ipc_safety_cases as safety  # noqa: E402
from ipc_safety_cases import (CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS, HANDLE, HANG_S, MiB,  # noqa: E402
                              REQUEST_MAGIC, SKIP, WIRE_REQUEST, WIRE_VERSION, Importer, Target, settle, state_of,
                              wait_until)

ARGS = None
# The exporter looks at each holder at least this often (ipc_server.cpp
# kLivenessNs), plus room: sleeping this long lets one look come round.
LIVENESS_S = 1.5
# The idle limit where a case needs connections closed (PAGEFAST_IPC_IDLE),
# and a sleep past it; "60m" where a case needs none closed.
IDLE, IDLE_S = "2s", 2.5
NEVER_IDLE = "60m"
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


class Orphan(Target):
    """ipc_orphan: opens `handle`, then its main thread exits; the same
    line protocol as ipc_target (readline, ask, stderr, quit)."""

    WHAT = "the orphan importer"

    def __init__(self, handle, env_extra=None):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen([orphan_path(), handle.hex()], env=safety.pool_env(env_extra),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.pid = self.p.pid
        self.pending = b""
        self.opened = self.readline()

    def reads(self, slot, byte, nbytes):
        return self.ask(f"check {slot} {byte:x} {nbytes}") == "check 1"


def orphan_path():
    return os.path.join(os.path.abspath(safety.ARGS.build), "tests", "interpose", "ipc_orphan")


def leader_gone(orphan):
    """Waits until the orphan's main thread has exited: /proc shows its
    leader as a zombie while the worker thread runs on."""
    return wait_until(lambda: state_of(orphan.pid) == "Z", "the orphan's main thread exited (its leader a zombie)")


def sockets_of(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


# --- the cases ---------------------------------------------------------------------------------

def leader_exit(exporter_env):
    """An importer opens block A, then its main thread exits (pthread_exit)
    while a worker thread keeps A mapped. The exporter frees A (kept: held)
    and goes on allocating and writing under a limit that leaves it
    nothing but A's memory to reuse: A's memory is never handed out while
    the importer runs, so the importer reads A's bytes and its writes never
    reach the exporter's blocks. Once the importer exits, A's memory is
    the exporter's again."""
    env = {"PAGEFAST_CONF": "chunk_size:2M,limit:10M"}
    t = Target(dict(env, **exporter_env))
    check(t.ask(f"alloc 0 {3 * MiB} 41") == "ok" and t.ask(f"alloc 1 {MiB} 42") == "ok", "blocks A and B")
    orphan = Orphan(t.handle(0), env)
    check(orphan.opened == "opened CUDA_SUCCESS", f"the importer opens A ({orphan.opened})")
    leader_gone(orphan)
    check(orphan.reads(0, 0x41, 3 * MiB), "its worker thread reads A's bytes")
    check(t.ask("free 0") == "free CUDA_SUCCESS", "the exporter frees A while it is held")
    for round_ in range(3):
        time.sleep(LIVENESS_S)
        settle(t)
        r = t.ask(f"churn 2 {3 * MiB} 0")
        check(r.endswith("overlapping 0"), f"[{round_}] the exporter's new blocks are never where A is ({r})")
        check(orphan.reads(0, 0x41, 3 * MiB), f"[{round_}] the importer still reads A's bytes")
    check(orphan.ask(f"write 0 5a {3 * MiB}") == "write CUDA_SUCCESS", "the importer writes A")
    check(t.ask("check 1 42") == "check 1", "the importer's writes never reached the exporter's B")
    orphan.quit()
    settle(t)
    r = t.ask(f"churn 1 {3 * MiB} 0")
    check(r == "churn ok overlapping 1", f"A's memory is the exporter's again once the importer exited ({r})")
    t.quit()


def case_leader_exit():
    """leader_exit, the exporter told by a pidfd."""
    leader_exit({})


def case_leader_exit_no_pidfd():
    """leader_exit with no pidfds in the exporter (no_pidfd.c preloaded, as
    a kernel before 5.3 or a seccomp filter): it reads /proc/PID/task."""
    shim = os.path.join(os.path.abspath(safety.ARGS.build), "tests", "interpose", "libnopidfd.so")
    leader_exit({"LD_PRELOAD": f"{shim} {safety.paths()['lib']}"})


def case_leader_exit_connect():
    """An importer whose main thread has exited connects to a second
    exporter: it is identified as the live process it is, so its hold is
    its own (kept when the connection goes) and its connection, once idle,
    is closed (PAGEFAST_IPC_IDLE, short here). The block stays the
    importer's: the exporter's new blocks never take its memory, and the
    importer closes it through a new connection."""
    env = {"PAGEFAST_CONF": "chunk_size:2M,limit:10M"}
    t1 = Target(env)
    t2 = Target(dict(env, PAGEFAST_IPC_IDLE=IDLE))
    check(t1.ask(f"alloc 0 {MiB} 41") == "ok", "a block of the first exporter")
    check(t2.ask(f"alloc 0 {3 * MiB} 43") == "ok" and t2.ask(f"alloc 1 {MiB} 44") == "ok",
          "blocks C and D of the second")
    orphan = Orphan(t1.handle(0), env)
    check(orphan.opened == "opened CUDA_SUCCESS", f"the importer opens the first block ({orphan.opened})")
    leader_gone(orphan)
    c = t2.handle(0)
    listening = sockets_of(t2.pid)
    r = orphan.ask(f"open 1 {c.hex()}")
    check(r == "open CUDA_SUCCESS" and orphan.reads(1, 0x43, 3 * MiB), f"after its main thread exited it opens C ({r})")
    wait_until(lambda: sockets_of(t2.pid) <= listening, "the second exporter closes the idle connection")
    check(t2.ask("free 0") == "free CUDA_SUCCESS", "the second exporter frees C while it is held")
    time.sleep(max(LIVENESS_S, IDLE_S))
    settle(t2)
    r = t2.ask(f"churn 2 {3 * MiB} 0")
    check(r.endswith("overlapping 0"), f"its new blocks are never where C is ({r})")
    check(orphan.reads(1, 0x43, 3 * MiB), "the importer still reads C's bytes")
    check(orphan.ask("close 1") == "close CUDA_SUCCESS", "the importer closes C (through a new connection)")
    settle(t2)
    r = t2.ask(f"churn 1 {3 * MiB} 0")
    check(r == "churn ok overlapping 1", f"C's memory is the exporter's again after the close ({r})")
    check(t2.ask("check 1 44") == "check 1", "D untouched")
    orphan.quit()
    t1.quit()
    t2.quit()


class NsTarget(Target):
    """ipc_target in a pid namespace of its own (unshare): SO_PEERCRED gives
    it pid 0 for every process of this test."""

    def __init__(self, env_extra=None):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(UNSHARE + [safety.paths()["target"]], env=safety.pool_env(env_extra),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.pid = self.p.pid
        self.pending = b""
        check(self.readline() == "ready", "the exporter started in its own pid namespace")


def socket_of(handle):
    """The exporter's socket name, from the fields of one of its handles."""
    f = HANDLE.unpack(handle)
    pid, start, pidns = f[4], f[6], f[7]
    return f"\0pagefast-ipc.{os.geteuid()}.{pidns}.{pid}.{start}"


def connect_idle(name, count):
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(HANG_S)
        s.connect(name)
        socks.append(s)
    return socks


def ended(s):
    """Whether the exporter closed this connection (EOF), without waiting."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def wait_all_ended(socks):
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    left = {s.fileno(): s for s in socks}
    deadline = time.monotonic() + HANG_S
    while left and time.monotonic() < deadline:
        for fd, _ in poller.poll(1000):
            if fd in left and ended(left[fd]):
                poller.unregister(fd)
                del left[fd]
    return not left


def unseen_idle(target_class, env):
    """The exporter cannot tell who connects (SO_PEERCRED pid 0). One
    client fills the 64 connections such processes may have together: the
    next one is closed at once, with a warning that names the client as a
    process in another pid namespace. Those connections hold nothing, so
    they are closed once idle (PAGEFAST_IPC_IDLE) and an importer gets in;
    its connection, to which its hold is tied, stays while it is idle and
    holds."""
    env = dict(env, PAGEFAST_CONF="chunk_size:2M,limit:10M")
    t = target_class(dict(env, PAGEFAST_IPC_IDLE=NEVER_IDLE))
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "[limit] a block")
    socks = connect_idle(socket_of(t.handle(0)), 65)
    check(wait_all_ended(socks[64:]), "[limit] the 65th connection is closed at once")
    check(not any(ended(s) for s in socks[:64]), "[limit] the 64 before it are kept")
    err = t.stderr()
    check("a process in another pid namespace (uid" in err and "process 0" not in err,
          f"[limit] the warning names the client as a reader understands it ({err[-400:]})")
    for s in socks:
        s.close()
    t.quit()

    t = target_class(dict(env, PAGEFAST_IPC_IDLE=IDLE))
    check(t.ask(f"alloc 0 {3 * MiB} 41") == "ok" and t.ask(f"alloc 1 {MiB} 42") == "ok", "[idle] blocks A and B")
    h = t.handle(0)
    socks = connect_idle(socket_of(h), 64)
    check(wait_all_ended(socks), "[idle] the client's 64 idle connections, which hold nothing, are closed")
    imp = Importer()
    rc = imp.open(h)
    check(rc == CUDA_SUCCESS and imp.reads(0, 3 * MiB, 0x41), f"[idle] an importer opens A then (rc {rc})")
    check(t.ask("free 0") == "free CUDA_SUCCESS", "[idle] the exporter frees A while it is held")
    time.sleep(max(LIVENESS_S, IDLE_S))
    r = t.ask(f"churn 2 {3 * MiB} 0")
    check(r.endswith("overlapping 0"), f"[idle] the idle importer's hold stands: A's memory is not reused ({r})")
    check(imp.reads(0, 3 * MiB, 0x41), "[idle] the importer still reads A's bytes")
    check(imp.close() == CUDA_SUCCESS, "[idle] the importer closes A")
    for s in socks:
        s.close()
    imp.quit()
    t.quit()


def case_unseen_idle():
    """unseen_idle with every peer hidden from the exporter (peer_hide.c
    preloaded: SO_PEERCRED pid 0): runs without any privilege."""
    hide = os.path.join(os.path.abspath(safety.ARGS.build), "tests", "interpose", "libpeerhide.so")
    unseen_idle(Target, {"LD_PRELOAD": f"{hide} {safety.paths()['lib']}"})


def case_unseen_idle_ns():
    """unseen_idle with the exporter in a pid namespace of its own
    (unshare), as a container without a shared process namespace."""
    probe = subprocess.run(UNSHARE + ["true"], capture_output=True, text=True, timeout=HANG_S)
    if probe.returncode != 0:
        print(f"skip: no pid namespace can be made here ({' '.join(UNSHARE)}: {probe.stderr.strip()}); "
              "ipc_unseen_idle tests the same rules with hidden peers")
        sys.exit(SKIP)
    unseen_idle(NsTarget, {})


def case_reset_exports():
    """After the exporter's cuDevicePrimaryCtxReset its exports are gone
    with the memory: a handle made before the reset does not open
    (CUDA_ERROR_INVALID_VALUE, the driver's answer for a handle it does not
    know) instead of showing the old bytes; a block allocated after the
    reset (the driver's) shares as without pagefast."""
    t, imp = Target(), Importer()
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a block")
    before = t.handle(0)
    check(t.ask("reset") == "reset CUDA_SUCCESS", "the exporter resets its device")
    rc = imp.open(before)
    check(rc == CUDA_ERROR_INVALID_VALUE, f"the handle from before the reset does not open (rc {rc})")
    if rc == CUDA_SUCCESS:
        check(not imp.reads(0, MiB, 0x41), "... and shows no old bytes")
        imp.close()
    check(t.ask(f"alloc 1 {MiB} 42") == "ok", "a block after the reset")
    after = t.handle(1)
    rc = imp.open(after, slot=1)
    check(rc == CUDA_SUCCESS and imp.reads(1, MiB, 0x42), f"a handle made after the reset opens (rc {rc})")
    check(imp.close(1) == CUDA_SUCCESS, "and closes")
    imp.quit()
    t.quit()


def case_foreign_control():
    """A process of another uid connects to the exporter's socket and asks
    it to sleep and for its status: the exporter closes the connection
    without an answer, and its pool stays awake."""
    if os.geteuid() != 0:
        print("skip: not root, so no process of another uid can be made")
        sys.exit(SKIP)
    t = Target()
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a pool (and with it the socket)")
    name = t.socket_name()  # read here: /proc/PID/ns of a root process is closed to uid 65534
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        said = b"error"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(HANG_S)
            s.connect(name)
            for op in (3, 5):  # sleep, status
                s.sendall(WIRE_REQUEST.pack(REQUEST_MAGIC, WIRE_VERSION, op, 0, op, 0, 0, 0))
            said = b"eof" if s.recv(64) == b"" else b"answered"
        except (ConnectionResetError, BrokenPipeError):
            said = b"eof"
        except OSError as e:
            said = f"error {e}".encode()
        os.write(w, said)
        os._exit(0)
    os.close(w)
    safety.wait_readable(r, "the other uid's client")
    said = os.read(r, 256).decode()
    os.close(r)
    os.waitpid(pid, 0)
    check(said == "eof", f"the exporter closes the other uid's connection without an answer ({said})")
    r = safety.ctl("status", str(t.pid))
    check(r.returncode == 0 and ": awake" in r.stdout, f"its pool is awake ({r.stdout})")
    t.quit()


def main():
    # The helpers of ipc_safety_cases read its ARGS; casekit sets this
    # module's when it runs the case.
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--build", required=True)
    safety.ARGS = parser.parse_known_args()[0]
    return casekit.main(globals())


if __name__ == "__main__":
    sys.exit(main())
