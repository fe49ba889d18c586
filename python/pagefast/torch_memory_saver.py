"""torch_memory_saver's names over pagefast's regions (docs/SLEEP.md
"Coming from torch_memory_saver"). A framework written for it switches
without a change to its source: python/pagefast/tms_alias first on
PYTHONPATH (pagefast-run --tms puts it there) makes `import
torch_memory_saver` this module, and libpagefast.so in LD_PRELOAD replaces
torch_memory_saver's preload library. Or with one import:

    from pagefast.torch_memory_saver import torch_memory_saver

region, cuda_graph, pause, resume, disable, configure_subprocess and the
TMS_* variables do what they do there, with enable_cpu_backup and
enable_disk_backup as pagefast's keep (_keep_flags): backend "pinned",
page-locked host memory kept between cycles; "mmap", host memory made at
pause and given back at resume; disk, a file per allocation in the
folder of set_disk_backup_dir, deleted at resume. Every TorchMemorySaver()
shares one state. A tag of torch_memory_saver is any string; each maps
onto a series of pagefast tags ("epochs", tms.<code>.<epoch>: _tms_state),
a new one opened when a region of a paused tag begins, so that
allocations there get fresh memory; pause and resume act on all of them.

torch is imported at the first region, graph or disable, not with this
module.
"""
import contextlib
import ctypes
import os
import threading

from . import _region
from ._constants import REGION_HOST_RELEASE as _REGION_HOST_RELEASE, REGION_KEEP as _REGION_KEEP
from ._constants import REGION_KEEP_DISK as _REGION_KEEP_DISK
# _SLEEP_FAIL (PAGEFAST_SLEEP_FAIL): allocations of a paused tag fail instead of waiting.
from ._sleep import _SLEEP_FAIL, _UNKNOWN_TAG, Error, _require_tags, _tag_bytes, loaded
from ._tms_state import BACKENDS as _BACKENDS, STATE as _STATE, TAG_DEFAULT as _TAG_DEFAULT, Impl, env_bool
from ._tms_state import asleep as _asleep
from ._tms_backup import BACKUPS as _BACKUPS

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]

_HOOK_MODES = ("preload", "torch")


def is_xpu():
    """Whether torch has an Intel XPU device (never, with pagefast: it is
    a CUDA library); torch_memory_saver's check, tests patch it here."""
    import sys
    torch = sys.modules.get("torch")
    xpu = getattr(torch, "xpu", None)
    try:
        return bool(xpu is not None and xpu.is_available())
    except Exception:
        return False


def _give_back(device):
    """pagefast_pool_trim: the device's idle memory back to the driver."""
    import ctypes
    try:
        trim = ctypes.CDLL(None).pagefast_pool_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = [ctypes.c_int]
    trim.restype = ctypes.c_int
    trim(int(device))


def _check_backup(enable_cpu_backup, enable_disk_backup=False, cpu_backup_backend=None):
    """torch_memory_saver's checks of a region's backup, in its order."""
    if cpu_backup_backend is not None:
        if not enable_cpu_backup:
            raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
        if is_xpu():
            raise ValueError("cpu_backup_backend is not supported on XPU; host shadows use malloc")
        if cpu_backup_backend == "mmap":
            import torch
            if getattr(getattr(torch, "version", None), "hip", None):
                raise ValueError("cpu_backup_backend='mmap' is not supported on ROCm")
        if cpu_backup_backend not in _BACKENDS:
            raise ValueError("cpu_backup_backend is one of %s, not %r" % (", ".join(_BACKENDS), cpu_backup_backend))
    if enable_cpu_backup and enable_disk_backup:
        raise AssertionError("enable_cpu_backup and enable_disk_backup are mutually exclusive")


def _keep_flags(cpu_backup, backend, disk):
    """A region's keep as pagefast's region flags: a disk backup in files
    (PAGEFAST_REGION_KEEP_DISK), the "mmap" backend in host memory given
    back at resume (PAGEFAST_REGION_HOST_RELEASE: the process's resident
    memory grows at pause and shrinks at resume, as torch_memory_saver's
    pageable copy), "pinned" in page-locked host memory kept between
    cycles (PAGEFAST_REGION_KEEP); neither: discarded."""
    if disk:
        _STATE.disk_used = True
        return _REGION_KEEP | _REGION_KEEP_DISK
    if not cpu_backup:
        return False
    if (backend or _STATE.stack()[-1][3]) == "mmap":
        return _REGION_KEEP | _REGION_HOST_RELEASE
    return True


