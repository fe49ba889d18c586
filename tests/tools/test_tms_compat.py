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
import subprocess
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

def module_state():
    import pagefast._tms_state
    return pagefast._tms_state.STATE

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
    import pagefast.torch_memory_saver as module
    expect("torch" not in sys.modules, "importing the torch_memory_saver names imported torch")
    expect(isinstance(tms, TorchMemorySaver) and tms.enabled is True, "the singleton, enabled")

    def epochs(tag):
        return module._STATE.tags[tag].epochs

    def asleep(tag):
        return [pagefast.is_asleep(name) for name in epochs(tag)]

    with tms.region(tag="kv"):
        expect(pagefast.current_region() == epochs("kv")[0], "region opens a pagefast region of the tag's epoch")
        kv = cuda.alloc(8 * MB, 0x22)
    with tms.region(tag="weights", enable_cpu_backup=True):
        weights = cuda.alloc(4 * MB, 0x5A)
    import torch
    g = torch.cuda.CUDAGraph()
    mark = len(torch.cuda.calls)
    with tms.cuda_graph(g, tag="graph"):
        captured = cuda.alloc(2 * MB, 0x77)
    seen = calls_since(mark)
    expect(seen[0][:1] == ("graph",) and seen[0][2] == epochs("graph")[0],
           "cuda_graph captures in the region: %r" % (seen,))
    expect(seen[0][1] == {"graph": g, "pool": None, "stream": None, "capture_error_mode": "global"},
           "torch_memory_saver's defaults passed on: %r" % (seen[0][1],))
    plain = cuda.alloc(4 * MB, 0x11)

    cuda.reset_counts()
    tms.pause("kv")
    copies = cuda.host_copies()
    expect(copies == 0, "pause of a region without cpu backup copied %d times" % copies)
    expect(asleep("kv") == [True] and asleep("weights") == [False] and asleep("graph") == [False],
           "pause(tag) puts that tag only to sleep")
    expect(not cuda.mapped(kv) and cuda.holds(plain, 0x11, 4 * MB), "the tag's memory only")
    expect_raises(pagefast.Error, lambda: tms.pause("kv"), "already paused", "pause of a paused tag")
    expect_raises(pagefast.Error, lambda: tms.resume("weights"), "not paused", "resume of an awake tag")
    expect_raises(pagefast.Error, lambda: tms.get_cpu_backup(torch.device_tensor(kv, 8 * MB)),
                  "without a host copy", "get_cpu_backup of a tensor paused without a host copy")
    with tms.region(tag="kv"):
        expect(pagefast.current_region() == epochs("kv")[1], "a region of a paused tag opens a new epoch")
        fresh = cuda.alloc(MB, 0x33)
    expect(asleep("kv") == [True, False], "the new epoch is awake, the old one asleep")
    tms.pause("kv")
    expect(asleep("kv") == [True, True] and not cuda.mapped(fresh), "pause takes the new epoch too")
    tms.resume("kv")
    expect(asleep("kv") == [False, False] and cuda.mapped(kv) and cuda.mapped(fresh), "resume wakes every epoch")

    cuda.reset_counts()
    TorchMemorySaver().pause()
    copies = cuda.host_copies()
    expect(copies > 0, "the cpu-backup region's contents went to the host")
    expect(all(all(asleep(t)) for t in ("kv", "weights", "graph")),
           "pause() of another TorchMemorySaver() puts every tag to sleep: one shared state")
    expect(cuda.holds(plain, 0x11, 4 * MB), "pause() leaves memory outside regions")
    expect_raises(pagefast.Error, tms.pause, "already paused", "pause() with tags paused")
    tms.resume()
    expect(not any(any(asleep(t)) for t in ("kv", "weights", "graph")), "resume() wakes every tag")
    expect(cuda.holds(weights, 0x5A, 4 * MB), "enable_cpu_backup kept the contents")
    tms.pause("never_opened")
    tms.resume("never_opened")

    # A library's own buffer (NCCL's, made with cuMemCreate) made while a
    # region is open is not the tag's: pause leaves it. With PyTorch's
    # expandable segments PyTorch's own memory is made that way: tagged.
    def own_vmm(byte):
        import ctypes

        class Prop(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("where", ctypes.c_int),
                        ("id", ctypes.c_int), ("win32", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]

        class Access(ctypes.Structure):
            _fields_ = [("where", ctypes.c_int), ("id", ctypes.c_int), ("flags", ctypes.c_int)]

        handle, va = ctypes.c_uint64(), ctypes.c_uint64()
        prop = Prop(type=1, where=1, id=0)  # pinned, on device 0
        cuda.ok(cuda.lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(2 * MB), ctypes.byref(prop),
                                     ctypes.c_ulonglong(0)), "cuMemCreate")
        cuda.ok(cuda.lib.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(2 * MB), ctypes.c_size_t(0),
                                             ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        cuda.ok(cuda.lib.cuMemMap(va, ctypes.c_size_t(2 * MB), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0)),
                "cuMemMap")
        access = Access(where=1, id=0, flags=3)
        cuda.ok(cuda.lib.cuMemSetAccess(va, ctypes.c_size_t(2 * MB), ctypes.byref(access), ctypes.c_size_t(1)),
                "cuMemSetAccess")
        cuda.fill(va.value, byte, 2 * MB)
        return va.value

    with tms.region(tag="nccl_in_region"):
        pooled = cuda.alloc(MB, 0x2A)
        library_buffer = own_vmm(0x4B)
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    with tms.region(tag="expandable"):
        segment = own_vmm(0x4C)
    del os.environ["PYTORCH_CUDA_ALLOC_CONF"]
    tms.pause("nccl_in_region")
    tms.pause("expandable")
    expect(not cuda.mapped(pooled), "the region's pool memory paused")
    expect(cuda.holds(library_buffer, 0x4B, 2 * MB), "a library's own cuMemCreate buffer made in a region stays")
    expect(not cuda.mapped(segment), "with expandable segments the region's cuMemCreate memory is the tag's")
    tms.resume("nccl_in_region")
    tms.resume("expandable")
    expect(cuda.mapped(pooled) and cuda.mapped(segment), "both back after resume")

    # Any tag string, any number of tags over the process's life.
    odd = ["ünïcode tag", "a/b c", "x" * 200, "", "tms.0.0.kv"]
    for name in odd:
        with tms.region(tag=name, enable_disk_backup=True):
            block = cuda.alloc(MB, 0x66)
        tms.pause(name)
        expect(not cuda.mapped(block), "tag %r paused" % name)
        tms.resume(name)
        expect(cuda.holds(block, 0x66, MB), "tag %r kept on disk backup" % name)
        cuda.free(block)
    names = [n for t in module._STATE.tags.values() for n in t.epochs]
    expect(len(set(names)) == len(names), "one pagefast tag per (tag, epoch): %r" % names)
    for i in range(40):
        with tms.region(tag="request %d" % i):
            block = cuda.alloc(MB, 0x12)
        tms.pause("request %d" % i)
        tms.resume("request %d" % i)
        cuda.free(block)
    expect(cuda.holds(weights, 0x5A, 4 * MB), "40 more tags than the 31 slots, one at a time")

    with tms.region(tag="kv"):
        mark = len(torch.cuda.calls)
        import ctypes
        ctypes.CDLL(None).pagefast_pool_trim(0)  # nothing idle before the block: what it takes is grown
        before_disable = cuda.driver_free_bytes()
        with tms.disable():
            expect(pagefast.current_region() is None, "disable() closes the region for the block")
            free_of_tag = cuda.alloc(2 * MB, 0x44)
            answer, scratch = cuda.try_alloc(128 * MB)  # under what pagefast keeps idle (keep_idle)
            expect(answer == 0, "128 MiB under disable()")
            cuda.free(scratch)
        expect(pagefast.current_region() == epochs("kv")[-1], "and opens it again after")
        # torch_memory_saver's training_engine: what the block freed is back
        # with the driver once it ends (its pool dropped), not idle in pagefast.
        expect(cuda.driver_free_bytes() >= before_disable - 4 * MB,
               "disable() gives what its block freed back to the driver (%d MiB less free)"
               % ((before_disable - cuda.driver_free_bytes()) >> 20))
        seen = calls_since(mark)
        expect([c[0] for c in seen] == ["MemPool", "use_mem_pool", "end_mem_pool"] and seen[1][2] is None,
               "disable() uses a fresh pool outside the region: %r" % (seen,))
    expect_raises(AssertionError, lambda: tms.disable().__enter__(), "only when tms is active",
                  "disable() outside a region")
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
    expect(tms.retain_cpu_backup is False, "no retained host copy without TMS_RETAIN_CPU_BACKUP")
    tms.retain_cpu_backup = True
    expect(TorchMemorySaver().retain_cpu_backup is True, "retain_cpu_backup set, shared")
    tms.retain_cpu_backup = False
    expect_raises(AssertionError, lambda: tms.region(enable_cpu_backup=True, enable_disk_backup=True).__enter__(),
                  "mutually exclusive", "cpu and disk backup together")
    cdll = tms._impl._binary_wrapper.cdll
    with tms.region(tag="mm", enable_cpu_backup=True, cpu_backup_backend="mmap"):
        expect(cdll.tms_get_cpu_backup_backend() == b"mmap" and cdll.tms_get_current_tag() == b"mm"
               and cdll.tms_get_enable_cpu_backup() and cdll.tms_get_interesting_region(),
               "the settings of the region, as torch_memory_saver's library reads them")
        mm = cuda.alloc(MB, 0x3C)
    expect(cdll.tms_get_cpu_backup_backend() == b"pinned" and not cdll.tms_get_interesting_region(),
           "and as they were after it")
    cdll.tms_pause(b"mm")
    expect(not cuda.mapped(mm), "tms_pause(tag) pauses it")
    cdll.tms_resume(None)
    expect(cuda.holds(mm, 0x3C, MB), "the mmap backend keeps the contents")
    expect_raises(ValueError, lambda: tms.region(cpu_backup_backend="pinned").__enter__(),
                  "requires enable_cpu_backup", "a backend without backup")
    expect_raises(ValueError, lambda: tms.region(enable_cpu_backup=True, cpu_backup_backend="disk").__enter__(),
                  "one of", "an unknown backend")
    torch.version.hip = "6.2.0"
    expect_raises(ValueError, lambda: tms.region(enable_cpu_backup=True, cpu_backup_backend="mmap").__enter__(),
                  "not supported on ROCm", "mmap on ROCm")
    torch.version.hip = None
    module.is_xpu, real_is_xpu = (lambda: True), module.is_xpu
    expect_raises(ValueError, lambda: tms.region(enable_cpu_backup=True, cpu_backup_backend="pinned").__enter__(),
                  "not supported on XPU", "a backend on XPU")
    module.is_xpu = real_is_xpu
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tms-disk-%d" % os.getpid(), "sub")
    tms.set_disk_backup_dir(folder)
    expect(os.path.isdir(folder), "set_disk_backup_dir makes the folder")
    os.rmdir(folder)
    os.rmdir(os.path.dirname(folder))
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
    # `import torch_memory_saver` with python/pagefast/tms_alias first on the path (python -m pagefast --tms-alias).
    import torch_memory_saver
    import pagefast.torch_memory_saver as module
    from torch_memory_saver import entrypoint, utils
    from torch_memory_saver.hooks import mode_preload
    from torch_memory_saver.testing_utils import get_device
    expect(torch_memory_saver.torch_memory_saver is module.torch_memory_saver, "the alias serves pagefast's object")
    expect(entrypoint is module and entrypoint.TorchMemorySaver is module.TorchMemorySaver,
           "torch_memory_saver.entrypoint is pagefast's module")
    expect(get_device() == "cuda", "testing_utils.get_device on a CUDA machine")
    import torch
    from torch_memory_saver.testing_utils import get_and_print_gpu_memory
    torch.cuda.device_memory_used = lambda index: 5 << 30
    torch.cuda.mem_get_info = lambda index: (1 << 30, 8 << 30)
    expect(get_and_print_gpu_memory("nvml") == 5 << 30, "used memory as NVML counts it, as the real tests measure")
    del torch.cuda.device_memory_used
    expect(get_and_print_gpu_memory("driver") == 7 << 30, "else the driver's free memory")
    tms = torch_memory_saver.torch_memory_saver
    with tms.region(tag="kv"):
        kv = cuda.alloc(2 * MB, 0x21)
    tms.pause()
    expect(not cuda.mapped(kv), "pause through the alias")
    tms.resume()
    expect(cuda.mapped(kv), "resume through the alias")

    # Derived from the behaviours torch_memory_saver's test/test_utils.py and
    # test/test_configure_subprocess.py check (not their code).
    import tempfile, types
    stem = "torch_memory_saver_hook_mode_preload"
    real_torch, real_file = sys.modules["torch"], utils.__file__
    for version, name in ((types.SimpleNamespace(cuda=None, hip="7.2.0"), stem + ".abi3.so"),
                          (types.SimpleNamespace(cuda="12.9", hip=None), stem + "_cu12.abi3.so")):
        with tempfile.TemporaryDirectory() as folder:
            os.mkdir(os.path.join(folder, "torch_memory_saver"))
            open(os.path.join(folder, name), "w").close()
            utils.__file__ = os.path.join(folder, "torch_memory_saver", "utils.py")
            sys.modules["torch"] = types.SimpleNamespace(version=version)
            try:
                found = str(utils.get_binary_path_from_package(stem))
            finally:
                sys.modules["torch"], utils.__file__ = real_torch, real_file
            expect(found == os.path.join(folder, name), "the hook library for %r: %r" % (version, found))
    expect(os.path.realpath(str(utils.get_binary_path_from_package(stem)))
           == os.path.realpath(os.environ["LD_PRELOAD"].split(":")[0]),
           "no hook library beside the package: pagefast's")
    os.environ.pop("TMS_TEST_ABSENT", None)
    with utils.change_env("TMS_TEST_ABSENT", "1"):
        expect(os.environ["TMS_TEST_ABSENT"] == "1", "change_env sets")
    expect("TMS_TEST_ABSENT" not in os.environ, "change_env leaves an absent key absent")
    os.environ["TMS_TEST_PRESENT"] = "old"
    with utils.change_env("TMS_TEST_PRESENT", "1"):
        pass
    expect(os.environ["TMS_TEST_PRESENT"] == "old", "change_env restores the value")
    expect_raises(ValueError, lambda: entrypoint.TorchMemorySaver().region(enable_cpu_backup=False,
                  cpu_backup_backend="mmap").__enter__(), "requires enable_cpu_backup", "backend without backup")
    real_is_xpu, entrypoint.is_xpu = entrypoint.is_xpu, (lambda: True)
    for backend in ("pinned", "mmap"):
        expect_raises(ValueError, lambda: entrypoint.TorchMemorySaver().region(
            enable_cpu_backup=True, cpu_backup_backend=backend).__enter__(), "not supported on XPU", "XPU " + backend)
    entrypoint.is_xpu = real_is_xpu
    import torch
    torch.version.hip = "6.2.0"
    expect_raises(ValueError, lambda: entrypoint.TorchMemorySaver().region(
        enable_cpu_backup=True, cpu_backup_backend="mmap").__enter__(), "not supported on ROCm", "ROCm mmap")
    torch.version.hip = None
    real_lookup = mode_preload.get_binary_path_from_package
    mode_preload.get_binary_path_from_package = lambda stem: "/fake/torch_memory_saver_hook_mode_preload.so"
    saved = os.environ.pop("LD_PRELOAD")
    for before, want in ((None, "/fake/torch_memory_saver_hook_mode_preload.so"),
                         ("/other/lib.so", "/fake/torch_memory_saver_hook_mode_preload.so:/other/lib.so")):
        if before:
            os.environ["LD_PRELOAD"] = before
        with torch_memory_saver.configure_subprocess():
            expect(os.environ["LD_PRELOAD"] == want, "configure_subprocess: %r" % os.environ["LD_PRELOAD"])
        expect(os.environ.get("LD_PRELOAD") == before, "LD_PRELOAD restored to %r" % before)
    os.environ["LD_PRELOAD"] = saved
    mode_preload.get_binary_path_from_package = real_lookup
    print("ok alias")

