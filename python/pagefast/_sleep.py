"""Sleep and wake from Python, for the process that imports this: the
pool's device memory goes back to the driver (its contents, with keep, to
page-locked host memory) and comes back at the same addresses
(docs/POOL.md "Sleep and wake").

    import pagefast
    pagefast.sleep(keep=True)      # contents kept in host memory
    ...                            # another job may use the GPU
    pagefast.wake()

    with pagefast.asleep():        # sleep on entry, wake on exit
        ...

The library must already be in the process (pagefast-run, or LD_PRELOAD):
these functions look its C API up among the symbols the process has
loaded and never load it themselves, since a library loaded after the
CUDA driver serves nothing. The calls release the GIL while the copies
run. Sleep and wake call the CUDA driver: not from an atexit handler or a
finaliser, nor while a CUDA graph is being captured.
"""
import contextlib
import ctypes

__all__ = ["Error", "loaded", "sleep", "wake", "is_asleep", "asleep"]

# Flags of pagefast_sleep (interpose/pagefast.h).
_SLEEP_KEEP = 1
_SLEEP_FAIL = 2


class Error(RuntimeError):
    """pagefast is not in this process, or the driver refused: the message
    says which, and what state the memory is in."""


def _api():
    try:
        process = ctypes.CDLL(None)
        functions = (process.pagefast_sleep, process.pagefast_wake, process.pagefast_asleep)
    except (OSError, AttributeError):
        return None
    functions[0].argtypes = [ctypes.c_uint]
    for f in functions:
        f.restype = ctypes.c_int
    return functions


def loaded():
    """Whether libpagefast.so is in this process (so that sleep and wake can work)."""
    return _api() is not None


def _require():
    api = _api()
    if api is None:
        raise Error("pagefast is not loaded in this process: start it with pagefast-run, "
                    "or with LD_PRELOAD=$(python -m pagefast --lib)")
    return api


def sleep(keep=True, wait=True):
    """Puts every pool of the process to sleep. With keep (the default) the
    contents go to page-locked host memory first and come back at wake;
    without, the memory comes back with undefined contents. With wait (the
    default) an allocation made while asleep waits for wake; without, it
    fails with out-of-memory.

    Returns True when every chunk went back to the driver, False when some
    device memory stayed resident (memory another process maps, a refused
    call, or memory the program maps with its own cuMemCreate, such as
    PyTorch's expandable segments or JAX's: the log names it; what went
    back did). Raises Error when
    nothing changed: no pool yet, a stream capture under way, or the device
    could not be synchronised."""
    do_sleep = _require()[0]
    flags = (_SLEEP_KEEP if keep else 0) | (0 if wait else _SLEEP_FAIL)
    answer = do_sleep(flags)
    if answer < 0:
        raise Error("pagefast could not sleep (no pool in this process yet, a CUDA graph capture "
                    "under way, or the device could not be synchronised); nothing changed")
    return answer == 0


def wake():
    """Maps the pools' memory again at the same addresses and restores the
    kept contents; nothing to do when awake. Raises Error when the driver
    refused memory or a mapping: still asleep, call it again once memory
    is free."""
    do_wake = _require()[1]
    if do_wake() != 0:
        raise Error("pagefast could not wake (the driver refused device memory or a mapping, or "
                    "there is no pool): still asleep; call wake() again once the memory is free")


def is_asleep():
    """How many of the process's pools (one per device) are asleep."""
    return _require()[2]()


@contextlib.contextmanager
def asleep(keep=True, wait=True):
    """Asleep inside the block, awake after it (also when the block raises).
    Yields what sleep() returned."""
    complete = sleep(keep=keep, wait=wait)
    try:
        yield complete
    finally:
        wake()
