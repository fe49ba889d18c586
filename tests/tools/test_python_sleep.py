#!/usr/bin/env python3
"""tests/tools/test_python_sleep.py: the Python sleep API (pagefast.sleep,
pagefast.wake, pagefast.asleep; python/pagefast/_sleep.py) in a Python
process preloaded with libpagefast.so over the fake driver, which it
drives through ctypes as CUDA Python libraries do (the dlsym door): the
contents come back at the same address, an allocation while asleep fails
when asked not to wait, and the errors say why (no library, no pool).

Usage: test_python_sleep.py --build BUILD --source SOURCE
"""
import os
import subprocess
import sys

CHILD = r"""
import ctypes, sys
import pagefast

what = sys.argv[1]
if what == "unloaded":
    assert not pagefast.loaded()
    try:
        pagefast.sleep(keep=True)
    except pagefast.Error as e:
        print("error:", e)
    sys.exit(0)

assert pagefast.loaded(), "the preloaded library is not found"
cuda = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0:
        raise SystemExit("FAIL %s -> %d" % (what, r))
ok(cuda.cuInit(0), "cuInit")
if what == "nopool":
    try:
        pagefast.sleep(keep=True)
        print("FAIL slept without a pool")
    except pagefast.Error as e:
        print("error:", e)
    sys.exit(0)
device = ctypes.c_int()
ok(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
size = 40 << 20
ptr = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc_v2")
ok(cuda.cuMemsetD8_v2(ctypes.c_uint64(ptr.value), ctypes.c_ubyte(0x5A), ctypes.c_size_t(size)), "cuMemsetD8_v2")

def contents():
    host = ctypes.create_string_buffer(size)
    ok(cuda.cuMemcpyDtoH_v2(host, ctypes.c_uint64(ptr.value), ctypes.c_size_t(size)), "cuMemcpyDtoH_v2")
    return host.raw

def free_bytes():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
    return free.value

assert pagefast.is_asleep() == 0
# One default with pagefast-ctl: the whole process's sleep needs keep.
for refused in (pagefast.sleep, lambda: pagefast.asleep().__enter__()):
    try:
        refused()
        raise SystemExit("FAIL a sleep of everything without keep was not refused")
    except ValueError as e:
        assert "keep=True" in str(e) and "keep=False" in str(e), e
assert pagefast.is_asleep() == 0, "a refused sleep slept"
print("a sleep of everything without keep is refused, as pagefast-ctl refuses it")
before = free_bytes()
with pagefast.asleep(keep=True) as complete:
    assert complete is True, complete
    assert pagefast.is_asleep() == 1
    freed = free_bytes() - before
    print("asleep; the driver got back %d MiB" % (freed >> 20))
    assert freed >= size, freed
assert pagefast.is_asleep() == 0
assert contents() == b"\x5a" * size, "contents differ after wake"
print("contents the same at the same address after wake")

# Not waiting: an allocation while asleep fails at once.
assert pagefast.sleep(keep=False, wait=False) is True
other = ctypes.c_uint64()
r = cuda.cuMemAlloc_v2(ctypes.byref(other), ctypes.c_size_t(1 << 20))
assert r == 2, "an allocation while asleep answered %d, not out of memory" % r
# One kind of answer: wake() says True as sleep() does when all was done.
assert pagefast.wake() is True
assert pagefast.wake() is True  # awake already: nothing to do
ok(cuda.cuMemsetD8_v2(ctypes.c_uint64(ptr.value), ctypes.c_ubyte(0x11), ctypes.c_size_t(size)), "memset after wake")
assert contents() == b"\x11" * size

# The block's exception passes through, and the pool wakes all the same.
try:
    with pagefast.asleep(keep=True):
        raise KeyError("inside")
except KeyError:
    pass
assert pagefast.is_asleep() == 0
ok(cuda.cuMemFree_v2(ctypes.c_uint64(ptr.value)), "cuMemFree_v2")
print("ok python sleep")
"""


def main():
    build = sys.argv[sys.argv.index("--build") + 1]
    source = sys.argv[sys.argv.index("--source") + 1]
    base = {k: v for k, v in os.environ.items()
            if not (k.startswith("PAGEFAST") or k.startswith("FAKECUDA") or k == "LD_PRELOAD")}
    base["PYTHONPATH"] = os.path.join(source, "python")
    base["LD_LIBRARY_PATH"] = os.path.join(build, "tests", "fakecuda")
    base["FAKECUDA_TOTAL_MEM"] = "1G"
    lib = os.path.join(build, "interpose", "libpagefast.so")
    failures = []

    def child(what, preload=True):
        env = dict(base)
        if preload:
            env["LD_PRELOAD"] = lib
        return subprocess.run([sys.executable, "-c", CHILD, what], env=env, capture_output=True, text=True,
                              timeout=300)  # a hang guard

    def check(ok, what):
        print(("PASS " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    r = child("main")
    check(r.returncode == 0 and "ok python sleep" in r.stdout,
          "sleep, wake and asleep() keep the contents (rc %d)\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-1500:]))
    r = child("unloaded", preload=False)
    check(r.returncode == 0 and "not loaded in this process" in r.stdout,
          "without the library: Error naming how to load it (%s %s)" % (r.stdout, r.stderr[-800:]))
    r = child("nopool")
    check(r.returncode == 0 and "could not sleep" in r.stdout and "nothing changed" in r.stdout,
          "before any allocation: Error, nothing changed (%s %s)" % (r.stdout, r.stderr[-800:]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