elif case == "init":
    # TMS_INIT_ENABLE: the preload library's initial region, as
    # torch_memory_saver's training_engine, nested_region and
    # cuda_vmm_granularity examples use it.
    os.environ.update(TMS_INIT_ENABLE="1", TMS_INIT_ENABLE_CPU_BACKUP="1", TMS_RETAIN_CPU_BACKUP="1")
    from torch_memory_saver import torch_memory_saver as tms
    cdll = tms._impl._binary_wrapper.cdll
    expect(cdll.tms_get_interesting_region() and cdll.tms_get_enable_cpu_backup()
           and cdll.tms_get_current_tag() == b"default" and cdll.tms_get_cpu_backup_backend() == b"pinned",
           "the initial settings from TMS_INIT_*")
    expect(tms.retain_cpu_backup is True, "TMS_RETAIN_CPU_BACKUP=1 read")
    weight = cuda.alloc(4 * MB, 0x42)
    with tms.region(tag="grad_buffer", enable_cpu_backup=False):
        expect(not cdll.tms_get_enable_cpu_backup() and cdll.tms_get_current_tag() == b"grad_buffer",
               "a nested region's settings")
        grad = cuda.alloc(4 * MB, 0x63)
    expect(cdll.tms_get_current_tag() == b"default" and cdll.tms_get_enable_cpu_backup(), "restored after it")
    free_before = cuda.free_bytes()
    tms.pause()
    expect(cuda.free_bytes() >= free_before + 8 * MB, "pause frees the memory allocated outside any region")
    while_paused = cuda.alloc(MB, 0x3A)  # served with fresh memory, as the real package serves it
    expect(cdll.tms_get_current_tag() == b"default", "still the initial region")
    with tms.disable():
        expect(not cdll.tms_get_interesting_region(), "disable() inside the initial region")
        untagged = cuda.alloc(2 * MB, 0x71)
    tms.resume()
    expect(cuda.holds(weight, 0x42, 4 * MB), "the initial region kept its contents (TMS_INIT_ENABLE_CPU_BACKUP)")
    expect(cuda.holds(while_paused, 0x3A, MB), "the allocation made while paused is intact after resume")
    expect(cuda.mapped(grad) and cuda.holds(untagged, 0x71, 2 * MB),
           "the nested region's memory back, disable's stayed")
    cuda.fill(grad, 0x00, 4 * MB)
    loose = cuda.alloc(2 * MB, 0x55)
    import ctypes
    api = ctypes.CDLL(None)  # libpagefast.so's exports, as torch_memory_saver's cuda_vmm_granularity finds them
    api.tms_pause.argtypes = api.tms_resume.argtypes = [ctypes.c_char_p]
    expect(api.tms_pause(None) == 0, "tms_pause(NULL)")
    expect(not cuda.mapped(loose) and not cuda.mapped(weight) and cuda.holds(untagged, 0x71, 2 * MB),
           "tms_pause(NULL) pauses the regions' memory only")
    expect_raises(pagefast.Error, tms.pause, "already paused", "pause() after tms_pause: one state")
    cuda.free(loose)  # freed while paused
    expect(api.tms_resume(None) == 0, "tms_resume(NULL)")
    expect(cuda.holds(weight, 0x42, 4 * MB), "tms_resume(NULL) brings the kept contents back")
    with tms.region(tag="x" * 100 + " \u00fc"):
        long_tag = cuda.alloc(MB, 0x18)
    with tms.region(tag="a.b"):
        dotted = cuda.alloc(MB, 0x19)
    expect(api.tms_pause(("x" * 100 + " \u00fc").encode()) == 0 and not cuda.mapped(long_tag) and cuda.mapped(dotted),
           "tms_pause of a long tag finds its hashed pagefast tag, and it only")
    expect(api.tms_pause(b"a.b") == 0 and not cuda.mapped(dotted), "tms_pause of a tag with a dot")
    tms.resume("a.b")
    expect(cuda.mapped(dotted) and not cuda.mapped(long_tag), "resume in Python of what tms_pause paused")
    api.tms_resume(None)
    expect(cuda.mapped(long_tag), "tms_resume(NULL) wakes the rest")
    cuda.fill(weight, 0x5A, 4 * MB)
    expect(cuda.holds(weight, 0x5A, 4 * MB), "usable after tms_pause, a free while paused and tms_resume")
    print("ok init")

