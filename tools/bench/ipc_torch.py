#!/usr/bin/env python3
"""tools/bench/ipc_torch.py: torch.multiprocessing sharing CUDA tensors
(docs/IPC.md). The parent puts CUDA tensors (small, 4 MiB, 80 MiB,
and a view at an offset into a shared storage) on a queue for a spawned
child; the child checks them, adds 1 in place and answers; the parent checks
that it sees the child's writes. Then a tensor the parent drops while the
child still holds it: the child keeps its values. Prints RESULT lines;
run it with and without LD_PRELOAD=libpagefast.so: they must match.

    python3 tools/bench/ipc_torch.py
"""
import sys
import time

import torch
import torch.multiprocessing as mp


def child(inbox, outbox):
    torch.cuda.set_device(0)
    while True:
        item = inbox.get()
        if item is None:
            break
        name, t, expect_sum = item
        before = float(t.double().sum())
        t.add_(1)
        torch.cuda.synchronize()
        outbox.put((name, before == expect_sum, float(t.double().sum())))
        if name == "held":
            # The parent drops its tensor and allocates over it; ours stays.
            inbox.get()
            outbox.put(("held-after", float(t.double().sum())))
        del t


def main():
    mp.set_start_method("spawn")
    torch.manual_seed(0)
    inbox, outbox = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(inbox, outbox))
    p.start()
    base = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    tensors = {
        "small": torch.arange(100, device="cuda", dtype=torch.float32),
        "4MiB": torch.randn(1 << 20, device="cuda"),
        "80MiB": torch.randn(20 << 20, device="cuda"),
        "view": base[12345:12345 + 4096],
    }
    ok = True
    t0 = time.perf_counter()
    for name, t in tensors.items():
        expect = float(t.double().sum())
        inbox.put((name, t, expect))
        got_name, matched, child_sum = outbox.get(timeout=120)
        torch.cuda.synchronize()
        parent_sum = float(t.double().sum())
        same = got_name == name and matched and abs(parent_sum - (expect + t.numel())) < 1e-3 * max(1.0, abs(expect))
        ok &= same
        print(f"RESULT tensor {name} child_saw_parent_data {matched} parent_sees_child_writes "
              f"{abs(parent_sum - child_sum) < 1e-6 * max(1.0, abs(parent_sum))}")
    shared_s = time.perf_counter() - t0
    # Dropped by the parent while the child holds it.
    held = torch.full((5 << 20,), 3.0, device="cuda")
    inbox.put(("held", held, float(held.double().sum())))
    _, matched, held_sum = outbox.get(timeout=120)
    del held
    filler = [torch.full((5 << 20,), 7.0, device="cuda") for _ in range(8)]
    torch.cuda.synchronize()
    inbox.put("go")
    _, after = outbox.get(timeout=120)
    kept = matched and after == held_sum
    ok &= kept
    print(f"RESULT held child_keeps_values_after_parent_drops {kept}")
    inbox.put(None)
    p.join(timeout=120)
    ok &= p.exitcode == 0
    del filler
    print(f"RESULT ipc_torch {'OK' if ok else 'FAILED'} child_exit {p.exitcode} seconds {shared_s:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
