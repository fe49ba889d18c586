"""tests/tools/faketorch/torch: the few calls of PyTorch that
tools/gpu/sleep-bench's cycles worker makes, over the CUDA driver through
ctypes, for its test on the fake driver (tests/tools/test_sleep_bench.py).
"cuda" tensors are int32 blocks from cuMemAlloc (the fake driver's device
addresses are host addresses: read and written in place); pinned ones
from cuMemHostAlloc. Not PyTorch: only what the script uses."""
import ctypes
from array import array

int32 = "int32"
_cuda = None


def _driver():
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
        _ok(_cuda.cuInit(0), "cuInit")
        device, ctx = ctypes.c_int(), ctypes.c_void_p()
        _ok(_cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        _ok(_cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
        _ok(_cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return _cuda


def _ok(r, what):
    if r != 0:
        raise RuntimeError("%s answered %d" % (what, r))


def _wrap(v):
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


class Tensor:
    def __init__(self, n, device=None, pin_memory=False, base=None, offset=0):
        self.n, self.device, self.base = n, device, base
        if base is not None:
            self.ptr, self.kind = base.ptr + 4 * offset, None
            return
        cuda = _driver()
        p = ctypes.c_uint64() if device == "cuda" else ctypes.c_void_p()
        if device == "cuda":
            _ok(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4 * n)), "cuMemAlloc_v2")
            self.kind = "device"
        elif pin_memory:
            _ok(cuda.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(4 * n), 0), "cuMemHostAlloc")
            self.kind = "pinned"
        else:
            raise ValueError("only cuda or pinned tensors here")
        self.ptr = p.value

    def __del__(self):
        if getattr(self, "kind", None) == "device" and _cuda is not None:
            _cuda.cuMemFree_v2(ctypes.c_uint64(self.ptr))
        elif getattr(self, "kind", None) == "pinned" and _cuda is not None:
            _cuda.cuMemFreeHost(ctypes.c_void_p(self.ptr))

    def _cells(self):
        return (ctypes.c_int32 * self.n).from_address(self.ptr)

    def _values(self):
        return array("i", bytes(self._cells()))

    def _store(self, values):
        ctypes.memmove(self.ptr, values.tobytes(), 4 * self.n)

    def numel(self):
        return self.n

    def __getitem__(self, key):
        start, stop, step = key.indices(self.n)
        assert step == 1
        return Tensor(stop - start, self.device, base=self, offset=start)

    def _map(self, fn):
        out = Tensor(self.n, "cuda")
        out._store(array("i", (_wrap(fn(v)) for v in self._values())))
        return out

    def __mul__(self, k):
        return self._map(lambda v: v * k)

    def __add__(self, k):
        return self._map(lambda v: v + k)

    def copy_(self, other):
        assert other.n == self.n
        ctypes.memmove(self.ptr, other.ptr, 4 * self.n)
        return self


def arange(n, dtype=None, device=None):
    t = Tensor(n, device)
    t._store(array("i", range(n)))
    return t


def empty(n, dtype=None, device=None, pin_memory=False):
    return Tensor(n, device, pin_memory)


def equal(a, b):
    return a.n == b.n and bytes(a._cells()) == bytes(b._cells())


class cuda:  # noqa: N801  (torch.cuda)
    @staticmethod
    def synchronize():
        _ok(_driver().cuCtxSynchronize(), "cuCtxSynchronize")

    @staticmethod
    def empty_cache():
        pass
