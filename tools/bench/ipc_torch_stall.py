#!/usr/bin/env python3
"""tools/bench/ipc_torch_stall.py: torch.multiprocessing sharing CUDA
tensors while the producing process is stopped (SIGSTOP) for a while
mid-run (docs/IPC.md "Holds"). The producer puts N tensors (12 MiB each,
every one its own allocation, each filled with a value of its own) on a
queue for a spawned consumer, which opens each (the open happens as the
queue item is unpickled), checks its sum, and checks a tensor it has held
from the start. Midway the producer has itself stopped for --stop-s
seconds (a shell does kill -STOP / kill -CONT): the consumer's opens then
may fail (with pagefast the exporter answers them; they fail after its 2 s
wait), but a tensor that opens must hold its values, and the held one
must never change. Meanwhile the producer allocates and frees filler
tensors and empties its cache, so that memory given back too early would
be reused. Last line: RESULT ipc_torch_stall OK|FAILED ...

    python3 tools/bench/ipc_torch_stall.py [--tensors 400] [--stop-s 5]
(run it with and without LD_PRELOAD=libpagefast.so: tools/gpu/ipc-stall-check
does both.)
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.multiprocessing as mp

NUMEL = 3 << 20  # 12 MiB of float32: its own cudaMalloc each


def value_of(i):
    return float(i % 97 + 1)


def consumer(inbox, outbox):
    torch.cuda.set_device(0)
    ok = failed = bad = held_bad = 0
    first_error = ""
    held = None
    while True:
        try:
            item = inbox.get()
        except Exception as e:  # the CUDA IPC open, as the item is unpickled
            failed += 1
            first_error = first_error or f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            continue
        if item is None:
            break
        kind, i, t = item
        if kind == "held":
            held = t
            outbox.put("holding")
            continue
        if float(t.double().sum()) == value_of(i) * NUMEL:
            ok += 1
        else:
            bad += 1
        del t
        if held is not None and float(held.double().sum()) != 3.0 * held.numel():
            held_bad += 1
    torch.cuda.synchronize()
    outbox.put((ok, failed, bad, held_bad, first_error))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=400)
    parser.add_argument("--stop-s", type=float, default=5.0)
    args = parser.parse_args()
    mp.set_start_method("spawn")
    inbox, outbox = mp.Queue(), mp.Queue()
    p = mp.Process(target=consumer, args=(inbox, outbox))
    p.start()
    torch.cuda.set_device(0)
    held = torch.full((5 << 20,), 3.0, device="cuda")
    torch.cuda.synchronize()
    inbox.put(("held", 0, held))
    outbox.get(timeout=300)
    del held  # the consumer holds it from now on
    keep, fillers = [], []
    stopper = None
    for i in range(args.tensors):
        t = torch.full((NUMEL,), value_of(i), device="cuda")
        torch.cuda.synchronize()
        keep.append(t)  # the producer keeps what it shared (torch's rule for CUDA tensors)
        inbox.put(("t", i, t))
        fillers.append(torch.full((5 << 20,), 7.0, device="cuda"))
        if len(fillers) > 4:
            fillers.pop(0)
            torch.cuda.empty_cache()  # the freed filler goes back to cudaFree (the pool, with pagefast)
        if i == args.tensors // 3 and args.stop_s > 0:
            pid = os.getpid()
            stopper = subprocess.Popen(["sh", "-c", f"sleep 0.2; kill -STOP {pid}; sleep {args.stop_s}; kill -CONT {pid}"])
    inbox.put(None)
    ok, failed, bad, held_bad, first_error = outbox.get(timeout=900)
    p.join(timeout=300)
    stopped = stopper is not None and stopper.wait(timeout=60) == 0
    good = bad == 0 and held_bad == 0 and p.exitcode == 0 and ok + failed == args.tensors and stopped
    print(f"RESULT ipc_torch_stall {'OK' if good else 'FAILED'} tensors {args.tensors} opened_right {ok} "
          f"open_failed {failed} wrong {bad} held_changed {held_bad} consumer_exit {p.exitcode} "
          f"stopped {int(stopped)} first_error {first_error or 'none'!r}")
    del keep, fillers
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
