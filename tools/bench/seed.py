#!/usr/bin/env python3
"""tools/bench/seed.py: the seed benchmark. 1000 x torch.randn(1024, 1024)
on the GPU, synchronised: first pass, second pass (cached), and a pass after
torch.cuda.empty_cache(). Prints one RESULT line with the three times and
PyTorch's own count of device allocations (num_device_alloc / free), which
the GPU check compares with pagefast's stats, and a checksum of the data.

first_host_s is the first pass's time until its last randn call returned
(the program's thread: allocator, driver calls, launches); the rest of
first_s is waiting for the GPU. With --prewarm, 1000 4 MiB tensors are
allocated with torch.empty (no kernel) and freed before the first pass, so
that pass grows nothing: what a first pass costs with a warm allocator (the
randn kernel's first load included), the floor for any allocator.
With --iter-times, one more line (ITER) describes the first pass's 1000
launches one by one (each randn call's time on the program's thread): the
percentiles, and how much of the pass lies above the median call, in all
and in the slowest 10 and 100 calls: a cost spread over every call, or a
few long stalls."""
import sys
import time

import torch


def one_pass(per_call=None):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if per_call is None:
        xs = [torch.randn(1024, 1024, device="cuda") for _ in range(1000)]
    else:
        xs, last = [], t0
        for _ in range(1000):
            xs.append(torch.randn(1024, 1024, device="cuda"))
            now = time.perf_counter()
            per_call.append(now - last)
            last = now
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    checksum = float(sum(x[0, 0].item() for x in xs[:10]))
    del xs
    return dt, checksum, host


def main():
    torch.manual_seed(0)
    torch.cuda.init()
    torch.empty(1, device="cuda")  # context and caching allocator up
    if "--prewarm" in sys.argv:
        xs = [torch.empty(1024, 1024, device="cuda") for _ in range(1000)]
        del xs
        torch.cuda.synchronize()
    per_call = [] if "--iter-times" in sys.argv else None
    first, c1, first_host = one_pass(per_call)
    second, c2, _ = one_pass()
    torch.cuda.empty_cache()
    after, c3, _ = one_pass()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    args = [a for a in sys.argv[1:] if a not in ("--prewarm", "--iter-times")]
    label = args[0] if args else "run"
    print(f"RESULT label={label} first_s={first:.5f} second_s={second:.5f} after_empty_cache_s={after:.5f} first_host_s={first_host:.5f} "
          f"num_device_alloc={stats.get('num_device_alloc', -1)} num_device_free={stats.get('num_device_free', -1)}")
    print(f"checksum {c1:.6f} {c2:.6f} {c3:.6f}")
    if per_call:
        us = sorted(t * 1e6 for t in per_call)
        med = us[len(us) // 2]
        above = [u - med for u in us if u > med]
        print(f"ITER label={label} p10_us={us[len(us) // 10]:.1f} p50_us={med:.1f} p90_us={us[len(us) * 9 // 10]:.1f} "
              f"p99_us={us[len(us) * 99 // 100]:.1f} max_us={us[-1]:.1f} above_median_ms={sum(above) / 1e3:.3f} "
              f"slowest10_above_ms={sum(above[-10:]) / 1e3:.3f} slowest100_above_ms={sum(above[-100:]) / 1e3:.3f}")


if __name__ == "__main__":
    main()
