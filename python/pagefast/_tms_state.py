"""The state behind pagefast.torch_memory_saver: one per process, shared
by every TorchMemorySaver(). A torch_memory_saver tag is any string; each
maps onto pagefast tags "tms.<code>.<epoch>" (docs/SLEEP.md; the C entry
points tms_pause and tms_resume, interpose/pool/tms_capi.cpp, find them by
the same rule): the code is the string's UTF-8 bytes with A-Z a-z 0-9 _
kept and every other byte as '-' and two lowercase hex digits, or, where
that is longer than 40 characters, ':' and the 16 hex digits of the FNV-1a
64-bit hash of the bytes (two strings of one hash: Error at the second).
A new epoch opens when a region of the tag begins while its last epoch is
asleep, so that allocations there get fresh memory."""
import ctypes
import os
import threading

from ._sleep import _UNKNOWN_TAG, Error, _require_tags, _tag_bytes

TAG_DEFAULT = "default"
BACKENDS = ("pinned", "mmap")
_MAX_CODE = 40
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def env_bool(name):
    """torch_memory_saver's reading of a boolean variable: 1 or true."""
    return os.environ.get(name, "").strip().lower() in ("1", "true")


def env_backend():
    backend = os.environ.get("TMS_INIT_CPU_BACKUP_BACKEND") or "pinned"
    if backend not in BACKENDS:
        raise ValueError("TMS_INIT_CPU_BACKUP_BACKEND is one of %s, not %r" % (", ".join(BACKENDS), backend))
    return backend


def code(tag):
    """The code of a torch_memory_saver tag in its pagefast tags."""
    data = tag.encode("utf-8")
    text = "".join(chr(b) if b in _KEPT else "-%02x" % b for b in data)
    if len(text) <= _MAX_CODE:
        return text
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return ":%016x" % h


def asleep(name):
    """1 asleep, 0 awake, -2 unknown to pagefast (never opened, or its
    empty slot went to another tag)."""
    return _require_tags()[2](_tag_bytes(name))


class Tag:
    """One torch_memory_saver tag: its pagefast tags, oldest first; the
    last one is where its regions allocate."""

    def __init__(self, name):
        self.name = name
        self.code = code(name)
        self.epochs = ["tms.%s.0" % self.code]

    def current(self):
        if asleep(self.epochs[-1]) == 1:
            self.epochs.append("tms.%s.%d" % (self.code, len(self.epochs)))
        return self.epochs[-1]

    def states(self):
        """pagefast's answer for each epoch known to it (1 or 0)."""
        return [s for s in (asleep(e) for e in self.epochs) if s != _UNKNOWN_TAG]

    def paused(self):
        """Paused: some epoch known and every known one asleep."""
        states = self.states()
        return bool(states) and all(s == 1 for s in states)


class State:
    def __init__(self):
        self.lock = threading.RLock()
        self.tags = {}  # torch_memory_saver tag -> Tag, in first-use order
        self.codes = {}  # code -> tag
        self.retain = env_bool("TMS_RETAIN_CPU_BACKUP")
        self.disk_dir = os.environ.get("TMS_DISK_BACKUP_DIR")
        self.disk_used = False  # a disk-backed region was opened: pause hands the folder to the library
        self.hook_mode = "preload"
        self.local = threading.local()  # .config: this thread's region settings, innermost last

    def tag(self, name):
        if not isinstance(name, str):
            raise TypeError("a tag is a str, not %s" % type(name).__name__)
        with self.lock:
            found = self.tags.get(name)
            if found is None:
                found = Tag(name)
                other = self.codes.setdefault(found.code, name)
                if other != name:
                    raise Error("the tags %r and %r have one hash (%s): rename one" % (other, name, found.code))
                self.tags[name] = found
            return found

    def stack(self):
        """This thread's settings as torch_memory_saver's library keeps them:
        (tag, in a region, cpu backup, backend, disk backup), innermost last;
        the first from TMS_INIT_*, as that library starts each thread."""
        if not hasattr(self.local, "config"):
            self.local.config = [(TAG_DEFAULT, env_bool("TMS_INIT_ENABLE"), env_bool("TMS_INIT_ENABLE_CPU_BACKUP"),
                                  env_backend(), env_bool("TMS_INIT_ENABLE_DISK_BACKUP"))]
        return self.local.config

    def push(self, tag, interesting, cpu_backup, backend, disk):
        stack = self.stack()
        stack.append((tag, interesting, cpu_backup, backend or stack[-1][3], disk))


STATE = State()


class Config:
    """torch_memory_saver's C library's settings calls (tms_get_*,
    tms_pause, tms_resume), answered from the state, for code that reads
    them through `torch_memory_saver._impl._binary_wrapper.cdll`; other
    names are looked up in the process (ctypes.CDLL(None))."""

    def __init__(self, saver):
        self._saver = saver

    def tms_get_current_tag(self):
        return STATE.stack()[-1][0].encode("utf-8")

    def tms_get_interesting_region(self):
        return STATE.stack()[-1][1]

    def tms_get_enable_cpu_backup(self):
        return STATE.stack()[-1][2]

    def tms_get_cpu_backup_backend(self):
        return STATE.stack()[-1][3].encode("utf-8")

    def tms_get_enable_disk_backup(self):
        return STATE.stack()[-1][4]

    def tms_get_retain_cpu_backup(self):
        return STATE.retain

    def tms_set_retain_cpu_backup(self, value):
        STATE.retain = bool(value)

    def tms_pause(self, tag):
        self._saver().pause(tag.decode("utf-8") if tag else None)
        return 0

    def tms_resume(self, tag):
        self._saver().resume(tag.decode("utf-8") if tag else None)
        return 0

    def __getattr__(self, name):
        return getattr(ctypes.CDLL(None), name)


class Impl:
    """What torch_memory_saver's tests reach as `_impl`."""

    def __init__(self, saver):
        self._binary_wrapper = type("BinaryWrapper", (), {"cdll": Config(saver)})()
        self._is_xpu = False
        self._saver = saver
        # (tag, cpu backup, disk backup, backend or "", device) -> the MemPool of the last region so.
        self._mem_pools = {}

    def _with_region_config(self, tag, enable_cpu_backup, cpu_backup_backend, enable_disk_backup=False):
        return self._saver()._region_config(tag, enable_cpu_backup, cpu_backup_backend, enable_disk_backup)
