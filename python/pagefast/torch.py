"""Regions for PyTorch programs (docs/SLEEP.md "PyTorch"). A pagefast
region tags what the thread allocates from the driver; PyTorch's caching
allocator, though, serves a tensor from a block it already holds, which
may sit in a segment allocated under another tag, and places a new
segment's blocks for any later tensor. So each tag here gets its own
torch.cuda.MemPool, used only inside regions of that tag: the caching
allocator then never mixes the blocks of two tags, and sleeping one tag
leaves every tensor of the others valid.

    import pagefast.torch
    with pagefast.torch.region("kv_cache", keep=False):
        kv = torch.empty(..., device="cuda")     # in the tag's pool, tagged
    with pagefast.torch.region("weights"):
        model = load_model()
    g = torch.cuda.CUDAGraph()
    with pagefast.torch.graph(g, "cuda_graph", keep=False):
        out = model(static_input)                # the graph's memory is tagged
    pagefast.sleep("kv_cache"); pagefast.sleep("cuda_graph"); pagefast.sleep("weights")

With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
the pool maps its memory with its own cuMemCreate, which pagefast tags as
well. The pools are per (tag, keep, device) and live as long as the
process; torch.cuda.use_mem_pool acts on the calling thread, as a region.
While a tag sleeps, allocate nothing in its regions: a block PyTorch has
cached in the tag's pool is handed out without a driver call, asleep.
"""
import contextlib
import threading

import torch

from ._region import region as _region

__all__ = ["region", "graph", "mem_pool"]

_pools = {}
_pools_lock = threading.Lock()


def mem_pool(tag, keep=True, device=None):
    """The torch.cuda.MemPool of a tag (one per tag, keep and device, made
    at first use and kept for reuse). keep: a bool, or the region flags of
    pagefast.h (PAGEFAST_REGION_KEEP_DISK, PAGEFAST_REGION_HOST_RELEASE:
    a pool of their own). device: an index, or None for the current
    device."""
    index = torch.cuda.current_device() if device is None else int(device)
    key = (tag, int(keep), index)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            with torch.cuda.device(index):
                pool = torch.cuda.MemPool()
            _pools[key] = pool
    return pool


@contextlib.contextmanager
def region(tag, keep=True, pool=None):
    """A pagefast region of `tag` (pagefast.region) on the calling thread,
    with PyTorch's allocations routed to the tag's MemPool (mem_pool(tag,
    keep)) or to `pool` when given. Yields the pool."""
    with _region(tag, keep):
        if pool is None:
            pool = mem_pool(tag, keep)
        with torch.cuda.use_mem_pool(pool):
            yield pool


@contextlib.contextmanager
def graph(cuda_graph, tag, keep=True, pool=None, **kwargs):
    """torch.cuda.graph(cuda_graph, pool=pool, **kwargs) inside a pagefast
    region of `tag`: the memory the capture allocates is tagged, so that
    pagefast.sleep(tag) releases it and the graph replays at the same
    addresses after wake. Without `pool` the graph gets its own private
    pool, as with torch.cuda.graph: it holds only memory allocated during
    this capture, so nothing of another tag; pass a pool (a token from
    torch.cuda.graph_pool_handle() or another graph's pool()) to share
    memory between graphs of the same tag, as torch allows."""
    with _region(tag, keep):
        with torch.cuda.graph(cuda_graph, pool=pool, **kwargs):
            yield
