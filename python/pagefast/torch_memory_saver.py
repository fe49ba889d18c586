"""torch_memory_saver's names over pagefast's regions (docs/SLEEP.md
"Coming from torch_memory_saver"): a framework written for it switches
with one import,

    from torch_memory_saver import torch_memory_saver            # before
    from pagefast.torch_memory_saver import torch_memory_saver   # after

and runs under pagefast-run (or LD_PRELOAD of libpagefast.so) instead of
torch_memory_saver's preload library. region, cuda_graph, pause, resume,
disable, enabled and configure_subprocess do what they do there, with
enable_cpu_backup as pagefast's keep. What pagefast cannot do the same
way raises NotImplementedError or ValueError and says why: a disk backup,
an mmap host copy, a margin of free memory, host copies kept across
resume, reading a paused tensor's host copy.

torch is imported at the first region, graph or disable, not with this
module.
"""
import contextlib
import os
import threading

from . import _region
from ._sleep import _UNKNOWN_TAG, Error, _require_tags, _tag_bytes, loaded

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]

_TAG_DEFAULT = "default"
_HOOK_MODES = ("preload", "torch")
_SLEEP_FAIL = 2  # PAGEFAST_SLEEP_FAIL: allocations of a paused tag fail instead of waiting


def _check_backup(enable_cpu_backup, enable_disk_backup=False, cpu_backup_backend=None):
    if enable_disk_backup:
        if enable_cpu_backup:
            raise AssertionError("enable_cpu_backup and enable_disk_backup are mutually exclusive")
        raise NotImplementedError("pagefast keeps contents in page-locked host memory only, not on disk: "
                                  "use enable_cpu_backup=True")
    if cpu_backup_backend is None:
        return
    if not enable_cpu_backup:
        raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
    if cpu_backup_backend != "pinned":
        raise ValueError("pagefast keeps contents in page-locked (pinned) host memory: "
                         "cpu_backup_backend=%r is not available" % (cpu_backup_backend,))


class TorchMemorySaver:
    """The object behind `torch_memory_saver`. pause() and resume() without
    a tag act on the tags this object opened regions of (torch_memory_saver
    pauses its regions' memory, never memory allocated outside them)."""

    def __init__(self):
        self._tags = {}  # the tags of this object's regions, in first-use order
        self._tags_lock = threading.Lock()
        self._paused = set()
        self._hook_mode = "preload"

    def _note(self, tag):
        with self._tags_lock:
            self._tags.setdefault(tag, None)

    @contextlib.contextmanager
    def region(self, tag=_TAG_DEFAULT, enable_cpu_backup=False, enable_disk_backup=False,
               cpu_backup_backend=None):
        """Allocations of this thread inside carry `tag`, in the tag's own
        PyTorch memory pool (pagefast.torch.region); enable_cpu_backup=True
        keeps their contents across pause."""
        _check_backup(enable_cpu_backup, enable_disk_backup, cpu_backup_backend)
        from . import torch as pf_torch
        self._note(tag)
        with pf_torch.region(tag, keep=enable_cpu_backup):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global", tag=_TAG_DEFAULT,
                   enable_cpu_backup=False, cpu_backup_backend=None):
        """torch.cuda.graph(cuda_graph, pool, stream, capture_error_mode)
        with the memory of the capture tagged (pagefast.torch.graph)."""
        _check_backup(enable_cpu_backup, cpu_backup_backend=cpu_backup_backend)
        from . import torch as pf_torch
        self._note(tag)
        with pf_torch.graph(cuda_graph, tag, keep=enable_cpu_backup, pool=pool, stream=stream,
                            capture_error_mode=capture_error_mode):
            yield

    @contextlib.contextmanager
    def disable(self):
        """Inside a region: allocations of this thread carry no tag, in a
        fresh PyTorch memory pool dropped after the block."""
        import torch
        with _region._outside():
            pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(pool):
                yield
            del pool

    def _each(self, tag):
        if tag:
            return [tag]
        with self._tags_lock:
            return list(self._tags)

    def pause(self, tag=None):
        """Puts the memory of `tag` to sleep, or of every tag this object
        opened when tag is None, each with its regions' enable_cpu_backup.
        A tag nothing was allocated in is skipped. Allocations in a region
        of a paused tag fail with out-of-memory until resume."""
        sleep_tag = _require_tags()[0]
        for name in self._each(tag):
            answer = sleep_tag(_tag_bytes(name), _SLEEP_FAIL)
            if answer == _UNKNOWN_TAG:
                continue
            if answer < 0:
                raise Error("pagefast could not pause tag %r (no pool yet, a CUDA graph capture under way, "
                            "or the device could not be synchronised); nothing changed for it" % name)
            self._paused.add(name)

    def resume(self, tag=None):
        """Maps the memory of `tag` (every tag when None) again at the same
        addresses, with the contents of enable_cpu_backup regions."""
        wake_tag = _require_tags()[1]
        for name in self._each(tag):
            answer = wake_tag(_tag_bytes(name))
            if answer == _UNKNOWN_TAG:
                continue
            if answer != 0:
                raise Error("pagefast could not resume tag %r (the driver refused device memory or a "
                            "mapping): still paused; call resume() again once memory is free" % name)
            self._paused.discard(name)

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
        self._hook_mode = hook_mode

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
        return False

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        if value:
            raise NotImplementedError("pagefast gives the host copy back at wake; it cannot be retained")

    def get_cpu_backup(self, x, zero_copy=False):
        """None while nothing this object paused sleeps (the tensor itself
        is then readable, as torch_memory_saver answers for an active
        allocation without a retained copy). While a tag sleeps, pagefast
        has no host view of its memory: NotImplementedError."""
        if not self._paused:
            return None
        raise NotImplementedError("pagefast cannot show the host copy of paused memory (tags paused: %s): "
                                  "resume() first and read the tensor" % ", ".join(sorted(self._paused)))

    def set_disk_backup_dir(self, path):
        raise NotImplementedError("pagefast keeps contents in page-locked host memory only, not on disk")


torch_memory_saver = TorchMemorySaver()


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
def configure_subprocess():
    """LD_PRELOAD for the child processes started inside the block: the
    libpagefast.so of this process (else of this package) first."""
    library = _loaded_library_path()
    old = os.environ.get("LD_PRELOAD")
    os.environ["LD_PRELOAD"] = library + (":" + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = old
