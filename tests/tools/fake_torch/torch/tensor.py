"""Tensors of the test double (see __init__.py): a flat run of bytes at an
address with a dtype and a shape, enough for get_cpu_backup of
pagefast.torch_memory_saver. A "cuda" tensor is made over pool memory the
test allocated (device_tensor: the fake driver's device addresses are host
addresses); a CPU tensor over a buffer-protocol object (frombuffer, which
keeps the object alive as long as the tensor or its views) or over bytes
of its own (empty, clone)."""
import ctypes


class dtype:  # noqa: N801  (torch.dtype)
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


uint8 = dtype("uint8", 1)
float32 = dtype("float32", 4)
int64 = dtype("int64", 8)


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Tensor:
    def __init__(self, address, dtype, shape, device, owner):
        self._address, self.dtype, self.shape, self.device = address, dtype, tuple(shape), device
        self._owner = owner  # what keeps the bytes alive

    @property
    def is_cuda(self):
        return self.device == "cuda"

    @property
    def nbytes(self):
        return _count(self.shape) * self.dtype.itemsize

    def data_ptr(self):
        return self._address

    def is_contiguous(self):
        return True

    def stride(self):
        strides, step = [], 1
        for d in reversed(self.shape):
            strides.insert(0, step)
            step *= d
        return tuple(strides)

    def view(self, what):
        if isinstance(what, dtype):
            n = self.nbytes // what.itemsize
            assert n * what.itemsize == self.nbytes, "view of %d bytes as %r" % (self.nbytes, what)
            return Tensor(self._address, what, (n,), self.device, self)
        assert _count(what) * self.dtype.itemsize == self.nbytes, "view as %r" % (what,)
        return Tensor(self._address, self.dtype, what, self.device, self)

    def tobytes(self):
        return ctypes.string_at(self._address, self.nbytes)

    def clone(self):
        own = ctypes.create_string_buffer(self.tobytes(), self.nbytes)
        return Tensor(ctypes.addressof(own), self.dtype, self.shape, self.device, own)


def device_tensor(address, nbytes, dtype=uint8):
    """A "cuda" tensor over `nbytes` of device memory at `address` (the double's own helper)."""
    return Tensor(address, uint8, (nbytes,), "cuda", None).view(dtype)


def frombuffer(buffer, dtype=uint8):
    array = (ctypes.c_uint8 * len(memoryview(buffer).cast("B"))).from_buffer(buffer)
    return Tensor(ctypes.addressof(array), uint8, (len(array),), "cpu", (buffer, array)).view(dtype)


def empty(shape, dtype=uint8, device="cpu"):
    own = ctypes.create_string_buffer(_count(shape) * dtype.itemsize)
    return Tensor(ctypes.addressof(own), dtype, shape, device, own)
