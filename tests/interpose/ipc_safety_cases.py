#!/usr/bin/env python3
"""tests/interpose/ipc_safety_cases.py: CUDA IPC of pool blocks, and the
control socket, when the other side misbehaves (docs/IPC.md, "Holds" to
"Fork"): the exporter stopped while an importer opens, a flood of
connections, a descriptor shortage, another uid holding the socket's name,
an unsafe PAGEFAST_IPC_DIR, sleep and wake with importers, pagefast-ctl's
requests while a sleep blocks, forged handles, a forked child that exits.
Each case a meson test in suite 'ipc': `ipc_safety_cases.py CASE --build
DIR`.

ipc_target (ipc_target.c) is the exporter, driven line by line; ipc_importer
(ipc_importer.c) the importer, driven with the pipe protocol of
ipc_common.h. Both run on the fake driver with libpagefast.so preloaded.
Nothing here measures time: the waits are hang guards.
"""
import os
import resource
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402

ARGS = None
HANG_S = 60  # a hang guard, never what is checked
SKIP = 77
MiB = 1 << 20
REQUEST = struct.Struct("<BBBB4xQQ64s")  # struct ipc_request (ipc_common.h)
REPLY = struct.Struct("<iiQQ")  # struct ipc_reply
HANDLE = struct.Struct("<8sHHIIIQQQQQ")  # the pagefast handle (docs/IPC.md)
WIRE_REQUEST = struct.Struct("<IHHQQQII")  # wire::Request (interpose/ipc/ipc_wire.h)
WIRE_REPLY = struct.Struct("<IIIIII")  # wire::ReplyHeader
REQUEST_MAGIC, REPLY_MAGIC, WIRE_VERSION = 0x71524650, 0x72524650, 2  # control requests (ipc_wire.h kControlVersion)
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE = 0, 1


def paths():
    b = os.path.abspath(ARGS.build)
    return {
        "lib": os.path.join(b, "interpose", "libpagefast.so"),
        "fake": os.path.join(b, "tests", "fakecuda"),
        "target": os.path.join(b, "tests", "interpose", "ipc_target"),
        "importer": os.path.join(b, "tests", "interpose", "ipc_importer"),
        "ctl": os.path.join(b, "tools", "pagefast-ctl"),
    }


def pool_env(extra=None):
    """A clean environment with pagefast (its pool on) over the fake driver."""
    p = paths()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = p["fake"]
    env.setdefault("FAKECUDA_TOTAL_MEM", "8G")
    # CASES_PRELOAD: another build of the library with what it needs before
    # it (the sanitizer runtimes: tests/sanitize/meson.build).
    env["LD_PRELOAD"] = os.environ.get("CASES_PRELOAD") or p["lib"]
    env["PAGEFAST_LOG"] = "warn"
    env.update(extra or {})
    return env


def wait_readable(fd, what):
    poller = select.poll()  # not select(): descriptors past 1023 (the flood) are fine
    poller.register(fd, select.POLLIN)
    if not poller.poll(HANG_S * 1000):
        raise TimeoutError(f"no answer from {what} within {HANG_S} s")


class Target:
    """ipc_target: one command a line, one answer a line."""

    WHAT = "the exporter"  # in the messages of a hang and of the exit

    def __init__(self, env_extra=None, preexec=None):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen([paths()["target"]], env=pool_env(env_extra), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, preexec_fn=preexec)
        self.pid = self.p.pid
        self.pending = b""
        check(self.readline() == "ready", "the exporter started")

    def readline(self):
        while b"\n" not in self.pending:
            wait_readable(self.p.stdout.fileno(), self.WHAT)
            chunk = os.read(self.p.stdout.fileno(), 4096)
            if not chunk:
                return "<exited>"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def ask(self, line):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()
        return self.readline()

    def handle(self, n):
        answer = self.ask(f"handle {n}")
        check(answer.startswith("handle "), f"block {n} exports ({answer})")
        return bytes.fromhex(answer[len("handle "):]) if answer.startswith("handle ") else b"\0" * 64

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def quit(self):
        try:
            if self.p.poll() is None:
                self.p.stdin.write(b"quit\n")
                self.p.stdin.flush()
            self.p.wait(timeout=HANG_S)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        check(self.p.returncode == 0, f"{self.WHAT} exits normally (rc {self.p.returncode}; {self.stderr()[-400:]})")

    def socket_name(self):
        return "\0" + socket_basename(self.pid)


class Importer:
    """ipc_importer over its pipe protocol."""

    def __init__(self, env_extra=None):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen([paths()["importer"]], env=pool_env(env_extra), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err)

    def call(self, op, handle=b"", slot=0, offset=0, nbytes=0, expect=0, value=0):
        self.p.stdin.write(REQUEST.pack(ord(op), expect, value, slot, offset, nbytes, handle))
        self.p.stdin.flush()
        return self.call_reply()

    def call_reply(self):
        """The answer to the request written last."""
        data = b""
        while len(data) < REPLY.size:
            wait_readable(self.p.stdout.fileno(), "the importer")
            chunk = os.read(self.p.stdout.fileno(), REPLY.size - len(data))
            if not chunk:
                return (-1, 0, 0, 0)
            data += chunk
        return REPLY.unpack(data)

    def open(self, handle, slot=0):
        return self.call("O", handle, slot=slot)[0]

    def reads(self, slot, nbytes, expect):
        rc, ok, _, _ = self.call("R", slot=slot, nbytes=nbytes, expect=expect)
        return rc == CUDA_SUCCESS and ok == 1

    def write(self, slot, nbytes, value):
        return self.call("W", slot=slot, nbytes=nbytes, value=value)[0]

    def close(self, slot=0):
        return self.call("C", slot=slot)[0]

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def quit(self):
        try:
            self.p.stdin.write(REQUEST.pack(ord("Q"), 0, 0, 0, 0, 0, b""))
            self.p.stdin.flush()
            self.p.wait(timeout=HANG_S)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        check(self.p.returncode == 0, f"the importer exits normally (rc {self.p.returncode}; {self.stderr()[-300:]})")


