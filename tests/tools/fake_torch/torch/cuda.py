"""torch.cuda of the test double (see __init__.py): records calls as
(what, detail, the calling thread's pagefast region)."""
import contextlib
import threading

import pagefast

calls = []
_state = threading.local()


def _note(what, detail):
    calls.append((what, detail, pagefast.current_region()))


def current_device():
    return getattr(_state, "device", 0)


@contextlib.contextmanager
def device(index):
    before = current_device()
    _state.device = index
    try:
        yield
    finally:
        _state.device = before


class MemPool:
    made = 0

    def __init__(self, allocator=None):
        MemPool.made += 1
        self.id = (current_device(), MemPool.made)  # a pool's id: a tuple of two ints
        _note("MemPool", self.id)


def active_pool():
    """The pool use_mem_pool routes the calling thread's allocations to, or None."""
    pools = getattr(_state, "pools", [])
    return pools[-1] if pools else None


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    _note("use_mem_pool", pool.id)
    _state.pools = getattr(_state, "pools", []) + [pool]
    try:
        yield
    finally:
        _state.pools = _state.pools[:-1]
        _note("end_mem_pool", pool.id)


class CUDAGraph:
    pass


class graph:
    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.detail = {"graph": cuda_graph, "pool": pool, "stream": stream, "capture_error_mode": capture_error_mode}

    def __enter__(self):
        _note("graph", self.detail)

    def __exit__(self, *exc):
        _note("end_graph", self.detail)
        return False