elif case == "backup":
    # get_cpu_backup as torch_memory_saver's cpu_backup example reads it:
    # while paused, the contents; across cycles with retain_cpu_backup, one
    # host buffer per tensor at the same address, refreshed at each pause.
    import gc
    import torch
    from torch_memory_saver import torch_memory_saver as tms
    with tms.region(tag="weights", enable_cpu_backup=True):
        w = cuda.alloc(6 * MB, 0x5A)
        cuda.fill(w + 2 * MB, 0x5B, 2 * MB)
    with tms.region(tag="other", enable_cpu_backup=True, cpu_backup_backend="mmap"):
        o = cuda.alloc(2 * MB, 0x6C)
    expect(tms._impl._mem_pools[("weights", True, False, "pinned", 0)] is not None
           and ("other", True, False, "mmap", 0) in tms._impl._mem_pools, "the pools by torch_memory_saver's keys")
    wt = torch.device_tensor(w, 6 * MB, torch.float32)
    part = torch.device_tensor(w + MB, 2 * MB)  # 1 MiB of 0x5A, 1 MiB of 0x5B
    ot = torch.device_tensor(o, 2 * MB)
    plain = torch.device_tensor(cuda.alloc(MB, 0x11), MB)
    expect(tms.get_cpu_backup(wt) is None and tms.get_cpu_backup(plain) is None, "awake: None")
    tms.pause("weights")
    got = tms.get_cpu_backup(wt)
    expect(got.device == "cpu" and got.dtype is torch.float32 and got.shape == wt.shape, "a CPU tensor like x")
    expect(got.tobytes() == b"\x5a" * 2 * MB + b"\x5b" * 2 * MB + b"\x5a" * 2 * MB, "the kept contents")
    expect(tms.get_cpu_backup(part).tobytes() == b"\x5a" * MB + b"\x5b" * MB, "a part of an allocation")
    expect(tms.get_cpu_backup(ot) is None and tms.get_cpu_backup(plain) is None, "another tag's, untagged: None")
    first = tms.get_cpu_backup(wt, zero_copy=True)
    pointer = first.data_ptr()
    expect(tms.get_cpu_backup(wt).data_ptr() != pointer, "without zero_copy: a clone")
    del first, got
    tms.resume("weights")
    expect(tms.get_cpu_backup(wt) is None, "after a resume without retain: None")

    cuda.fill(w, 0x61, 6 * MB)
    tms.pause()
    expect(tms.get_cpu_backup(ot).tobytes() == b"\x6c" * 2 * MB, "the mmap backend's contents too")
    retained = tms.get_cpu_backup(wt, zero_copy=True)
    pointer = retained.data_ptr()
    tms.retain_cpu_backup = True
    tms.resume()
    expect(cuda.holds(w, 0x61, 6 * MB), "resumed with the contents")
    after = tms.get_cpu_backup(wt, zero_copy=True)
    expect(after.data_ptr() == pointer and after.tobytes() == b"\x61" * 6 * MB,
           "retained: the same host buffer, the contents of the pause")
    cuda.fill(w, 0x62, 6 * MB)
    expect(tms.get_cpu_backup(wt, zero_copy=True).tobytes() == b"\x61" * 6 * MB, "not refreshed while awake")
    tms.pause("weights")
    again = tms.get_cpu_backup(wt, zero_copy=True)
    expect(again.data_ptr() == pointer and again.tobytes() == b"\x62" * 6 * MB,
           "the next pause refreshes it in place")
    tms.retain_cpu_backup = False
    tms.resume("weights")
    expect(tms.get_cpu_backup(wt) is None and cuda.holds(w, 0x62, 6 * MB), "a resume without retain lets go")

    with tms._impl._with_region_config(tag="weights", enable_cpu_backup=True, cpu_backup_backend="pinned"):
        expect(pagefast.current_region() == module_state().tag("weights").current(), "_with_region_config's region")
        small = cuda.alloc(MB, 0x7E)
    tms.pause("weights")
    st = torch.device_tensor(small, MB)
    expect(tms.get_cpu_backup(st).tobytes() == b"\x7e" * MB, "allocated under _with_region_config: kept")
    frees = cuda.lib.fakecuda_call_count(b"cuMemFreeHost")
    del retained, after, again
    gc.collect()
    expect(cuda.lib.fakecuda_call_count(b"cuMemFreeHost") > frees,
           "let go at the resume without retain: freed once its views are gone, the tensor alive")
    view = tms.get_cpu_backup(st, zero_copy=True)
    frees = cuda.lib.fakecuda_call_count(b"cuMemFreeHost")
    del view, wt, part
    gc.collect()
    expect(cuda.lib.fakecuda_call_count(b"cuMemFreeHost") == frees, "held while paused and the tensor lives")
    del st
    gc.collect()
    expect(cuda.lib.fakecuda_call_count(b"cuMemFreeHost") > frees,
           "the host buffer freed once the tensor that asked and its views are gone")
    tms.resume("weights")
    print("ok backup")