def _disk_settings():
    """The folder (set_disk_backup_dir, else TMS_DISK_BACKUP_DIR, else /tmp)
    and chunk (TMS_DISK_BACKUP_CHUNK_MB, else 256) of the files a pause of
    a disk-backed region writes, handed to the library."""
    if not _STATE.disk_used:
        return
    folder = _STATE.disk_dir or "/tmp"
    chunk_mb = os.environ.get("TMS_DISK_BACKUP_CHUNK_MB", "").strip()
    try:
        setter = ctypes.CDLL(None).pagefast_keep_disk_dir
    except AttributeError:
        raise Error("the libpagefast.so in this process has no pagefast_keep_disk_dir: start the program with "
                    "the library of this package") from None
    setter.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    setter.restype = ctypes.c_int
    if setter(os.fsencode(folder), int(chunk_mb or 256) << 20) != 0:
        raise Error("the disk backup folder %r is not a folder this process can write; nothing paused" % folder)


def _pool_only():
    """Whether the regions leave the program's own cuMemCreate memory
    untagged: yes, unless PyTorch maps its own memory that way (expandable
    segments). torch_memory_saver's hook sees PyTorch's allocations only,
    so a library's own buffers (NCCL's, made with cuMemCreate) made while
    a region is open are never taken by its pause."""
    conf = (os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", ""))
    return "expandable_segments:true" not in conf.replace(" ", "").lower()


@contextlib.contextmanager
def _tagged(name, keep, graph=None, **graph_args):
    """A pagefast region of `name` with PyTorch's allocations in the tag's
    MemPool (pagefast.torch.mem_pool), or a capture of `graph` in it;
    yields the pool (None for a graph)."""
    import torch
    from . import torch as pf_torch
    with _region._opened(name, keep, _pool_only()):
        if graph is not None:
            with torch.cuda.graph(graph, **graph_args):
                yield None
        else:
            pool = pf_torch.mem_pool(name, keep)
            with torch.cuda.use_mem_pool(pool):
                yield pool


@contextlib.contextmanager
def _settings(tag, cpu_backup, backend, disk):
    _STATE.push(tag, True, cpu_backup, backend, disk)
    try:
        yield
    finally:
        _STATE.stack().pop()


class TorchMemorySaver:
    """The object behind `torch_memory_saver`; every instance acts on the
    one state of the process, as torch_memory_saver's do."""

    _impl = Impl(lambda: torch_memory_saver)

    def _ensure_initialized(self):
        pass

    @contextlib.contextmanager
    def region(self, tag=_TAG_DEFAULT, enable_cpu_backup=False, enable_disk_backup=False,
               cpu_backup_backend=None):
        """Allocations of this thread inside are pauseable under `tag`, in
        the tag's own PyTorch memory pool (pagefast.torch.region);
        enable_cpu_backup=True (either backend) or enable_disk_backup=True
        keeps their contents across pause, in page-locked host memory."""
        _check_backup(enable_cpu_backup, enable_disk_backup, cpu_backup_backend)
        with _STATE.lock:
            name = _STATE.tag(tag).current()
        keep = _keep_flags(enable_cpu_backup, cpu_backup_backend, enable_disk_backup)
        with _tagged(name, keep) as pool, \
                _settings(tag, bool(enable_cpu_backup), cpu_backup_backend, bool(enable_disk_backup)):
            # Where torch_memory_saver's tests find a region's pool.
            import torch
            backend = _STATE.stack()[-1][3] if enable_cpu_backup else ""
            key = (tag, bool(enable_cpu_backup), bool(enable_disk_backup), backend, torch.cuda.current_device())
            self._impl._mem_pools[key] = pool
            yield

    @contextlib.contextmanager
    def _region_config(self, tag, enable_cpu_backup, cpu_backup_backend, enable_disk_backup=False):
        """torch_memory_saver's _with_region_config: allocations of this
        thread inside are in a region of `tag` (no MemPool of its own)."""
        with _STATE.lock:
            name = _STATE.tag(tag).current()
        keep = _keep_flags(enable_cpu_backup, cpu_backup_backend, enable_disk_backup)
        with _region._opened(name, keep, _pool_only()), \
                _settings(tag, bool(enable_cpu_backup), cpu_backup_backend, bool(enable_disk_backup)):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global", tag=_TAG_DEFAULT,
                   enable_cpu_backup=False, cpu_backup_backend=None):
        """torch.cuda.graph(cuda_graph, pool, stream, capture_error_mode)
        with the memory of the capture pauseable under `tag`."""
        _check_backup(enable_cpu_backup, cpu_backup_backend=cpu_backup_backend)
        with _STATE.lock:
            name = _STATE.tag(tag).current()
        with _tagged(name, _keep_flags(enable_cpu_backup, cpu_backup_backend, False), cuda_graph, pool=pool,
                     stream=stream,
                     capture_error_mode=capture_error_mode), \
                _settings(tag, bool(enable_cpu_backup), cpu_backup_backend, False):
            yield

    @contextlib.contextmanager
    def disable(self):
        """Inside a region: allocations of this thread are not pauseable, in
        a fresh PyTorch memory pool dropped after the block. Outside any:
        AssertionError, as torch_memory_saver."""
        if not _STATE.stack()[-1][1]:
            raise AssertionError("disable() should be called only when tms is active")
        import torch
        with _region._outside():
            stack = _STATE.stack()
            stack.append((stack[-1][0], False) + stack[-1][2:])
            try:
                pool = torch.cuda.MemPool()
                with torch.cuda.use_mem_pool(pool):
                    yield
                del pool
                # What the block freed (its pool dropped) goes back to the
                # driver, as it does under torch_memory_saver, not idle in
                # pagefast's pool (training_engine's check after disable).
                _give_back(torch.cuda.current_device())
            finally:
                stack.pop()

    def _each(self, tag):
        # An empty tag means every tag, as torch_memory_saver reads it.
        with _STATE.lock:
            if tag:
                found = _STATE.tags.get(tag)
                return [found] if found else []
            return list(_STATE.tags.values())

    def pause(self, tag=None):
        """Puts the memory of `tag` to sleep, or of every tag when None, each
        allocation as its region said (kept or discarded). A paused tag
        again: Error (torch_memory_saver exits the process), nothing
        changed."""
        sleep_tag = _require_tags()[0]
        _disk_settings()
        with _STATE.lock:
            tags = self._each(tag)
            paused = [t.name for t in tags if t.paused()]
            if paused:
                raise Error("cannot pause tag(s) %s: already paused (resume first); nothing changed"
                            % ", ".join(repr(p) for p in paused))
            for t in tags:
                for name in t.epochs:
                    answer = sleep_tag(_tag_bytes(name), _SLEEP_FAIL) if _asleep(name) == 0 else 0
                    if answer < 0 and answer != _UNKNOWN_TAG:
                        raise Error("pagefast could not pause tag %r (no pool yet, a CUDA graph capture under way, "
                                    "or the device could not be synchronised); nothing changed for it" % t.name)
            _follow_initial()

    def resume(self, tag=None):
        """Maps the memory of `tag` (every paused tag when None) again at
        the same addresses, with the contents of the kept regions. A tag
        with nothing paused: Error (torch_memory_saver exits the process)."""
        wake_tag = _require_tags()[1]

        def wake(tags):
            for t in tags:
                for name in t.epochs:
                    if _asleep(name) == 1 and wake_tag(_tag_bytes(name)) not in (0, _UNKNOWN_TAG):
                        raise Error("pagefast could not resume tag %r (the driver refused device memory or a "
                                    "mapping): still paused; call resume() again once memory is free" % t.name)

        with _STATE.lock:
            tags = self._each(tag)
            if tag is not None and tags and 1 not in tags[0].states():
                raise Error("cannot resume tag %r: it is not paused" % tag)
            # The host copies get_cpu_backup showed: kept with retain_cpu_backup, else let go.
            _BACKUPS.resume(lambda: wake(tags), _STATE.retain)

    @property
    def enabled(self):
        """Whether libpagefast.so is in this process."""
        return loaded()

    @property
    def hook_mode(self):
        raise AttributeError("hook_mode can only be set")

    @hook_mode.setter
    def hook_mode(self, hook_mode):
        # Either way pagefast sees every allocation through its preload.
        if hook_mode not in _HOOK_MODES:
            raise ValueError("hook_mode is one of %s, not %r" % (", ".join(_HOOK_MODES), hook_mode))
        _STATE.hook_mode = hook_mode

    @property
    def memory_margin_bytes(self):
        raise NotImplementedError("Only setter is supported")

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value):
        if int(value) != 0:
            raise NotImplementedError("pagefast has no margin of free memory under which allocations fail; "
                                      "its `limit` option caps what the pool holds (docs/OPTIONS.md)")

    @property
    def retain_cpu_backup(self):
        """Accepted (TMS_RETAIN_CPU_BACKUP sets it too): pagefast keeps the
        page-locked host memory of its copies between cycles either way."""
        return _STATE.retain

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        _STATE.retain = bool(value)

    def get_cpu_backup(self, x, zero_copy=False):
        """The contents of `x` (a contiguous CUDA tensor) as a CPU tensor of
        its dtype and shape while its memory is paused with a host copy, or
        after a resume with retain_cpu_backup (the contents of that pause);
        else None. zero_copy=True: a view of the drop-in's page-locked copy,
        at the same address for the tensor across cycles (_tms_backup.py);
        else a clone. Paused without a host copy: pagefast.Error."""
        return _BACKUPS.get(x, zero_copy)

    def set_disk_backup_dir(self, path):
        """The folder (made if missing) of the files a pause of a
        disk-backed region writes from now on, one per allocation, deleted
        at resume (and at exit)."""
        os.makedirs(path, exist_ok=True)
        _STATE.disk_dir = path


