"""The host copies torch_memory_saver's get_cpu_backup shows, for
pagefast.torch_memory_saver (docs/SLEEP.md "Coming from
torch_memory_saver"). While a tensor's memory sleeps with its contents
kept, pagefast's host copy of it is read (pagefast_kept_read) into a host
buffer of the tensor's own: page-locked memory from the driver
(cuMemHostAlloc), one per tensor range, refreshed at each call while
paused and kept at the same address across cycles, as torch_memory_saver
keeps its per-allocation copy. At a resume the copies of the ranges woken
are dropped, or, with retain_cpu_backup, refreshed first and kept, so that
they read as the contents of the last pause. A buffer is freed once its
range is dropped (at a resume without retain, or once the tensor that
asked for it is collected) and no view of it is left."""
import ctypes
import threading
import weakref

from ._sleep import Error

_KEPT = 0  # pagefast_kept_read: copied
_AWAKE = 1
_DISCARDED = -1
_NOT_POOL = -2
_ON_DISK = -3  # kept in a file (a disk-backed region): no host copy to show


def _process():
    return ctypes.CDLL(None)


def _kept_read():
    try:
        read = _process().pagefast_kept_read
    except AttributeError:
        raise Error("the libpagefast.so in this process has no pagefast_kept_read: start the program with the "
                    "library of this package") from None
    read.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    read.restype = ctypes.c_int
    return read


def _pinned(nbytes):
    """A ctypes array over page-locked host memory of the driver's, freed
    when the array (and every tensor made over it) is collected."""
    driver = _process()
    pointer = ctypes.c_void_p()
    answer = driver.cuMemHostAlloc(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1)), ctypes.c_uint(0))
    if answer != 0 or not pointer.value:
        raise MemoryError("cuMemHostAlloc of %d bytes for a host copy answered %d" % (nbytes, answer))

    class Pinned(ctypes.c_uint8 * nbytes):
        def __del__(self, free=driver.cuMemFreeHost, address=pointer.value):
            free(ctypes.c_void_p(address))

    return Pinned.from_address(pointer.value)


class _Entry:
    def __init__(self, nbytes):
        import torch
        self.buffer = torch.frombuffer(_pinned(nbytes), dtype=torch.uint8) if nbytes else torch.empty(
            (0,), dtype=torch.uint8)
        self.users = 0  # tensors alive that asked for it


class Backups:
    """(device address, bytes) -> the host copy shown for that range."""

    def __init__(self):
        self.lock = threading.RLock()
        self.entries = {}

    def get(self, x, zero_copy):
        assert x.is_cuda, "x.device=%s" % (x.device,)
        assert x.is_contiguous(), "x.shape=%s x.stride()=%s" % (x.shape, x.stride())
        key = (int(x.data_ptr()), int(x.nbytes))
        with self.lock:
            entry = self.entries.get(key)
            fresh = entry is None
            if fresh:
                entry = _Entry(key[1])
            answer = _kept_read()(key[0], key[1], entry.buffer.data_ptr()) if key[1] else _AWAKE
            if answer == _DISCARDED:
                raise Error("get_cpu_backup: the tensor at 0x%x is paused without a host copy (its region had "
                            "neither enable_cpu_backup nor enable_disk_backup)" % key[0])
            if answer != _KEPT and fresh:
                return None  # awake, in a file, or not pagefast's pool memory: nothing retained
            self.entries[key] = entry
            entry.users += 1
            weakref.finalize(x, self._let_go, key, entry)
            shown = entry.buffer.view(x.dtype).view(x.shape)
            return shown if zero_copy else shown.clone()

    def _let_go(self, key, entry):
        with self.lock:
            entry.users -= 1
            if entry.users <= 0 and self.entries.get(key) is entry:
                del self.entries[key]

    def resume(self, wake, retain):
        """Runs wake() (the resume); the copies of the ranges it woke are
        refreshed first and kept with `retain`, else dropped."""
        with self.lock:
            asleep = [key for key, entry in self.entries.items() if self._refresh(key, entry, retain)]
            wake()
            for key in asleep:
                if retain:
                    continue
                probe = ctypes.c_uint8()
                if key[1] == 0 or _kept_read()(key[0], 1, ctypes.addressof(probe)) != _KEPT:
                    # Let go now: its memory goes once no view of it is left, not with the tensor.
                    dropped = self.entries.pop(key, None)
                    if dropped is not None:
                        dropped.buffer = None

    @staticmethod
    def _refresh(key, entry, retain):
        """Whether the range sleeps kept now (with `retain`: its copy read
        again, so that it holds the contents of this pause)."""
        if key[1] == 0:
            return False
        if retain:
            return _kept_read()(key[0], key[1], entry.buffer.data_ptr()) == _KEPT
        probe = ctypes.c_uint8()
        return _kept_read()(key[0], 1, ctypes.addressof(probe)) == _KEPT


BACKUPS = Backups()