elif case == "backend_env":
    os.environ["TMS_INIT_CPU_BACKUP_BACKEND"] = "mmap"
    from torch_memory_saver import torch_memory_saver as tms
    cdll = tms._impl._binary_wrapper.cdll
    expect(cdll.tms_get_cpu_backup_backend() == b"mmap", "TMS_INIT_CPU_BACKUP_BACKEND=mmap read")
    expect(not cdll.tms_get_interesting_region(), "no initial region without TMS_INIT_ENABLE")
    with tms.region(enable_cpu_backup=True):
        kept = cuda.alloc(2 * MB, 0x4D)
    tms.pause()
    tms.resume()
    expect(cuda.holds(kept, 0x4D, 2 * MB), "the mmap backend from the environment keeps the contents")
    print("ok backend_env")

elif case == "disk":
    # torch_memory_saver's disk_backup example: a disk-backed region's
    # allocations in files of the folder while paused (at least one per
    # allocation, as large as they are, the same over cycles), no host
    # memory held for them, the contents exact at resume, the files gone.
    import shutil, tempfile
    import torch
    from torch_memory_saver import torch_memory_saver as tms
    os.environ["TMS_DISK_BACKUP_CHUNK_MB"] = "1"
    folder = tempfile.mkdtemp(prefix="tms-disk-")
    tms.set_disk_backup_dir(folder)
    odd = 5 * MB + 12345  # a run that ends inside a chunk of the copy
    with tms.region(enable_disk_backup=True):
        big = cuda.alloc(14 * MB, 0x3B)
        cuda.fill(big + odd, 0x3C, 3 * MB)
        small = cuda.alloc(7, 0x0A)
    with tms.region(enable_disk_backup=False):
        dropped = cuda.alloc(20 * MB, 0x14)
    registered = cuda.lib.fakecuda_host_registered_bytes()
    totals = set()
    for cycle in range(3):
        tms.pause()
        files = os.listdir(folder)
        total = sum(os.path.getsize(os.path.join(folder, f)) for f in files)
        expect(len(files) >= 2 and total >= 14 * MB, "cycle %d: %d files, %d bytes" % (cycle, len(files), total))
        totals.add(total)
        expect(cuda.lib.fakecuda_host_registered_bytes() == registered, "no page-locked host memory for the files")
        expect(tms.get_cpu_backup(torch.device_tensor(big, 14 * MB)) is None, "a disk-backed tensor: None")
        occupy = cuda.alloc(20 * MB, 0x1E)
        cuda.free(occupy)
        tms.resume()
        expect(cuda.holds(big, 0x3B, odd) and cuda.holds(big + odd, 0x3C, 3 * MB)
               and cuda.holds(big + odd + 3 * MB, 0x3B, 14 * MB - odd - 3 * MB) and cuda.holds(small, 0x0A, 7),
               "cycle %d: the contents back bit for bit" % cycle)
        expect(not cuda.holds(dropped, 0x14, 3), "the region without backup discarded")
        expect(os.listdir(folder) == [], "cycle %d: the files deleted at resume" % cycle)
    expect(len(totals) == 1, "the files' size the same each cycle: %r" % (totals,))
    tms.set_disk_backup_dir(os.path.join(folder, "made"))
    expect(os.path.isdir(os.path.join(folder, "made")), "set_disk_backup_dir makes the folder")
    os.chmod(os.path.join(folder, "made"), 0o500)
    if not os.access(os.path.join(folder, "made"), os.W_OK):  # not as root
        expect_raises(pagefast.Error, tms.pause, "not a folder this process can write", "a folder not writable")
    shutil.rmtree(folder)
    print("ok disk")