torch_memory_saver = TorchMemorySaver()


_INITIAL = {}  # the initial region: "thread" that opened it, "name" of its pagefast tag


def _initial_region():
    """TMS_INIT_ENABLE=1: the importing thread's allocations are in a
    region of tag "default" from now on (TMS_INIT_ENABLE_CPU_BACKUP or
    TMS_INIT_ENABLE_DISK_BACKUP: kept), as torch_memory_saver's preload
    library starts each thread."""
    if not env_bool("TMS_INIT_ENABLE") or not loaded():
        return
    keep = _keep_flags(env_bool("TMS_INIT_ENABLE_CPU_BACKUP"), None, env_bool("TMS_INIT_ENABLE_DISK_BACKUP"))
    with _STATE.lock:
        name = _STATE.tag(_TAG_DEFAULT).current()
    _region._begin(name, keep, _pool_only())
    _INITIAL.update(thread=threading.get_ident(), name=name)


def _follow_initial():
    """After a pause, on the thread of the initial region: that region moves
    to the tag's awake epoch, so that its allocations are served with fresh
    memory (as in any region of a paused tag), not refused. The thread's
    other Python regions are closed and opened again around the move; a
    region opened from C among them: left as it is."""
    if _INITIAL.get("thread") != threading.get_ident() or _asleep(_INITIAL["name"]) != 1:
        return
    old = _INITIAL["name"]
    new = _STATE.tag(_TAG_DEFAULT).current()
    entries = list(_region._stack())
    if not any(e[0] == old for e in entries):
        return
    for _ in entries:
        _region._end()
    if _region.current_region() is not None:
        new = old  # a region from C between them: the order could not be kept
    for tag, keep, pool_only in entries:
        _region._begin(new if tag == old else tag, keep, pool_only)
    _INITIAL["name"] = new


_initial_region()


def _loaded_library_path():
    """The path of the libpagefast.so this process runs with, else the
    package's."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()) == "libpagefast.so":
                    return fields[5].strip()
    except OSError:
        pass
    from . import library_path
    return library_path()


@contextlib.contextmanager
def configure_subprocess(library=None):
    """LD_PRELOAD for the child processes started inside the block: the
    libpagefast.so of this process (else of this package), or `library`,
    first."""
    library = library or _loaded_library_path()
    old = os.environ.get("LD_PRELOAD")
    os.environ["LD_PRELOAD"] = library + (":" + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = old
