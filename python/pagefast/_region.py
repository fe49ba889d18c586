"""Regions from Python (docs/SLEEP.md): every allocation the calling
thread makes inside `with pagefast.region(tag):` carries the tag, whatever
the route (cuMemAlloc, cudaMalloc, the program's own cuMemCreate), so that
pagefast.sleep(tag) puts that memory, and only it, to sleep.

    import pagefast
    with pagefast.region("kv_cache", keep=False):
        kv = allocate_kv_cache()        # discarded at sleep("kv_cache")
    with pagefast.region("weights"):
        load_weights()                  # kept (keep=True) at sleep("weights")

    @pagefast.region("weights")         # also a decorator
    def load_weights(): ...

A region belongs to the thread that opens it, and regions nest (the
innermost one tags, 8 deep at most). The calls reach the library already
loaded in the process, as pagefast.sleep does; they make no CUDA call.
"""
import contextlib
import ctypes
import threading

from ._constants import MAX_DEPTH, MAX_TAGS, REGION_POOL_ONLY, TAG, TAG_RULE
from ._sleep import Error, _require

__all__ = ["region", "current_region"]

_BAD_TAG = "a tag is " + TAG_RULE + " , not %r"

# The regions this thread opened through this module, innermost last, so
# that a block can step outside them (_outside) and back in.
_opened = threading.local()


def _stack():
    if not hasattr(_opened, "regions"):
        _opened.regions = []
    return _opened.regions


_functions = []  # begin, end, current once found: a preloaded library stays


def _api():
    if _functions:
        return _functions
    _require()
    try:
        process = ctypes.CDLL(None)
        begin, end, current = (process.pagefast_region_begin, process.pagefast_region_end,
                               process.pagefast_region_current)
    except AttributeError:
        raise Error("the libpagefast.so in this process has no regions (pagefast_region_begin is "
                    "missing): start the program with the library of this package") from None
    begin.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    begin.restype = ctypes.c_int
    end.argtypes = []
    end.restype = ctypes.c_int
    current.argtypes = []
    current.restype = ctypes.c_char_p
    _functions[:] = [begin, end, current]
    return _functions


def _begin(tag, keep, pool_only=False):
    # keep: a bool, or region flags (REGION_KEEP with REGION_KEEP_DISK or REGION_HOST_RELEASE).
    flags = (int(keep) & ~REGION_POOL_ONLY) | (REGION_POOL_ONLY if pool_only else 0)
    if _api()[0](tag.encode("ascii"), flags) != 0:
        _api()[1]()  # a refused begin takes its end all the same (docs/SLEEP.md)
        raise Error("pagefast could not open the region %r: %d (tag, policy) pairs in this process "
                    "already, none of them empty, or %d regions open on this thread (the log says which)"
                    % (tag, MAX_TAGS, MAX_DEPTH))
    _stack().append((tag, keep if type(keep) is int else bool(keep), bool(pool_only)))


def _end():
    if _api()[1]() != 0:
        raise Error("pagefast has no region open on this thread to end")
    stack = _stack()
    if stack:
        stack.pop()


class region(contextlib.ContextDecorator):
    """A region of `tag` on the calling thread for the duration of a `with`
    block, or of each call of a decorated function. keep=True: a sleep of
    the tag keeps the contents (copied to host memory, back at wake);
    keep=False: it discards them. A tag is 1 to 63 characters of
    A-Z a-z 0-9 _ . : - ; the same tag opened with keep and without makes
    two policies of one tag, each allocation keeping its region's.
    Raises Error when the library refuses (too many tags, too deep)."""

    def __init__(self, tag, keep=True):
        if not isinstance(tag, str) or not TAG.match(tag):
            raise ValueError(_BAD_TAG % (tag,))
        self.tag = tag
        self.keep = bool(keep)

    def __enter__(self):
        _begin(self.tag, self.keep)
        return self

    def __exit__(self, *exc):
        _end()
        return False

    def __repr__(self):
        return "pagefast.region(%r, keep=%r)" % (self.tag, self.keep)


def current_region():
    """The calling thread's innermost region's tag, or None outside any."""
    tag = _api()[2]()
    return None if tag is None else tag.decode("ascii")


@contextlib.contextmanager
def _opened(tag, keep, pool_only):
    """A region of `tag` for the block; pool_only: the program's own
    cuMemCreate memory made inside stays untagged."""
    if not isinstance(tag, str) or not TAG.match(tag):
        raise ValueError(_BAD_TAG % (tag,))
    _begin(tag, keep, pool_only)
    try:
        yield
    finally:
        _end()


@contextlib.contextmanager
def _outside():
    """Closes the regions this thread opened through this module for the
    block and opens them again after it: allocations inside carry no tag.
    Raises Error (regions as they were) when a region opened by C code
    stays open."""
    closed = list(_stack())
    for _ in closed:
        _end()
    try:
        if current_region() is not None:
            raise Error("a region opened outside Python (pagefast_region_begin) is open on this "
                        "thread: its allocations would stay tagged")
        yield
    finally:
        for tag, keep, pool_only in closed:
            _begin(tag, keep, pool_only)