def start_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        line = f.read()
    return int(line[line.rindex(")") + 2:].split()[19])


def socket_basename(pid, uid=None):
    uid = os.geteuid() if uid is None else uid
    return f"pagefast-ipc.{uid}.{os.stat(f'/proc/{pid}/ns/pid').st_ino}.{pid}.{start_ticks(pid)}"


M64 = (1 << 64) - 1


def handle_checksum(data):
    """The handle's checksum as the library makes it (interpose/ipc/
    ipc_common.cpp, handle version 2): a multiply-xorshift mix over its
    eight 64-bit words, folded to 32 bits."""
    h = 0x243F6A8885A308D3
    for (word,) in struct.iter_unpack("<Q", data):
        h = ((h ^ word) * 0x9E3779B97F4A7C15) & M64
        h ^= h >> 32
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    return (h ^ (h >> 32)) & 0xFFFFFFFF


def fnv1a(data):
    """The checksum of handle version 1 (FNV-1a over the bytes)."""
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def forge(handle, checksum=handle_checksum, **fields):
    """The handle with fields replaced and its checksum made right again."""
    names = ["magic", "version", "flags", "device", "pid", "check", "start_time", "pidns", "export_id", "bytes",
             "offset"]
    values = dict(zip(names, HANDLE.unpack(handle)))
    values.update(fields)
    values["check"] = 0
    raw = HANDLE.pack(*[values[n] for n in names])
    values["check"] = checksum(raw)
    return HANDLE.pack(*[values[n] for n in names])


def ctl(*args):
    return subprocess.run([paths()["ctl"], *args], capture_output=True, text=True, timeout=HANG_S)


def settle(t):
    """Returns once the exporter has acted on what importers sent before:
    pagefast-ctl status is answered by its socket thread after what came
    earlier, and wake (a no-op while awake) by its background thread after
    the blocks that thread was to give back."""
    for args in [("status",), ("wake",)]:
        r = ctl(*args, str(t.pid))
        check(r.returncode == 0, f"pagefast-ctl {args[0]} answers ({r.stdout} {r.stderr})")


def wait_until(condition, what):
    deadline = time.monotonic() + HANG_S
    while not condition():
        if time.monotonic() > deadline:
            check(False, f"{what} (gave up after {HANG_S} s)")
            return False
        time.sleep(0.01)
    return True


def reap(proc):
    """proc's output once it ends, killed after HANG_S (a hang guard: the
    checks on its output then fail)."""
    try:
        return proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def state_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        line = f.read()
    return line[line.rindex(")") + 2]


