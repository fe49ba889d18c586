#!/usr/bin/env python3
"""tests/tools/test_tms_compat.py: the PyTorch helper (pagefast.torch:
region, graph, mem_pool) and the torch_memory_saver names
(pagefast.torch_memory_saver) in a Python process preloaded with
libpagefast.so over the fake driver, with a test double of torch on the
path (tests/tools/fake_torch: it records MemPool, use_mem_pool and graph
calls with the pagefast region open at each). Allocations are made through
ctypes where PyTorch's allocator would make them; memory whose copy to the
host fails is asleep. What this proves: the regions, pools and graph calls
pagefast makes and their order, and what pause/resume put to sleep; not
PyTorch's own allocator.

Usage: test_tms_compat.py --build BUILD --source SOURCE
"""
import os
import sys

from python_region_child import run_cases

CHILD = r"""
import os, subprocess, sys
import pagefast
from python_region_child import Cuda, expect, expect_raises

case = sys.argv[1]
MB = 1 << 20
expect("torch" not in sys.modules, "import pagefast imported torch")
if case == "unloaded":
    from pagefast.torch_memory_saver import torch_memory_saver as tms
    expect(tms.enabled is False, "enabled says the library is not in the process")
    expect_raises(pagefast.Error, tms.pause, "not loaded", "pause without the library")
    expect_raises(pagefast.Error, lambda: tms.region("kv").__enter__(), "not loaded", "region without the library")
    print("ok unloaded")
    sys.exit(0)
cuda = Cuda()

def calls_since(mark):
    import torch
    return torch.cuda.calls[mark:]

if case == "helper":
    import pagefast.torch as pt
    import torch
    mark = len(torch.cuda.calls)
    with pt.region("kv", keep=False) as kv_pool:
        expect(pagefast.current_region() == "kv", "the helper opens a pagefast region")
        expect(torch.cuda.active_pool() is kv_pool, "allocations go to the tag's pool")
        kv = cuda.alloc(8 * MB, 0x22)
    expect(pagefast.current_region() is None and torch.cuda.active_pool() is None, "both closed after")
    seen = calls_since(mark)
    expect([c[0] for c in seen] == ["MemPool", "use_mem_pool", "end_mem_pool"], "calls: %r" % (seen,))
    expect(all(c[2] == "kv" for c in seen), "the pool is made and used inside the region: %r" % (seen,))

    with pt.region("kv", keep=False) as again:
        pass
    with pt.region("kv", keep=True) as kept_pool, pt.region("weights") as weights_pool:
        expect(pagefast.current_region() == "weights", "helper regions nest")
        weights = cuda.alloc(4 * MB, 0x5A)
    expect(again is kv_pool, "one pool per tag, kept for reuse")
    expect(len({id(kv_pool), id(kept_pool), id(weights_pool)}) == 3, "a pool per (tag, keep)")
    expect(pt.mem_pool("kv", False) is kv_pool, "mem_pool gives the tag's pool")
    other = pt.mem_pool("kv", False, device=1)
    expect(other is not kv_pool and other.id[0] == 1, "a pool per device, made on that device")
    mine = torch.cuda.MemPool()
    with pt.region("own", pool=mine) as used:
        expect(used is mine and torch.cuda.active_pool() is mine, "a pool given is the one used")
    try:
        with pt.region("raises"):
            raise KeyError("inside")
    except KeyError:
        pass
    expect(pagefast.current_region() is None and torch.cuda.active_pool() is None, "closed when the block raises")

    g = torch.cuda.CUDAGraph()
    mark = len(torch.cuda.calls)
    with pt.graph(g, "cuda_graph", keep=False, stream="side", capture_error_mode="thread_local"):
        expect(pagefast.current_region() == "cuda_graph", "the capture runs in the region")
        captured = cuda.alloc(4 * MB, 0x77)
    seen = calls_since(mark)
    expect([c[0] for c in seen] == ["graph", "end_graph"] and all(c[2] == "cuda_graph" for c in seen),
           "the graph is captured inside the region: %r" % (seen,))
    expect(seen[0][1] == {"graph": g, "pool": None, "stream": "side", "capture_error_mode": "thread_local"},
           "torch.cuda.graph's arguments passed on: %r" % (seen[0][1],))
    token = (0, 99)
    mark = len(torch.cuda.calls)
    with pt.graph(g, "cuda_graph", pool=token):
        pass
    expect(calls_since(mark)[0][1]["pool"] == token, "a pool given to graph is passed on")

    pagefast.sleep("cuda_graph")
    expect(not cuda.mapped(captured), "the graph's memory sleeps with its tag")
    expect(cuda.holds(kv, 0x22, 8 * MB) and cuda.holds(weights, 0x5A, 4 * MB), "other tags' memory stays")
    pagefast.wake("cuda_graph")
    expect(cuda.mapped(captured), "the graph's memory is back at the same address")
    print("ok helper")

elif case == "tms":
    from pagefast.torch_memory_saver import torch_memory_saver as tms, TorchMemorySaver, configure_subprocess
    expect("torch" not in sys.modules, "importing the torch_memory_saver names imported torch")
    expect(isinstance(tms, TorchMemorySaver) and tms.enabled is True, "the singleton, enabled")
    expect(tms.get_cpu_backup(None) is None, "nothing paused: no host copy to show")
    with tms.region(tag="kv"):
        expect(pagefast.current_region() == "kv", "region opens a pagefast region of the tag")
        kv = cuda.alloc(8 * MB, 0x22)
    with tms.region(tag="weights", enable_cpu_backup=True):
        weights = cuda.alloc(4 * MB, 0x5A)
    import torch
    g = torch.cuda.CUDAGraph()
    mark = len(torch.cuda.calls)
    with tms.cuda_graph(g, tag="graph"):
        captured = cuda.alloc(2 * MB, 0x77)
    seen = calls_since(mark)
    expect(seen[0][:1] == ("graph",) and seen[0][2] == "graph", "cuda_graph captures in the region: %r" % (seen,))
    expect(seen[0][1] == {"graph": g, "pool": None, "stream": None, "capture_error_mode": "global"},
           "torch_memory_saver's defaults passed on: %r" % (seen[0][1],))
    plain = cuda.alloc(4 * MB, 0x11)

    cuda.reset_counts()
    tms.pause("kv")
    copies = cuda.host_copies()
    expect(copies == 0, "pause of a region without cpu backup copied %d times" % copies)
    expect(pagefast.is_asleep("kv") and not pagefast.is_asleep("weights") and not pagefast.is_asleep("graph"),
           "pause(tag) puts that tag only to sleep")
    expect(not cuda.mapped(kv) and cuda.holds(plain, 0x11, 4 * MB), "the tag's memory only")
    with tms.region(tag="kv"):
        r, _ = cuda.try_alloc(MB)
    expect(r == 2, "an allocation in a paused tag's region answered %r, not out of memory" % r)
    expect_raises(NotImplementedError, lambda: tms.get_cpu_backup(None), "resume() first", "get_cpu_backup while paused")
    tms.resume("kv")
    expect(cuda.mapped(kv) and not pagefast.is_asleep("kv"), "resume maps it again")

    cuda.reset_counts()
    tms.pause()
    copies = cuda.host_copies()
    expect(copies > 0, "the cpu-backup region's contents went to the host")
    expect(all(pagefast.is_asleep(t) for t in ("kv", "weights", "graph")), "pause() puts every tag to sleep")
    expect(cuda.holds(plain, 0x11, 4 * MB), "pause() leaves memory outside regions")
    tms.resume()
    expect(not any(pagefast.is_asleep(t) for t in ("kv", "weights", "graph")), "resume() wakes every tag")
    expect(cuda.holds(weights, 0x5A, 4 * MB), "enable_cpu_backup kept the contents")
    tms.pause("never_opened")
    tms.resume("never_opened")

    with tms.region(tag="kv"):
        mark = len(torch.cuda.calls)
        with tms.disable():
            expect(pagefast.current_region() is None, "disable() closes the region for the block")
            free_of_tag = cuda.alloc(2 * MB, 0x44)
        expect(pagefast.current_region() == "kv", "and opens it again after")
        seen = calls_since(mark)
        expect([c[0] for c in seen] == ["MemPool", "use_mem_pool", "end_mem_pool"] and seen[1][2] is None,
               "disable() uses a fresh pool outside the region: %r" % (seen,))
    tms.pause("kv")
    expect(cuda.holds(free_of_tag, 0x44, 2 * MB), "memory allocated under disable() carries no tag")
    tms.resume("kv")

    tms.hook_mode = "torch"
    expect_raises(ValueError, lambda: setattr(tms, "hook_mode", "other"), "hook_mode is one of", "hook_mode")
    expect_raises(AttributeError, lambda: tms.hook_mode, "only be set", "hook_mode getter")
    tms.memory_margin_bytes = 0
    expect_raises(NotImplementedError, lambda: setattr(tms, "memory_margin_bytes", 1 << 30), "limit",
                  "memory_margin_bytes")
    expect_raises(NotImplementedError, lambda: tms.memory_margin_bytes, "setter", "memory_margin_bytes getter")
    tms.retain_cpu_backup = False
    expect(tms.retain_cpu_backup is False, "no retained host copy")
    expect_raises(NotImplementedError, lambda: setattr(tms, "retain_cpu_backup", True), "wake", "retain_cpu_backup")
    expect_raises(NotImplementedError, lambda: tms.region(enable_disk_backup=True).__enter__(), "not on disk",
                  "disk backup")
    expect_raises(ValueError, lambda: tms.region(enable_cpu_backup=True, cpu_backup_backend="mmap").__enter__(),
                  "pinned", "mmap backend")
    expect_raises(ValueError, lambda: tms.region(cpu_backup_backend="pinned").__enter__(),
                  "requires enable_cpu_backup", "a backend without backup")
    with tms.region(tag="pinned_ok", enable_cpu_backup=True, cpu_backup_backend="pinned"):
        pass
    expect_raises(NotImplementedError, lambda: tms.set_disk_backup_dir("/tmp"), "not on disk", "disk dir")
    expect(pagefast.current_region() is None, "refused regions leave none open")

    library = os.environ["LD_PRELOAD"].split(":")[0]
    del os.environ["LD_PRELOAD"]
    with configure_subprocess():
        first = os.environ["LD_PRELOAD"].split(":")[0]
        expect(os.path.realpath(first) == os.path.realpath(library), "the process's library first: %r" % first)
        child = subprocess.run([sys.executable, "-c", "import pagefast; print(pagefast.loaded())"],
                               capture_output=True, text=True, timeout=120)
    expect(child.stdout.strip() == "True", "a child started inside has the library: %r" % (child.stdout + child.stderr))
    expect("LD_PRELOAD" not in os.environ, "LD_PRELOAD as it was after the block")
    print("ok tms")

elif case == "alias":
    # A framework's own import, unchanged: the PYTHONPATH entry makes it
    # pagefast's, the same singleton as pagefast.torch_memory_saver's.
    import pagefast.alias
    from torch_memory_saver import torch_memory_saver, TorchMemorySaver, configure_subprocess
    import torch_memory_saver as module
    import pagefast.torch_memory_saver as ours
    expect(os.path.dirname(os.path.dirname(module.__file__)) == pagefast.alias.__path__[0],
           "torch_memory_saver comes from the alias folder: %s" % module.__file__)
    expect(torch_memory_saver is ours.torch_memory_saver and TorchMemorySaver is ours.TorchMemorySaver and
           configure_subprocess is ours.configure_subprocess, "the names are pagefast's objects")
    expect(torch_memory_saver.enabled is True, "enabled under the preloaded library")
    with torch_memory_saver.region(tag="kv"):
        kv = cuda.alloc(4 * MB, 0x22)
    torch_memory_saver.pause("kv")
    expect(pagefast.is_asleep("kv"), "pause through the framework's import sleeps the tag")
    torch_memory_saver.resume("kv")
    expect(not pagefast.is_asleep("kv") and cuda.mapped(kv), "resume wakes it")
    print("ok alias")
"""

CASES = [("helper", True), ("tms", True), ("alias", True), ("unloaded", False)]

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    # The alias folder as a user puts it on PYTHONPATH (docs/SLEEP.md).
    source = sys.argv[sys.argv.index("--source") + 1]
    alias = os.path.join(source, "python", "pagefast", "alias")
    sys.exit(run_cases(CHILD, CASES, extra_path=[os.path.join(here, "fake_torch"), alias]))
