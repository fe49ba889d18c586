"""tests/tools/python_region_child.py: what the tests of regions from
Python (test_python_region.py, test_tms_compat.py) share. The parent side,
run_cases, starts one child Python per case, preloaded with libpagefast.so
over the fake driver; the child side, Cuda, drives the driver through
ctypes as CUDA Python libraries do (the dlsym door) and counts the fake's
calls.
"""
import ctypes
import os
import subprocess
import sys

# Functions the library copies device memory to the host with at sleep.
_TO_HOST = ("cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2")


class Cuda:
    """Device 0's primary context made current, and the calls the tests make."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ok(self.lib.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self.ok(self.lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.ok(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), device), "cuDevicePrimaryCtxRetain")
        self.current()
        self.lib.fakecuda_call_count.argtypes = [ctypes.c_char_p]

    def current(self):
        """Makes the context current on the calling thread (each thread needs it)."""
        self.ok(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def ok(r, what):
        if r != 0:
            raise SystemExit("FAIL %s -> %d" % (what, r))

    def try_alloc(self, size):
        """(answer, pointer) of cuMemAlloc_v2."""
        ptr = ctypes.c_uint64()
        r = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
        return r, ptr.value

    def alloc(self, size, byte):
        """A block of `size` bytes, every byte `byte`."""
        r, ptr = self.try_alloc(size)
        self.ok(r, "cuMemAlloc_v2 of %d bytes" % size)
        self.fill(ptr, byte, size)
        return ptr

    def fill(self, ptr, byte, size):
        self.ok(self.lib.cuMemsetD8_v2(ctypes.c_uint64(ptr), ctypes.c_ubyte(byte), ctypes.c_size_t(size)),
                "cuMemsetD8_v2")

    def read(self, ptr, size):
        """(answer, bytes) of a copy to the host: not 0 when the memory is not mapped."""
        host = ctypes.create_string_buffer(size)
        r = self.lib.cuMemcpyDtoH_v2(host, ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        return r, host.raw

    def holds(self, ptr, byte, size):
        """Whether the block is mapped and every byte is `byte`."""
        r, data = self.read(ptr, size)
        return r == 0 and data == bytes([byte]) * size

    def mapped(self, ptr):
        return self.read(ptr, 1)[0] == 0

    def free(self, ptr):
        return self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def free_bytes(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.ok(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value

    def driver_free_bytes(self, device=0):
        """The memory really free on the fake device (pagefast's idle memory
        not counted as free, as cuMemGetInfo counts it)."""
        f = self.lib.fakecuda_free_bytes
        f.restype = ctypes.c_ulonglong
        return f(device)

    def reset_counts(self):
        self.lib.fakecuda_reset_counts()

    def host_copies(self):
        """Device-to-host copies since reset_counts (the library's, and the test's own)."""
        return sum(max(0, self.lib.fakecuda_call_count(name.encode())) for name in _TO_HOST)


def expect(condition, what):
    if not condition:
        raise SystemExit("FAIL " + what)


def expect_raises(kind, call, says, what):
    """call() raises `kind` whose message contains `says`."""
    try:
        call()
    except kind as e:
        expect(says in str(e), "%s: %r does not say %r" % (what, str(e), says))
        return
    raise SystemExit("FAIL %s: no %s" % (what, kind.__name__))


def _text(output):
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def run_cases(child, cases, extra_path=()):
    """Runs `child` (Python source; the case name is argv[1]) once per case
    (name, preload) and prints PASS/FAIL per case; a case passes when the
    child exits 0 and prints "ok NAME". Returns the exit status."""
    build = sys.argv[sys.argv.index("--build") + 1]
    source = sys.argv[sys.argv.index("--source") + 1]
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PAGEFAST") or k.startswith("FAKECUDA") or k == "LD_PRELOAD")}
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(list(extra_path) + [os.path.join(source, "python"), here])
    env["LD_LIBRARY_PATH"] = os.path.join(build, "tests", "fakecuda")
    env["FAKECUDA_TOTAL_MEM"] = "1G"
    library = os.path.join(build, "interpose", "libpagefast.so")
    failures = []
    for name, preload in cases:
        case_env = dict(env, LD_PRELOAD=library) if preload else env
        try:
            r = subprocess.run([sys.executable, "-c", child, name], env=case_env, capture_output=True, text=True,
                               timeout=240)  # a hang guard
            rc, out, err = r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "hung", _text(e.stdout), _text(e.stderr)
        passed = rc == 0 and ("ok " + name) in out.split("\n")
        print(("PASS " if passed else "FAIL ") + name)
        if not passed:
            print("  rc %s\n%s\n%s" % (rc, out[-3000:], err[-3000:]))
            failures.append(name)
    return 1 if failures else 0