def raise_fd_limit(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --- the cases ---------------------------------------------------------------------------------

def case_stall():
    """The importer holds A; the exporter frees A (kept) and is stopped
    (SIGSTOP) while the importer opens B: that open fails after the
    importer's timeout, and nothing else changes. After SIGCONT the
    exporter's new allocations never get A's memory (the importer still
    reads A's bytes), and opens from it work again."""
    # Small chunks and a limit of 10 MiB: A (a 4 MiB chunk) and B (2 MiB)
    # leave room for one more 3 MiB block; the next one can only be A's
    # memory, if A were given back.
    env = {"PAGEFAST_CONF": "chunk_size:2M,limit:10M"}
    t, imp = Target(env), Importer(env)
    check(t.ask(f"alloc 0 {3 * MiB} 41") == "ok" and t.ask(f"alloc 1 {MiB} 42") == "ok", "blocks A and B")
    a, b = t.handle(0), t.handle(1)
    check(imp.open(a, slot=0) == CUDA_SUCCESS and imp.reads(0, 3 * MiB, 0x41), "the importer opens A, reads its bytes")
    check(t.ask("free 0") == "free CUDA_SUCCESS", "the exporter frees A while it is held")
    os.kill(t.pid, signal.SIGSTOP)
    wait_until(lambda: state_of(t.pid) == "T", "the exporter is stopped")
    rc = imp.open(b, slot=1)
    check(rc != CUDA_SUCCESS, f"opening B while the exporter is stopped fails (rc {rc})")
    check("did not answer" in imp.stderr(), f"... with a warning that says why ({imp.stderr()[-300:]})")
    check(imp.reads(0, 3 * MiB, 0x41), "A reads its bytes while the exporter is stopped")
    os.kill(t.pid, signal.SIGCONT)
    # pagefast-ctl's answer comes from the exporter's socket thread once it
    # has caught up with what happened while it was stopped.
    r = ctl("status", str(t.pid))
    check(r.returncode == 0, f"the exporter answers pagefast-ctl again ({r.stdout} {r.stderr})")
    r = t.ask(f"churn 2 {3 * MiB} 0")
    check(r.endswith("overlapping 0"), f"the exporter's new blocks of A's size are never where A is ({r})")
    check(imp.reads(0, 3 * MiB, 0x41), "A still holds A's bytes: its memory was not handed out again")
    check(imp.write(0, 3 * MiB, 0x5a) == CUDA_SUCCESS, "the importer writes A")
    rc = imp.open(b, slot=1)
    check(rc == CUDA_SUCCESS and imp.reads(1, MiB, 0x42), f"B opens now, with B's bytes (rc {rc})")
    check(t.ask("check 1 42") == "check 1", "the importer's writes to A never reached the exporter's B")
    check(imp.close(0) == CUDA_SUCCESS and imp.close(1) == CUDA_SUCCESS, "both close")
    settle(t)
    r = t.ask(f"churn 1 {3 * MiB} 0")
    check(r == "churn ok overlapping 1", f"A's memory is the exporter's again once the importer closed it ({r})")
    imp.quit()
    t.quit()


def case_flood():
    """A client opens 1,100 connections that send nothing: the exporter
    keeps 8 (one process's most) and closes the rest; another process
    floods in 20 processes of 3 connections each (more than the 32 it keeps
    under a descriptor limit of 128): the oldest are closed for new ones.
    The exporter keeps descriptors to spare and an importer still opens."""
    raise_fd_limit(4096)
    t = Target(preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)))
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a block")
    h = t.handle(0)
    name = t.socket_name()
    socks = []
    for _ in range(1100):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Blocking: a connect waits for room in the backlog (SO_SNDTIMEO
        # bounds it, as a hang guard).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", HANG_S, 0))
        try:
            s.connect(name)
        except OSError as e:
            check(False, f"the exporter keeps accepting (connection {len(socks)}: {e})")
            s.close()
            break
        s.setblocking(False)
        socks.append(s)
    open_socks = set(socks)
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    by_fd = {s.fileno(): s for s in socks}
    deadline = time.monotonic() + HANG_S
    while len(open_socks) > 8 and time.monotonic() < deadline:
        for fd, _ in poller.poll(1000):
            s = by_fd[fd]
            try:
                ended = s.recv(1) == b""
            except BlockingIOError:
                continue
            except ConnectionResetError:
                ended = True
            if ended:
                open_socks.discard(s)
                poller.unregister(fd)
    check(len(open_socks) <= 8, f"the exporter closed all but at most 8 of one process's 1,100 connections "
          f"({len(open_socks)} open)")
    fds = t.ask("fds")
    check(fds.startswith("fds ") and 0 < int(fds.split()[1]) < 100, f"the exporter keeps descriptors to spare ({fds})")
    imp = Importer()
    check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), "an importer opens while the flood holds on")
    check(imp.close() == CUDA_SUCCESS, "and closes")
    script = ("import socket,sys\n"
              "s=[socket.socket(socket.AF_UNIX,socket.SOCK_STREAM) for _ in range(3)]\n"
              "[x.connect('\\0'+sys.argv[1]) for x in s]\nprint('connected',flush=True)\nsys.stdin.read()\n")
    crowd = []
    for _ in range(20):
        c = subprocess.Popen([sys.executable, "-c", script, name[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        crowd.append(c)
        c.stdout.readline()
    fds = t.ask("fds")
    check(fds.startswith("fds ") and 0 < int(fds.split()[1]) < 100, f"... and under a crowd of processes ({fds})")
    imp2 = Importer()
    check(imp2.open(h) == CUDA_SUCCESS and imp2.reads(0, MiB, 0x41), "a new importer opens in the crowd")
    check(imp2.close() == CUDA_SUCCESS, "and closes")
    for c in crowd:
        c.stdin.close()
        c.wait(timeout=HANG_S)
    for s in socks:
        s.close()
    imp.quit()
    imp2.quit()
    err = t.stderr()
    check(err.count("the most one process may have") == 1, f"one warning about one process's connections ({err[-600:]})")
    check(err.count("the most it keeps") == 1, "one warning about all connections")
    t.quit()


def case_accept_backoff():
    """The exporter out of descriptors: accept fails, the listener rests
    (one warning), and once descriptors are free again a waiting client is
    answered."""
    t = Target(preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a block")
    h = t.handle(0)
    hog = t.ask("hog")
    check(hog.startswith("hog "), f"the exporter took every free descriptor ({hog})")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(HANG_S)
    s.connect(t.socket_name())
    wait_until(lambda: "accepting a connection failed" in t.stderr(), "the exporter says accept failed")
    check(t.ask("unhog") == "ok", "descriptors free again")
    s.sendall(WIRE_REQUEST.pack(REQUEST_MAGIC, WIRE_VERSION, 5, 0, 7, 0, 0, 0))
    data = b""
    try:
        while len(data) < WIRE_REPLY.size:
            chunk = s.recv(WIRE_REPLY.size - len(data))
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    ok = len(data) == WIRE_REPLY.size and WIRE_REPLY.unpack(data)[0] == REPLY_MAGIC and WIRE_REPLY.unpack(data)[3] == 7
    check(ok, f"the waiting client is answered once descriptors are free ({data!r})")
    s.close()
    check(t.stderr().count("accepting a connection failed") == 1, "one warning, not one per failure")
    imp = Importer()
    check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41) and imp.close() == CUDA_SUCCESS,
          "an importer opens, reads and closes")
    imp.quit()
    t.quit()


def squatter(name, ready_w):
    """In a forked child: becomes uid 65534, binds `name`, answers every
    request with a header that says success (as a sleep that was done)."""
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(name)
        srv.listen(16)
    except OSError as e:
        os.write(ready_w, f"no {e}\n".encode())
        os._exit(0)
    os.write(ready_w, b"yes\n")
    while True:
        conn, _ = srv.accept()
        try:
            conn.settimeout(5)
            req = conn.recv(64)
            seq = WIRE_REQUEST.unpack(req[:WIRE_REQUEST.size])[4] if len(req) >= WIRE_REQUEST.size else 1
            conn.sendall(WIRE_REPLY.pack(REPLY_MAGIC, 0, 0, seq & 0xFFFFFFFF, 0, 0))
        except OSError:
            pass
        conn.close()


def start_squatter(name):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            squatter(name, w)
        finally:
            os._exit(0)
    os.close(w)
    wait_readable(r, "the squatter")
    said = os.read(r, 256).decode().strip()
    os.close(r)
    return pid, said


def case_squat():
    """Another uid binds the exporter's socket name before its first pool.
    The exporter's cuIpcGetMemHandle fails with one warning naming the
    squatter; pagefast-ctl refuses to talk to it (exit 3, naming it) rather
    than printing its answers; an importer given a handle that names the
    squatted process refuses the socket with a warning naming it."""
    if os.geteuid() != 0:
        print("skip: not root, so no process of another uid can be made to hold the name")
        sys.exit(SKIP)
    t = Target()
    pid, said = start_squatter(t.socket_name())
    if said != "yes":
        print(f"skip: a child cannot become uid 65534 and bind the name ({said})")
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        t.quit()
        sys.exit(SKIP)
    try:
        check(t.ask(f"alloc 0 {MiB} 41") == "ok", "the victim allocates (its pool starts)")
        first, second = t.ask("handle 0"), t.ask("handle 0")
        check(first.startswith("error") and second.startswith("error"), f"its exports fail ({first}, {second})")
        err = t.stderr()
        check(f"uid 65534, pid {pid}" in err, f"the warning names the squatter ({err[-500:]})")
        check(err.count("cannot listen") == 1, f"one warning, not one per export ({err.count('cannot listen')})")
        for args in [("sleep", "--keep"), ("status",)]:
            r = ctl(*args, str(t.pid))
            check(r.returncode == 3 and "done" not in r.stdout and "asleep" not in r.stdout,
                  f"pagefast-ctl {' '.join(args)} takes no answer from the squatter (rc {r.returncode}, {r.stdout!r})")
            check(f"uid 65534, pid {pid}" in r.stderr, f"... and names it ({r.stderr.strip()})")
        # An importer given a handle that names the squatted process.
        other = Target()
        check(other.ask(f"alloc 0 {MiB} 41") == "ok", "another exporter")
        h = other.handle(0)
        forged = forge(h, pid=t.pid, start_time=start_ticks(t.pid), pidns=os.stat(f"/proc/{t.pid}/ns/pid").st_ino)
        imp = Importer()
        rc = imp.open(forged)
        check(rc == CUDA_ERROR_INVALID_VALUE, f"the importer refuses the squatter's socket (rc {rc})")
        check(f"uid 65534, pid {pid}" in imp.stderr(), f"... with a warning naming it ({imp.stderr()[-300:]})")
        check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41) and imp.close() == CUDA_SUCCESS,
              "the real exporter's handle opens")
        imp.quit()
        other.quit()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    t.quit()


