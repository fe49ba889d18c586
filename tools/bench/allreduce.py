#!/usr/bin/env python3
"""tools/bench/allreduce.py: one rank of an NCCL all-reduce job, started by
torchrun (docs/BENCHMARKS.md "Several GPUs, many processes"). Each rank
fills 1 GiB of float32 with rank + 1 on its own GPU (LOCAL_RANK),
all-reduces it 20 times (after 5 warm-ups), checks
that every element is the sum 1 + 2 + ... + world, and prints one RESULT
line: the median time, the bus bandwidth as nccl-tests reports it
(algorithm bandwidth x 2 (n - 1) / n), the devices on which pagefast holds
a pool (only the rank's own when it is preloaded), and the CPUs and NUMA
node the process is bound to.

Multicast stays off: run it with NCCL_NVLS_ENABLE=0 (tools/bench/multi.py
does)."""
import ctypes
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


class PoolStats(ctypes.Structure):
    # interpose/pagefast.h: pagefast_pool_stats, 17 uint64_t fields.
    _fields_ = [(f"f{i}", ctypes.c_uint64) for i in range(17)]


def pagefast_view(devices):
    """(pooled device ordinals, NUMA report) from pagefast's C API, or
    (None, None) when pagefast is not loaded."""
    me = ctypes.CDLL(None)
    try:
        get = me.pagefast_pool_stats_get
        stats_json = me.pagefast_stats_json
    except AttributeError:
        return None, None
    get.argtypes = [ctypes.c_int, ctypes.POINTER(PoolStats)]
    pooled = [d for d in range(devices) if get(d, ctypes.byref(PoolStats())) == 0]
    stats_json.restype = ctypes.c_size_t
    stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    need = stats_json(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    stats_json(buf, need + 1)
    try:
        numa = json.loads(buf.value.decode()).get("numa")
    except ValueError:
        numa = None
    return pooled, numa


def main():
    local = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    nbytes = 1 << 30
    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    for _ in range(5):
        x.fill_(rank + 1)
        dist.all_reduce(x)
    times = []
    for _ in range(20):
        x.fill_(rank + 1)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    expect = world * (world + 1) / 2
    ok = bool((x == expect).all().item())
    t = statistics.median(times)
    busbw = nbytes / t / 1e9 * 2 * (world - 1) / world
    pooled, numa = pagefast_view(torch.cuda.device_count())
    node = None
    if isinstance(numa, dict):
        node = numa.get("node")
    print(f"RESULT rank={rank} local_rank={local} world={world} ok={int(ok)} time_s={t:.6f} busbw_gbs={busbw:.2f} "
          f"pooled_devices={'none' if pooled is None else ','.join(map(str, pooled)) or '-'} "
          f"cpus={len(os.sched_getaffinity(0))} numa_node={node}", flush=True)
    if numa is not None:
        print(f"NUMA rank={rank} {json.dumps(numa, separators=(',', ':'))}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
