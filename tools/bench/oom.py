#!/usr/bin/env python3
"""tools/bench/oom.py: torch.cuda.OutOfMemoryError under the allocator in
use. Allocates 1 GiB tensors until PyTorch raises OutOfMemoryError, frees
them, does it again, then checks that the process carries on: a matmul
(cuBLAS), a convolution (cuDNN) and kernels used for the first time
(loaded lazily), each checked against the CPU. Prints the two totals for
comparison with and without pagefast."""
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
torch.manual_seed(0)
a = torch.randn(256, 256)
x = torch.randn(2, 8, 32, 32)
w = torch.randn(16, 8, 3, 3)
ok = True
try:
    ok &= torch.allclose((a.cuda() @ a.cuda()).cpu(), a @ a, rtol=1e-3, atol=1e-3)
    conv = torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu()
    ok &= torch.allclose(conv, torch.nn.functional.conv2d(x, w, padding=1), rtol=1e-3, atol=1e-3)
    ok &= torch.equal(torch.special.erfcx(a.cuda()[:4, :4].double()).cpu(), torch.special.erfcx(a[:4, :4].double()))
except RuntimeError as e:
    print(f"after the fills: {e}")
    ok = False
print(f"RESULT mode=oom first_gib={first} second_gib={second} carries_on={int(ok)}")