def case_dir_rules():
    """PAGEFAST_IPC_DIR that others may write to, or that is not the
    user's: one warning, and the socket goes in the abstract namespace
    (importers with the same setting find it there); a private directory
    is used."""
    dirs = []
    loose = tempfile.mkdtemp()
    os.chmod(loose, 0o777)
    dirs.append(("mode 0777", loose, "may be written by others"))
    if os.geteuid() == 0:
        foreign = tempfile.mkdtemp()
        os.chown(foreign, 65534, 65534)
        dirs.append(("another uid's", foreign, "belongs to uid 65534"))
    else:
        print("not root: the directory of another uid is not tried")
    for label, d, why in dirs:
        env = {"PAGEFAST_IPC_DIR": d}
        t = Target(env)
        check(t.ask(f"alloc 0 {MiB} 41") == "ok", f"[{label}] a block")
        h = t.handle(0)
        check(os.listdir(d) == [], f"[{label}] no socket file in the directory ({os.listdir(d)})")
        err = t.stderr()
        check(err.count("PAGEFAST_IPC_DIR") == 1 and why in err and "abstract namespace" in err,
              f"[{label}] one warning that says why ({err[-400:]})")
        imp = Importer(env)
        check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41) and imp.close() == CUDA_SUCCESS,
              f"[{label}] an importer with the same setting opens it")
        r = ctl("status", str(t.pid))
        check(r.returncode == 0 and ": awake" in r.stdout, f"[{label}] pagefast-ctl reaches it ({r.stdout})")
        imp.quit()
        t.quit()
        os.rmdir(d)
    private = tempfile.mkdtemp()  # 0700, this user's
    t = Target({"PAGEFAST_IPC_DIR": private})
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "[private] a block")
    t.handle(0)
    check(len(os.listdir(private)) == 1, f"[private] the socket file is in the directory ({os.listdir(private)})")
    check("PAGEFAST_IPC_DIR" not in t.stderr(), "[private] no warning")
    t.quit()
    check(os.listdir(private) == [], "[private] removed at exit")
    os.rmdir(private)


