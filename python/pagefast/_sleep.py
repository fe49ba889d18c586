"""Sleep and wake from Python, for the process that imports this: the
pool's device memory goes back to the driver (its contents, with keep, to
page-locked host memory) and comes back at the same addresses
(docs/POOL.md "Sleep and wake"), for the whole process or for the memory
of one tag (docs/SLEEP.md; regions: _region.py).

    import pagefast
    pagefast.sleep(keep=True)      # contents kept in host memory (keep=False: dropped)
    ...                            # another job may use the GPU
    pagefast.wake()

    pagefast.sleep("kv_cache")     # only that tag's memory, as its regions said
    pagefast.wake("kv_cache")

    with pagefast.asleep(keep=True):   # sleep on entry, wake on exit
        ...

One default with pagefast-ctl: a sleep of the whole process needs keep=True
or keep=False (ValueError without, as pagefast-ctl sleep needs --keep or
--discard); a tag's sleep without keep does what its regions said (as
pagefast-ctl sleep --tag). One kind of answer: sleep() and wake() both
return True when everything was done, False when some memory stayed as
it was (resident through a sleep: shared through CUDA IPC, refused by the
driver, or the program's own cuMemCreate memory outside the pool); they
raise Error when nothing changed, and for a tag no region ever had
(checked first, so the library logs nothing for it).

The library must already be in the process (pagefast-run, or LD_PRELOAD):
these functions look its C API up among the symbols the process has
loaded and never load it themselves, since a library loaded after the
CUDA driver serves nothing. The calls release the GIL while the copies
run. Sleep and wake call the CUDA driver: not from an atexit handler or a
finaliser, nor while a CUDA graph is being captured.
"""
import contextlib
import ctypes

from ._constants import SLEEP_DISCARD as _SLEEP_DISCARD
from ._constants import SLEEP_FAIL as _SLEEP_FAIL
from ._constants import SLEEP_KEEP as _SLEEP_KEEP
from ._constants import UNKNOWN_TAG as _UNKNOWN_TAG

__all__ = ["Error", "loaded", "sleep", "wake", "is_asleep", "asleep"]


class Error(RuntimeError):
    """pagefast is not in this process, or the driver refused: the message
    says which, and what state the memory is in."""


def _symbols(names, argtypes):
    """The functions `names` of the process's libpagefast, or None when one
    is missing (no library, or one without them)."""
    try:
        process = ctypes.CDLL(None)
        functions = [getattr(process, name) for name in names]
    except (OSError, AttributeError):
        return None
    for f, args in zip(functions, argtypes):
        f.argtypes = args
        f.restype = ctypes.c_int
    return functions


def _api():
    return _symbols(("pagefast_sleep", "pagefast_wake", "pagefast_asleep"), ([ctypes.c_uint], [], []))


def _tag_api():
    return _symbols(("pagefast_sleep_tag", "pagefast_wake_tag", "pagefast_tag_asleep"),
                    ([ctypes.c_char_p, ctypes.c_uint], [ctypes.c_char_p], [ctypes.c_char_p]))


def loaded():
    """Whether libpagefast.so is in this process (so that sleep and wake can work)."""
    return _api() is not None


_NOT_LOADED = ("pagefast is not loaded in this process: start it with pagefast-run, "
               "or with LD_PRELOAD=$(python -m pagefast --lib)")


def _require():
    api = _api()
    if api is None:
        raise Error(_NOT_LOADED)
    return api


def _require_tags():
    api = _tag_api()
    if api is None:
        _require()
        raise Error("the libpagefast.so in this process has no regions (pagefast_sleep_tag is missing): "
                    "start the program with the library of this package")
    return api


def _tag_bytes(tag):
    if not isinstance(tag, str):
        raise TypeError("a tag is a str, not %s" % type(tag).__name__)
    return tag.encode("utf-8")


def _unknown(tag):
    return Error("no region ever had the tag %r: nothing changed" % tag)


