#!/usr/bin/env python3
"""tests/tools/test_python_region.py: regions and sleep by tag from Python
(pagefast.region, pagefast.sleep/wake/is_asleep/asleep with a tag;
python/pagefast/_region.py, _sleep.py) in a Python process preloaded with
libpagefast.so over the fake driver, driven through ctypes. Memory whose
copy to the host fails is asleep (its virtual addresses are reserved, not
mapped); the fake's count of device-to-host copies says whether a sleep
kept the contents.

Usage: test_python_region.py --build BUILD --source SOURCE
"""
import sys

from python_region_child import run_cases

CHILD = r"""
import os, sys, threading
import pagefast
from python_region_child import Cuda, expect, expect_raises

case = sys.argv[1]
MB = 1 << 20

if case == "unloaded":
    expect(not pagefast.loaded(), "the library is not loaded")
    expect_raises(pagefast.Error, lambda: pagefast.region("kv").__enter__(), "not loaded", "region")
    expect_raises(pagefast.Error, pagefast.current_region, "not loaded", "current_region")
    expect_raises(pagefast.Error, lambda: pagefast.sleep("kv"), "not loaded", "sleep(tag)")
    print("ok unloaded")
    sys.exit(0)

cuda = Cuda()

def sleep_copies(*args, **kwargs):
    # (what sleep answered, host copies it made)
    cuda.reset_counts()
    answer = pagefast.sleep(*args, **kwargs)
    return answer, cuda.host_copies()

if case == "policy":
    with pagefast.region("weights") as r:
        expect(pagefast.current_region() == "weights", "inside the region")
        expect(r.tag == "weights" and r.keep is True, "the region object says its tag and keep")
        weights = cuda.alloc(8 * MB, 0x5A)
    with pagefast.region("kv", keep=False):
        kv = cuda.alloc(16 * MB, 0x22)
    expect(pagefast.current_region() is None, "outside any region")
    plain = cuda.alloc(4 * MB, 0x11)
    expect(pagefast.is_asleep("kv") is False and pagefast.is_asleep() == 0, "awake at first")

    before = cuda.free_bytes()
    answer, copies = sleep_copies("kv")
    expect(answer is True, "sleep('kv') answered %r" % answer)
    expect(copies == 0, "a discard region's sleep copied %d times to the host" % copies)
    expect(cuda.free_bytes() - before >= 16 * MB, "the driver got the tag's memory back")
    expect(pagefast.is_asleep("kv") is True and pagefast.is_asleep("weights") is False, "only 'kv' sleeps")
    expect(not cuda.mapped(kv), "the tag's memory is unmapped while asleep")
    expect(cuda.holds(weights, 0x5A, 8 * MB), "another tag's memory is untouched")
    expect(cuda.holds(plain, 0x11, 4 * MB), "memory outside any region is untouched")
    pagefast.wake("kv")
    pagefast.wake("kv")  # awake already: nothing to do
    expect(pagefast.is_asleep("kv") is False and cuda.mapped(kv), "mapped again at the same address")

    answer, copies = sleep_copies("weights")
    expect(answer is True and copies > 0, "a keep region's sleep copies to the host (%d)" % copies)
    expect(not cuda.mapped(weights) and cuda.mapped(kv), "only 'weights' sleeps")
    pagefast.wake("weights")
    expect(cuda.holds(weights, 0x5A, 8 * MB), "kept contents back at the same address")

    # keep=True / keep=False override what the regions said.
    cuda.fill(kv, 0x33, 16 * MB)
    answer, copies = sleep_copies("kv", keep=True)
    expect(copies > 0, "keep=True copies a discard region's memory")
    pagefast.wake("kv")
    expect(cuda.holds(kv, 0x33, 16 * MB), "keep=True kept a discard region's contents")
    answer, copies = sleep_copies("weights", keep=False)
    expect(copies == 0, "keep=False copied a keep region's memory (%d)" % copies)
    pagefast.wake("weights")
    expect(cuda.mapped(weights), "discarded memory mapped again")

    # asleep(tag) as a block; a free while asleep is served.
    cuda.fill(weights, 0x44, 8 * MB)
    with pagefast.asleep("weights") as complete:
        expect(complete is True and pagefast.is_asleep("weights"), "asleep inside the block")
        expect(cuda.holds(plain, 0x11, 4 * MB), "untagged memory readable in the block")
    expect(not pagefast.is_asleep("weights") and cuda.holds(weights, 0x44, 8 * MB), "awake after the block")
    pagefast.sleep("kv")
    expect(cuda.free(kv) == 0, "freeing asleep memory is served")
    pagefast.wake("kv")
    # The calls without a tag keep their meaning: everything, contents kept.
    expect(pagefast.sleep(keep=True) is True, "sleep(keep=True) without a tag")
    expect(pagefast.is_asleep("kv") and pagefast.is_asleep("weights") and not cuda.mapped(plain),
           "sleep() puts everything to sleep, tagged or not")
    expect(pagefast.is_asleep() >= 1, "is_asleep() counts the pools asleep: %d" % pagefast.is_asleep())
    pagefast.wake()
    expect(cuda.holds(plain, 0x11, 4 * MB) and cuda.holds(weights, 0x44, 8 * MB), "sleep() kept everything")
    expect(pagefast.sleep(True) is True, "sleep(True): a bool first is keep")
    pagefast.wake()
    expect(cuda.holds(weights, 0x44, 8 * MB), "sleep(True) kept the contents")
    print("ok policy")

elif case == "errors":
    with pagefast.region("known"):
        cuda.alloc(MB, 1)
    # An unknown tag raises, and the library logs nothing beside it.
    import tempfile
    saved, said = os.dup(2), tempfile.TemporaryFile()
    os.dup2(said.fileno(), 2)
    for call, what in ((lambda: pagefast.sleep("never"), "sleep"), (lambda: pagefast.wake("never"), "wake"),
                       (lambda: pagefast.is_asleep("never"), "is_asleep"),
                       (lambda: pagefast.asleep("never").__enter__(), "asleep")):
        expect_raises(pagefast.Error, call, "no region ever had the tag 'never'", what + " of an unknown tag")
    os.dup2(saved, 2)
    said.seek(0)
    logged = said.read().decode()
    expect("never" not in logged, "raised without a warning beside it (%r)" % logged)
    expect(pagefast.wake("known") is True, "wake(tag) answers True, as sleep does")
    for bad in ("", "a b", "x" * 64, "t\u00e9", None, 3):
        expect_raises(ValueError, lambda: pagefast.region(bad), "1 to 63 characters", "region(%r)" % (bad,))
    expect(pagefast.current_region() is None, "a refused region leaves none open")
    opened = []
    try:
        for depth in range(9):
            r = pagefast.region("deep%d" % depth)
            r.__enter__()
            opened.append(r)
        raise SystemExit("FAIL 9 nested regions opened")
    except pagefast.Error as e:
        expect(len(opened) == 8 and "8 regions open" in str(e), "the 9th nested region is refused: %s" % e)
    expect(pagefast.current_region() == "deep7", "a refused region leaves the one around it open")
    for r in reversed(opened):
        r.__exit__(None, None, None)
    expect(pagefast.current_region() is None, "all closed")
    print("ok errors")

elif case == "nested":
    with pagefast.region("outer"):
        outer = cuda.alloc(2 * MB, 0x01)
        with pagefast.region("inner", keep=False):
            expect(pagefast.current_region() == "inner", "the innermost tags")
            inner = cuda.alloc(2 * MB, 0x02)
        expect(pagefast.current_region() == "outer", "back in the outer region")
        outer2 = cuda.alloc(2 * MB, 0x03)
    pagefast.sleep("inner")
    expect(not cuda.mapped(inner), "the inner region's memory sleeps")
    expect(cuda.holds(outer, 1, 2 * MB) and cuda.holds(outer2, 3, 2 * MB), "the outer region's stays")
    pagefast.sleep("outer")
    expect(not cuda.mapped(outer) and not cuda.mapped(outer2), "the outer region's memory sleeps")
    pagefast.wake("outer")
    pagefast.wake("inner")
    expect(cuda.holds(outer, 1, 2 * MB) and cuda.holds(outer2, 3, 2 * MB), "kept")

    @pagefast.region("deco", keep=False)
    def allocate(depth):
        expect(pagefast.current_region() == "deco", "the decorated function runs in its region")
        if depth:
            return allocate(depth - 1)  # the decorator nests in itself
        return cuda.alloc(MB, 0x07)
    blocks = [allocate(2), allocate(0)]
    expect(pagefast.current_region() is None, "the decorator closes its region")
    pagefast.sleep("deco")
    expect(not any(cuda.mapped(b) for b in blocks), "the decorated function's memory sleeps")
    pagefast.wake("deco")
    try:
        with pagefast.region("raises"):
            raise KeyError("inside")
    except KeyError:
        pass
    expect(pagefast.current_region() is None, "a block that raises closes its region")
    print("ok nested")

elif case == "self":
    # Sleeping the tag of this thread's own open region, then allocating in
    # it: out of memory at once (the wake could only come from this thread).
    with pagefast.region("mine", keep=False):
        block = cuda.alloc(4 * MB, 0x11)
        expect(pagefast.sleep("mine") is True, "sleep of the thread's own region")
        r, _ = cuda.try_alloc(8 * MB)
        expect(r == 2, "an allocation in the thread's own asleep region answered %r, not out of memory" % r)
        pagefast.wake("mine")
        r, ptr = cuda.try_alloc(8 * MB)
        expect(r == 0, "an allocation after wake answered %r" % r)
        cuda.free(ptr)
    print("ok self")

elif case == "thread":
    # The worker steps when told (go) and says when it is done; each wait is
    # a hang guard only, and a worker that fails says so in seen["error"].
    go, done = threading.Event(), threading.Event()
    seen = {}
    def step():
        done.set()
        expect(go.wait(120), "the test never said to go on")
        go.clear()
    def worker():
        try:
            cuda.current()
            with pagefast.region("worker"):
                seen["tag"] = pagefast.current_region()
                seen["block"] = cuda.alloc(4 * MB, 0x66)
                step()
                seen["failed"] = cuda.try_alloc(MB)[0]   # asleep, and sleep said not to wait
                step()
                seen["served"] = cuda.try_alloc(MB)[0]   # awake again
                step()
                seen["waited"] = cuda.try_alloc(MB)[0]   # asleep: waits for wake
                seen["woken_first"] = seen.get("woken", False)
        except BaseException as e:
            seen["error"] = repr(e)
        done.set()
    def wait_worker():
        expect(done.wait(120) and "error" not in seen, "the worker: %r" % (seen,))
        done.clear()
    t = threading.Thread(target=worker, daemon=True)
    t.start()
    wait_worker()
    expect(seen["tag"] == "worker" and pagefast.current_region() is None, "a region is the opening thread's")
    plain = cuda.alloc(4 * MB, 0x11)   # untagged while the worker's region is open
    # A sleep while the tag's region is open on another thread goes ahead.
    expect(pagefast.sleep("worker", wait=False) is True, "sleep with the region open elsewhere")
    expect(not cuda.mapped(seen["block"]) and cuda.holds(plain, 0x11, 4 * MB), "only the worker's memory sleeps")
    go.set(); wait_worker()
    expect(seen["failed"] == 2, "an allocation in the asleep region answered %r, not out of memory" % seen["failed"])
    pagefast.wake("worker")
    go.set(); wait_worker()
    expect(seen["served"] == 0, "an allocation after wake answered %r" % seen["served"])
    pagefast.sleep("worker")
    go.set()
    seen["woken"] = True
    pagefast.wake("worker")
    t.join(120)
    expect(not t.is_alive() and "error" not in seen, "the waiting allocation came back after wake: %r" % (seen,))
    expect(seen["waited"] == 0 and seen["woken_first"], "it waited for wake (%r)" % (seen,))
    expect(cuda.holds(seen["block"], 0x66, 4 * MB), "the worker's memory kept")
    print("ok thread")
"""

CASES = [("policy", True), ("errors", True), ("nested", True), ("thread", True), ("self", True), ("unloaded", False)]

if __name__ == "__main__":
    sys.exit(run_cases(CHILD, CASES))