def case_fork_exit():
    """With PAGEFAST_IPC_DIR, a forked child that calls exit() leaves the
    parent's socket file alone: importers still reach the parent. The fork
    handler tells IPC of the fork in the child only: the parent's socket
    thread and background thread (started by a pagefast-ctl wake before
    the forks) still answer after several children came and went."""
    d = tempfile.mkdtemp()
    env = {"PAGEFAST_IPC_DIR": d}
    t = Target(env)
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a block")
    h = t.handle(0)
    before = os.listdir(d)
    check(len(before) == 1, f"the socket file ({before})")
    def ctl_here(*args):  # pagefast-ctl looks for the socket where the target made it
        return subprocess.run([paths()["ctl"], *args], capture_output=True, text=True, timeout=HANG_S,
                              env=dict(os.environ, **env))
    r = ctl_here("wake", str(t.pid))
    check(r.returncode == 0 and "done" in r.stdout, f"pagefast-ctl wake before the forks ({r.stdout})")
    for i in range(3):
        check(t.ask("fork-exit") == "child exit=0", f"forked child {i} exits")
    check(os.listdir(d) == before, f"the parent's socket file is still there ({os.listdir(d)})")
    imp = Importer(env)
    check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41) and imp.close() == CUDA_SUCCESS,
          "an importer still opens the parent's block")
    r = ctl_here("status", str(t.pid))
    check(r.returncode == 0 and ": awake" in r.stdout, f"pagefast-ctl still reaches the parent ({r.stdout})")
    r = ctl_here("wake", str(t.pid))
    check(r.returncode == 0 and "done" in r.stdout, f"its background thread still answers a wake ({r.stdout})")
    imp.quit()
    t.quit()
    check(os.listdir(d) == [], "the parent removes it at its own exit")
    os.rmdir(d)