elif case == "release":
    # torch_memory_saver's mmap backend from the environment, as its
    # preload RSS test reads it: the initial region's pause keeps the
    # contents in host memory that the resume (no retain) gives back,
    # with the host copy get_cpu_backup showed.
    os.environ.update(TMS_INIT_ENABLE="1", TMS_INIT_ENABLE_CPU_BACKUP="1", TMS_INIT_CPU_BACKUP_BACKEND="mmap")
    import torch
    from torch_memory_saver import torch_memory_saver as tms
    tensor = cuda.alloc(16 * MB, 0x0A)
    tt = torch.device_tensor(tensor, 16 * MB)
    before = cuda.lib.fakecuda_host_registered_bytes()
    tms.pause()
    expect(cuda.lib.fakecuda_host_registered_bytes() >= before + 16 * MB, "the pause holds the contents")
    shown = tms.get_cpu_backup(tt)
    expect(shown is not None and shown.tobytes()[:3] == b"\x0a" * 3, "get_cpu_backup while paused")
    frees = cuda.lib.fakecuda_call_count(b"cuMemFreeHost")
    tms.resume()
    expect(cuda.lib.fakecuda_host_registered_bytes() == before, "the resume gives the host memory back")
    expect(cuda.lib.fakecuda_call_count(b"cuMemFreeHost") > frees,
           "and the copy get_cpu_backup showed, the tensor alive")
    expect(cuda.holds(tensor, 0x0A, 16 * MB), "the contents back")
    expect(tms.get_cpu_backup(tt) is None, "after the resume: None")
    with tms.region(tag="rss", enable_cpu_backup=True, cpu_backup_backend="mmap"):
        other = cuda.alloc(8 * MB, 0x4E)
    for cycle in range(2):
        tms.pause("rss")
        expect(cuda.lib.fakecuda_host_registered_bytes() >= before + 8 * MB, "cycle %d: held while paused" % cycle)
        tms.resume("rss")
        expect(cuda.lib.fakecuda_host_registered_bytes() == before and cuda.holds(other, 0x4E, 8 * MB),
               "cycle %d: given back, contents intact" % cycle)
    print("ok release")