_KEEP_NEEDED = ("a sleep of the whole process needs keep=True (the contents are copied to host memory and "
                "come back at wake) or keep=False (the memory goes back without copying; after wake the "
                "blocks are at the same addresses, their contents lost), as pagefast-ctl sleep needs "
                "--keep or --discard")


def _known(tag):
    """Raises Error for a tag no region ever had, before the library is
    asked to sleep or wake it (which would log a warning as well)."""
    if _require_tags()[2](_tag_bytes(tag)) == _UNKNOWN_TAG:
        raise _unknown(tag)


def _keep_first(tag, keep):
    """sleep(True) and asleep(False) keep their meaning of keep: a bool in
    the tag's place is keep."""
    if isinstance(tag, bool):
        return None, tag
    return tag, keep


def sleep(tag=None, keep=None, wait=True):
    """Puts memory to sleep: every pool of the process when tag is None,
    else the memory of the regions of that tag (memory outside them stays).

    keep=True copies the contents to page-locked host memory first and
    brings them back at wake; keep=False gives the memory back with
    undefined contents. The whole process needs one of the two (ValueError
    without, as pagefast-ctl sleep); for a tag, keep=None is what each of
    its regions said (pagefast.region(tag, keep)).
    With wait (the default) an allocation that needs the sleeping memory
    waits for wake; without, it fails with out-of-memory.

    Returns True when every chunk went back to the driver, False when some
    device memory stayed resident (memory another process maps, a refused
    call, or, without a tag, memory the program maps with its own
    cuMemCreate outside the pool: the log names it; what went back did).
    Raises Error when nothing changed: no pool yet, a stream capture under
    way, the device could not be synchronised, or a tag no region ever had."""
    tag, keep = _keep_first(tag, keep)
    flags = 0 if wait else _SLEEP_FAIL
    if tag is None:
        if keep is None:
            raise ValueError(_KEEP_NEEDED)
        flags |= _SLEEP_KEEP if keep else 0
        answer = _require()[0](flags)
    else:
        _known(tag)
        if keep is not None:
            flags |= _SLEEP_KEEP if keep else _SLEEP_DISCARD
        answer = _require_tags()[0](_tag_bytes(tag), flags)
    if answer == _UNKNOWN_TAG:
        raise _unknown(tag)
    if answer < 0:
        raise Error("pagefast could not sleep%s (no pool in this process yet, a CUDA graph capture "
                    "under way, or the device could not be synchronised); nothing changed"
                    % ("" if tag is None else " tag %r" % tag))
    return answer == 0


def wake(tag=None):
    """Maps the memory again at the same addresses and restores the kept
    contents: every pool's when tag is None, else that tag's; nothing to do
    when awake. Raises Error when the driver refused memory or a mapping
    (still asleep, call it again once memory is free), or for a tag no
    region ever had. Returns True (every pool awake), the answer sleep()
    gives when everything was done."""
    if tag is None:
        answer = _require()[1]()
    else:
        _known(tag)
        answer = _require_tags()[1](_tag_bytes(tag))
    if answer == _UNKNOWN_TAG:
        raise _unknown(tag)
    if answer != 0:
        raise Error("pagefast could not wake%s (the driver refused device memory or a mapping, or "
                    "there is no pool): still asleep; call wake() again once the memory is free"
                    % ("" if tag is None else " tag %r" % tag))
    return True


def is_asleep(tag=None):
    """Without a tag: how many of the process's pools are asleep (one per
    device for memory outside regions, one per device and tag for the
    rest). With a tag: whether that tag's memory is asleep (Error for a
    tag no region ever had)."""
    if tag is None:
        return _require()[2]()
    answer = _require_tags()[2](_tag_bytes(tag))
    if answer == _UNKNOWN_TAG:
        raise _unknown(tag)
    return answer == 1


@contextlib.contextmanager
def asleep(tag=None, keep=None, wait=True):
    """Asleep inside the block, awake after it (also when the block raises);
    arguments as sleep() (the whole process needs keep=True or False).
    Yields what sleep() returned."""
    tag, keep = _keep_first(tag, keep)
    complete = sleep(tag, keep=keep, wait=wait)
    try:
        yield complete
    finally:
        wake(tag)