def case_sleep():
    """Sleep and wake with an importer (docs/IPC.md "Sleep and wake"): the
    chunks it maps stay resident and shared, sleep answers 1 and says so;
    after wake it sees the exporter's writes and they see its; a block
    exported before the sleep (not opened then) opens after the wake with
    its bytes, and the exporter's handle for it is the same; an importer's
    own sleep answers 1 (its imports stay mapped)."""
    env = {"PAGEFAST_CONF": "chunk_size:2M"}
    t, imp, imp2 = Target(env), Importer(env), Importer(env)
    check(t.ask(f"alloc 0 {3 * MiB} 41") == "ok" and t.ask(f"alloc 1 {3 * MiB // 2} 42") == "ok", "blocks A and B")
    a, b = t.handle(0), t.handle(1)
    check(imp.open(a) == CUDA_SUCCESS and imp.reads(0, 3 * MiB, 0x41), "the importer opens A")
    check(t.ask("sleep 1") == "sleep 1", "sleep with keep answers 1: A's memory stays resident")
    check("mapped by another process through CUDA IPC" in t.stderr(), f"the exporter says so ({t.stderr()[-400:]})")
    check(imp.reads(0, 3 * MiB, 0x41), "A reads its bytes while the exporter sleeps")
    rc = imp2.open(b)
    check(rc != CUDA_SUCCESS, f"B, whose memory sleeps, does not open during the sleep (rc {rc})")
    check("asleep" in imp2.stderr(), f"... and the importer says why ({imp2.stderr()[-300:]})")
    check(t.ask("wake") == "wake 0", "wake")
    check(t.ask("fill 0 51") == "ok" and imp.reads(0, 3 * MiB, 0x51), "after wake the importer sees the exporter's writes")
    check(imp.write(0, 3 * MiB, 0x61) == CUDA_SUCCESS and t.ask("check 0 61") == "check 1",
          "and the exporter sees the importer's")
    check(t.handle(1) == b, "B's handle is the same after the wake")
    rc = imp2.open(b)
    check(rc == CUDA_SUCCESS and imp2.reads(0, 3 * MiB // 2, 0x42), f"B opens after the wake with its bytes (rc {rc})")
    check(t.ask("fill 1 52") == "ok" and imp2.reads(0, 3 * MiB // 2, 0x52), "and is the exporter's B")
    # Without keep: what importers map is not discarded either.
    check(t.ask("sleep 0") == "sleep 1" and t.ask("wake") == "wake 0", "sleep without keep answers 1, wake 0")
    check(t.ask("check 0 61") == "check 1" and imp.reads(0, 3 * MiB, 0x61), "A kept its bytes")
    check(t.ask("check 1 52") == "check 1" and imp2.reads(0, 3 * MiB // 2, 0x52), "B kept its bytes")
    r = ctl("sleep", "--keep", str(t.pid))
    check(r.returncode == 0 and "stays resident" in r.stdout, f"pagefast-ctl sleep says what stayed ({r.stdout})")
    r = ctl("wake", str(t.pid))
    check(r.returncode == 0 and "done" in r.stdout, f"pagefast-ctl wake ({r.stdout})")
    # The importer's own sleep: its imports stay mapped.
    rc, _, answer, _ = imp.call("S", value=1)
    check(rc == CUDA_SUCCESS and answer == 1, f"the importer's sleep answers 1 ({rc}, {answer})")
    check("stay mapped" in imp.stderr(), f"... and says why ({imp.stderr()[-300:]})")
    check(imp.call("K")[2] == 0 and imp.reads(0, 3 * MiB, 0x61), "the importer wakes; A is as it was")
    check(imp.close() == CUDA_SUCCESS and imp2.close() == CUDA_SUCCESS, "both close")
    settle(t)
    check(t.ask("sleep 1") == "sleep 0" and t.ask("wake") == "wake 0", "nothing shared any more: sleep answers 0")
    check(t.ask("check 0 61") == "check 1" and t.ask("check 1 52") == "check 1", "the exporter's blocks as they were")
    imp.quit()
    imp2.quit()
    t.quit()


def case_sleep_tag():
    """While one tag sleeps, blocks of another tag and blocks made outside
    any region open as usual (docs/IPC.md "Sleep and wake"); only the
    sleeping tag's blocks are refused, and they open again with their bytes
    after its wake."""
    env = {"PAGEFAST_CONF": "chunk_size:2M"}
    t, imp, imp2, imp3 = Target(env), Importer(env), Importer(env), Importer(env)
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "block 0, outside any region")
    check(t.ask("region kv") == "region 0" and t.ask(f"alloc 1 {MiB} 42") == "ok" and t.ask("end") == "end 0",
          "block 1, in the region kv")
    check(t.ask("region w") == "region 0" and t.ask(f"alloc 2 {MiB} 43") == "ok" and t.ask("end") == "end 0",
          "block 2, in the region w")
    a, b, c = t.handle(0), t.handle(1), t.handle(2)
    check(t.ask("sleep-tag kv 1") == "sleep 0", "the tag kv sleeps (keep)")
    rc = imp.open(a)
    check(rc == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), f"block 0 (no region) opens while kv sleeps (rc {rc})")
    rc = imp2.open(c)
    check(rc == CUDA_SUCCESS and imp2.reads(0, MiB, 0x43), f"block 2 (tag w) opens while kv sleeps (rc {rc})")
    rc = imp3.open(b)
    check(rc != CUDA_SUCCESS, f"block 1 (tag kv, asleep) does not open (rc {rc})")
    check("asleep" in imp3.stderr(), f"... and the importer says why ({imp3.stderr()[-300:]})")
    check(t.ask("wake-tag kv") == "wake 0", "kv wakes")
    rc = imp3.open(b)
    check(rc == CUDA_SUCCESS and imp3.reads(0, MiB, 0x42), f"block 1 opens after the wake with its bytes (rc {rc})")
    check(t.ask("fill 1 52") == "ok" and imp3.reads(0, MiB, 0x52), "and is the exporter's block 1")
    check(imp.close() == CUDA_SUCCESS and imp2.close() == CUDA_SUCCESS and imp3.close() == CUDA_SUCCESS, "all close")
    imp.quit()
    imp2.quit()
    imp3.quit()
    t.quit()


def case_sleep_tag_held():
    """While a tag's sleep is under way (held in its sync by a fake kernel),
    the socket thread opens a block made outside any region at once, and
    refuses the tag's block; the sleep then ends as usual."""
    env = {"PAGEFAST_CONF": "chunk_size:2M"}
    t, imp, imp2 = Target(env), Importer(env), Importer(env)
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "block 0, outside any region")
    check(t.ask("region kv") == "region 0" and t.ask(f"alloc 1 {MiB} 42") == "ok" and t.ask("end") == "end 0",
          "block 1, in the region kv")
    a, b = t.handle(0), t.handle(1)
    check(t.ask("gate") == "ok", "a kernel holds the device until the test lets it go")
    sleeper = subprocess.Popen([paths()["ctl"], "sleep", "--keep", "--tag", "kv", str(t.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(t.ask("wait-asleep") == "asleep 1", "the sleep of kv began (and waits for the kernel)")
    rc = imp.open(a)
    check(rc == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), f"block 0 opens meanwhile (rc {rc})")
    rc = imp2.open(b)
    check(rc != CUDA_SUCCESS, f"block 1, whose sleep is under way, does not open (rc {rc})")
    check(t.ask("open-gate") == "ok", "the kernel finishes")
    out, err = reap(sleeper)
    check(sleeper.returncode == 0 and "sleep tag kv done" in out, f"the sleep is done ({out} {err})")
    check(t.ask("wake-tag kv") == "wake 0" and t.ask("check 1 42") == "check 1", "wake; block 1 as it was")
    check(imp.close() == CUDA_SUCCESS, "block 0 closes")
    imp.quit()
    imp2.quit()
    t.quit()


def case_resleep():
    """A chunk kept resident for an importer goes at the next sleep once the
    importer closed (docs/IPC.md "Sleep and wake"): while it holds the block
    a sleep again answers 1 and keeps it; after its close the sleep again
    answers 0 and the device memory is free; wake brings the bytes back."""
    env = {"PAGEFAST_CONF": "chunk_size:2M"}
    t, imp = Target(env), Importer(env)
    check(t.ask(f"alloc 0 {3 * MiB} 41") == "ok", "a block of 3 MiB")
    h = t.handle(0)
    check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, 3 * MiB, 0x41), "the importer opens it")
    check(t.ask("sleep 1") == "sleep 1", "sleep (keep) answers 1: the block's chunks stay for the importer")
    held = int(t.ask("device-free").split()[1])
    check(t.ask("sleep 1") == "sleep 1", "a sleep again while the importer holds it answers 1")
    check(int(t.ask("device-free").split()[1]) == held, "and keeps the chunks")
    check(imp.close() == CUDA_SUCCESS, "the importer closes it")
    # The close reaches the exporter's socket thread on its own: sleep
    # again until the hold is gone (the guard fails only on a hang).
    wait_until(lambda: t.ask("sleep 1") == "sleep 0", "a sleep again answers 0 once no importer holds it")
    free = int(t.ask("device-free").split()[1])
    check(free >= held + 3 * MiB, f"and the chunks went ({held} -> {free} bytes free)")
    check(t.ask("wake") == "wake 0" and t.ask("check 0 41") == "check 1", "wake; the block as it was")
    check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, 3 * MiB, 0x41), "the importer opens it again")
    check(imp.close() == CUDA_SUCCESS, "and closes it")
    imp.quit()
    t.quit()


def case_sleep_copy():
    """A keep sleep of the program's own VMM memory held inside its copy (the
    fake driver holds the copy until the test lets it go) never delays the
    socket: pagefast-ctl status answers (its figures read without the
    sleep's lock), and another process opens a block that is not asleep."""
    env = {"PAGEFAST_CONF": "chunk_size:2M"}
    t, imp = Target(env), Importer(env)
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a pool block outside any region")
    h = t.handle(0)
    check(t.ask("region kv") == "region 0" and t.ask(f"vmm {2 * MiB} 44") == "ok" and t.ask("end") == "end 0",
          "2 MiB of the program's own VMM memory in the region kv")
    check(t.ask("copy-gate") == "ok", "the next copy to host waits until the test lets it go")
    sleeper = subprocess.Popen([paths()["ctl"], "sleep", "--keep", "--tag", "kv", str(t.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(t.ask("wait-copy") == "copy waits", "the sleep of kv is inside its copy")
    try:
        r = ctl("status", str(t.pid))
        check(r.returncode == 0 and "kv" in r.stdout, f"pagefast-ctl status answers meanwhile ({r.stdout})")
    except subprocess.TimeoutExpired:
        check(False, "pagefast-ctl status answers while the copy is held")
    rc = imp.open(h)
    check(rc == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), f"another process opens the block meanwhile (rc {rc})")
    check(imp.close() == CUDA_SUCCESS, "and closes it")
    check(t.ask("open-copy-gate") == "ok", "the copy goes on")
    out, err = reap(sleeper)
    check(sleeper.returncode == 0 and "sleep tag kv done" in out and "resident" not in out,
          f"the sleep is done, all of it kept ({out} {err})")
    check(t.ask("wake-tag kv") == "wake 0" and t.ask("vmm-check 44") == "check 1", "wake; the memory as it was")
    imp.quit()
    t.quit()


def case_control_thread():
    """A sleep that blocks (a kernel still running) never delays IPC: while
    pagefast-ctl's sleep waits, pagefast-ctl status answers, another
    importer opens a held block, and an importer closes."""
    t, imp, imp2 = Target(), Importer(), Importer()
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a block")
    h = t.handle(0)
    check(imp.open(h) == CUDA_SUCCESS, "the importer opens it")
    check(t.ask("gate") == "ok", "a kernel holds the device until the test lets it go")
    sleeper = subprocess.Popen([paths()["ctl"], "sleep", "--keep", str(t.pid)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    check(t.ask("wait-asleep") == "asleep 1", "the sleep began (and waits for the kernel)")
    try:
        r = ctl("status", str(t.pid))
        check(r.returncode == 0 and ": asleep" in r.stdout, f"status answers meanwhile ({r.stdout})")
    except subprocess.TimeoutExpired:
        check(False, "status answers while the sleep waits")
    rc = imp2.open(h)
    check(rc == CUDA_SUCCESS and imp2.reads(0, MiB, 0x41), f"another importer opens the held block meanwhile (rc {rc})")
    check(imp.close() == CUDA_SUCCESS and imp2.close() == CUDA_SUCCESS, "both close meanwhile")
    check(t.ask("open-gate") == "ok", "the kernel finishes")
    out, err = reap(sleeper)
    check(sleeper.returncode == 0 and "sleep done" in out, f"the sleep is done ({out} {err})")
    check(t.ask("wake") == "wake 0" and t.ask("check 0 41") == "check 1", "wake; the block as it was")
    imp.quit()
    imp2.quit()
    t.quit()


def driver_opens(imp):
    """The importer's calls of the (fake) driver's cuIpcOpenMemHandle(_v2)."""
    return sum(imp.call("N", handle=name.ljust(64, b"\0"))[2]
               for name in [b"cuIpcOpenMemHandle", b"cuIpcOpenMemHandle_v2"])


def case_forged():
    """Handles with forged fields (checksum made right) never open: sizes
    that wrap or exceed the block, another offset, device, export, flags,
    version or process; pagefast answers them without asking the driver.
    A handle whose checksum is wrong, or one of handle version 1 (an older
    pagefast's, FNV-1a), is not pagefast's: the driver is asked, and
    refuses it. The real handles still open. Both a block at the start of
    its chunk and a small one inside a granule (where the size 2^64-1 wraps
    the end of the block past zero)."""
    t, imp = Target(), Importer()
    check(t.ask(f"alloc 0 {MiB} 41") == "ok" and t.ask("alloc 1 1000 42") == "ok" and
          t.ask("alloc 2 1000 43") == "ok", "a 1 MiB block and two small ones")
    names = ["magic", "version", "flags", "device", "pid", "check", "start_time", "pidns", "export_id", "bytes",
             "offset"]
    for n, nbytes, byte in [(0, MiB, 0x41), (2, 1000, 0x43)]:
        h = t.handle(n)
        fields = dict(zip(names, HANDLE.unpack(h)))
        size, offset = fields["bytes"], fields["offset"]
        print(f"block {n}: {size} bytes at offset {offset} in its granule")
        variants = {
            "size 2^64-1": {"bytes": 2**64 - 1},
            "size 2^64-offset": {"bytes": 2**64 - offset} if offset else {"bytes": 2**64 - 4096},
            "size 2^63": {"bytes": 2**63},
            "size one byte more": {"bytes": size + 1},
            "size 1 GiB": {"bytes": 1 << 30},
            "offset 512 more": {"offset": offset + 512},
            "offset 2^64-1": {"offset": 2**64 - 1},
            "device 1": {"device": 1},
            "another export": {"export_id": fields["export_id"] + 1000},
            "flags 1": {"flags": 1},
            "version 1": {"version": 1},
            "version 3": {"version": 3},
            "pid 0": {"pid": 0},
        }
        check(fields["version"] == 2 and forge(h) == h, f"block {n}: handle version 2, its checksum as the test makes it")
        for label, change in variants.items():
            before = driver_opens(imp)
            rc = imp.open(forge(h, **change))
            check(rc == CUDA_ERROR_INVALID_VALUE and driver_opens(imp) == before,
                  f"block {n}, {label}: CUDA_ERROR_INVALID_VALUE, pagefast's answer (got {rc})")
            if rc == CUDA_SUCCESS:
                imp.close()
        others = {"checksum wrong": h[:20] + bytes([h[20] ^ 1]) + h[21:],
                  "version 1 with its FNV-1a checksum": forge(h, checksum=fnv1a, version=1)}
        for label, handle in others.items():
            before = driver_opens(imp)
            rc = imp.open(handle)
            check(rc == CUDA_ERROR_INVALID_VALUE and driver_opens(imp) == before + 1,
                  f"block {n}, {label}: not pagefast's, the driver's answer (got {rc})")
            if rc == CUDA_SUCCESS:
                imp.close()
        check(imp.open(h) == CUDA_SUCCESS and imp.reads(0, nbytes, byte) and imp.close() == CUDA_SUCCESS,
              f"block {n}: the real handle opens, reads and closes")
    check(all(t.ask(f"check {n} {b}") == "check 1" for n, b in [(0, "41"), (1, "42"), (2, "43")]),
          "the exporter's blocks are untouched")
    imp.quit()
    t.quit()


def case_reused():
    """A get again of a live block answers its export as it is, and a block
    freed and made again at its address gets a new export: a new handle
    (the same on a get again), the old one opens nothing (no importer held
    it), the new one opens with the new block's bytes. Small blocks (a
    slab's) and a large one."""
    t, imp = Target(), Importer()
    for n, nbytes in [(0, 1000), (1, 3 * MiB)]:
        check(t.ask(f"alloc {n} {nbytes} 41") == "ok", f"block {n}, {nbytes} bytes")
        old = t.handle(n)
        check(t.handle(n) == old and t.handle(n) == old, f"block {n}: a get again gives the same handle")
        where = t.ask(f"addr {n}")
        # Freed and made again until the block lands where the exported one
        # was: the pool hands a freed block out again once its quarantine
        # batch (64 frees) was retired.
        made = 0
        while made < 1000:
            made += 1
            if t.ask(f"free {n}") != "free CUDA_SUCCESS" or t.ask(f"alloc {n} {nbytes} 42") != "ok" or \
                    t.ask(f"addr {n}") == where:
                break
        check(t.ask(f"addr {n}") == where, f"block {n} made again at its address ({where}, {made} frees)")
        new = t.handle(n)
        check(new != old and new[40:48] != old[40:48], f"block {n}: another export, another handle")
        check(t.handle(n) == new, f"block {n}: the new handle again on a get again")
        rc = imp.open(old)
        check(rc == CUDA_ERROR_INVALID_VALUE, f"block {n}: the old handle opens nothing (rc {rc})")
        check(imp.open(new) == CUDA_SUCCESS and imp.reads(0, nbytes, 0x42) and imp.close() == CUDA_SUCCESS,
              f"block {n}: the new handle opens with the new bytes")
    imp.quit()
    t.quit()


def read_replies(s, count):
    """`count` reply headers from socket s (until the exporter stops
    answering): their sequence numbers."""
    seqs, data = [], b""
    try:
        while len(seqs) < count:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
            while len(data) >= WIRE_REPLY.size:
                head = WIRE_REPLY.unpack(data[:WIRE_REPLY.size])
                data = data[WIRE_REPLY.size:]
                seqs.append(head[3] if head[0] == REPLY_MAGIC else -1)
    except socket.timeout:
        pass
    return seqs


def case_requests_split():
    """The exporter reads what a connection sent as it comes: a request in
    pieces is served once whole, several in one write are each served, in
    order, and a piece left over waits for the rest."""
    t = Target()
    check(t.ask(f"alloc 0 {MiB} 41") == "ok", "a pool (and with it the socket)")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(HANG_S)
    s.connect(t.socket_name())
    status = [WIRE_REQUEST.pack(REQUEST_MAGIC, WIRE_VERSION, 5, 0, seq, 0, 0, 0) for seq in range(1, 13)]
    for piece in (status[0][:7], status[0][7:30], status[0][30:]):
        s.sendall(piece)
        time.sleep(0.05)  # each piece on its own
    check(read_replies(s, 1) == [1], "a request sent in three pieces is answered once, when whole")
    s.sendall(b"".join(status[1:11]))  # more than the exporter reads at once
    check(read_replies(s, 10) == list(range(2, 12)), "ten requests in one write: ten answers, in order")
    s.sendall(status[11] + status[0][:20])
    check(read_replies(s, 1) == [12], "a request and part of the next: the whole one answered")
    s.sendall(status[0][20:])
    check(read_replies(s, 1) == [1], "... and the next once its rest came")
    s.close()
    imp = Importer()
    check(imp.open(t.handle(0)) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41) and imp.close() == CUDA_SUCCESS,
          "an importer opens, reads and closes")
    imp.quit()
    t.quit()


def main():
    return casekit.main(globals())


if __name__ == "__main__":
    sys.exit(main())
