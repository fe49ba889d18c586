#!/usr/bin/env python3
"""tools/bench/oom.py: torch.cuda.OutOfMemoryError under the allocator in
use. Allocates 1 GiB tensors until PyTorch raises OutOfMemoryError, frees
them, does it again, then checks that the process carries on (a small
matmul). Prints the two totals for comparison with and without pagefast."""
import torch


def fill():
    held = []
    try:
        while True:
            held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        pass
    n = len(held)
    del held
    torch.cuda.empty_cache()
    return n


first = fill()
second = fill()
a = torch.randn(256, 256, device="cuda")
ok = bool(torch.isfinite(a @ a).all().item())
print(f"RESULT mode=oom first_gib={first} second_gib={second} carries_on={int(ok)}")
