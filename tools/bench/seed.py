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
few long stalls. With --sched, one more line (SCHED) says how the first
pass's host time was spent by the scheduler: the program's thread's time
on a CPU, waiting on a run queue (preempted or not yet placed) and its
context switches (voluntary: it slept, on a lock or a wait; involuntary:
it was preempted), the CPUs it started and ended on, and the same for a
`pagefast-vmm` thread if there is one (its time on a CPU and waiting
during the pass, its CPU after it). The kernel brings a running thread's
time up to date only at ticks and switches: the times are good to a tick
(4 ms at 250 Hz), the switch counts exact. Linux only; fields it cannot
read are left out."""
import os
import resource
import sys
import time

import torch


def schedstat(path):
    """(ns on a CPU, ns waiting on a run queue, timeslices) of a thread."""
    try:
        with open(path) as f:
            run, wait, slices = (int(v) for v in f.read().split()[:3])
        return run, wait, slices
    except (OSError, ValueError):
        return None


def last_cpu(path):
    try:
        with open(path) as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def workers():
    """/proc paths of this process's pagefast-vmm and pagefast-grow threads
    (growth ahead of the own-VMM cache and of the pool)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            try:
                with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
                    if f.read().strip() in ("pagefast-vmm", "pagefast-grow"):
                        out.append(f"/proc/{os.getpid()}/task/{tid}")
            except OSError:
                pass
    except OSError:
        pass
    return out


class Sched:
    """The scheduler's account of the program's thread (and of any
    pagefast-vmm thread) between start() and stop()."""

    def start(self):
        self.cpu0 = last_cpu("/proc/thread-self/stat")
        self.ru0 = resource.getrusage(resource.RUSAGE_THREAD)
        self.main0 = schedstat("/proc/thread-self/schedstat")
        self.work0 = {w: schedstat(w + "/schedstat") for w in workers()}

    def stop(self):
        self.main1 = schedstat("/proc/thread-self/schedstat")
        self.ru1 = resource.getrusage(resource.RUSAGE_THREAD)
        self.cpu1 = last_cpu("/proc/thread-self/stat")
        self.work1 = {w: schedstat(w + "/schedstat") for w in workers()}
        self.work_cpu = [last_cpu(w + "/stat") for w in self.work1]

    def line(self, label):
        f = [f"SCHED label={label}", f"main_cpu_start={self.cpu0}", f"main_cpu_end={self.cpu1}",
             f"main_vcsw={self.ru1.ru_nvcsw - self.ru0.ru_nvcsw}", f"main_ivcsw={self.ru1.ru_nivcsw - self.ru0.ru_nivcsw}"]
        if self.main0 and self.main1:
            f += [f"main_run_ms={(self.main1[0] - self.main0[0]) / 1e6:.3f}",
                  f"main_wait_ms={(self.main1[1] - self.main0[1]) / 1e6:.3f}",
                  f"main_slices={self.main1[2] - self.main0[2]}"]
        run = wait = 0
        for w, after in self.work1.items():
            before = self.work0.get(w) or (0, 0, 0)
            if after:
                run += after[0] - before[0]
                wait += after[1] - before[1]
        if self.work1:
            f += [f"workers={len(self.work1)}", f"worker_run_ms={run / 1e6:.3f}", f"worker_wait_ms={wait / 1e6:.3f}",
                  "worker_cpu=" + "/".join(str(c) for c in self.work_cpu)]
        return " ".join(f)


def one_pass(per_call=None, sched=None):
    torch.cuda.synchronize()
    if sched:
        sched.start()
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
    if sched:
        sched.stop()
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
    sched = Sched() if "--sched" in sys.argv else None
    first, c1, first_host = one_pass(per_call, sched)
    second, c2, _ = one_pass()
    torch.cuda.empty_cache()
    after, c3, _ = one_pass()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    args = [a for a in sys.argv[1:] if a not in ("--prewarm", "--iter-times", "--sched")]
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
    if sched:
        print(sched.line(label))


if __name__ == "__main__":
    main()