"""

CASES = [("helper", True), ("tms", True), ("alias", True), ("init", True), ("backup", True), ("backend_env", True),
         ("disk", True), ("release", True), ("unloaded", False)]

LAUNCHED = """
import os, subprocess, sys, pagefast.torch_memory_saver as m, torch_memory_saver
assert torch_memory_saver.torch_memory_saver is m.torch_memory_saver, "another torch_memory_saver"
out = subprocess.run([sys.executable, "-m", "pagefast", "--tms-alias"], capture_output=True, text=True).stdout
assert sys.path[1] == out.strip() == os.path.dirname(os.path.dirname(torch_memory_saver.__file__)), (sys.path, out)
assert m.torch_memory_saver.enabled, "the library is preloaded"
print("ok launcher")
"""


def launcher(fake_torch):
    """pagefast-run --tms: `import torch_memory_saver` in the program is
    pagefast's, the library preloaded, with no change to the program."""
    build = sys.argv[sys.argv.index("--build") + 1]
    source = sys.argv[sys.argv.index("--source") + 1]
    env = {k: v for k, v in os.environ.items() if not (k.startswith("PAGEFAST") or k == "LD_PRELOAD")}
    env.update(PYTHONPATH=os.pathsep.join([os.path.join(source, "python"), fake_torch]),
               LD_LIBRARY_PATH=os.path.join(build, "tests", "fakecuda"), PYTHON=sys.executable)
    run = [os.path.join(build, "tools", "pagefast-run"), "--lib", os.path.join(build, "interpose", "libpagefast.so"),
           "--tms", "--", sys.executable, "-c", LAUNCHED]
    r = subprocess.run(run, env=env, capture_output=True, text=True, timeout=240)
    passed = r.returncode == 0 and "ok launcher" in r.stdout
    print(("PASS " if passed else "FAIL ") + "launcher")
    if not passed:
        print("  rc %s\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return 0 if passed else 1


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    alias = os.path.join(os.path.dirname(os.path.dirname(here)), "python", "pagefast", "tms_alias")
    status = run_cases(CHILD, CASES, extra_path=[os.path.join(here, "fake_torch"), alias])
    sys.exit(status or launcher(os.path.join(here, "fake_torch")))
