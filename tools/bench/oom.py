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
# Exact comparisons need FP32 arithmetic on the GPU: cuDNN's TF32 default
# rounds a convolution's inputs to 10 bits of mantissa.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
a = torch.randn(256, 256)
x = torch.randn(2, 8, 32, 32)
w = torch.randn(16, 8, 3, 3)
checks = {
    "matmul": lambda: torch.allclose((a.cuda() @ a.cuda()).cpu(), a @ a, rtol=1e-4, atol=1e-4),
    "conv": lambda: torch.allclose(torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu(),
                                   torch.nn.functional.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4),
    # A kernel this program has not used yet, loaded lazily after the fills.
    "erfcx": lambda: torch.allclose(torch.special.erfcx(a.cuda()[:4, :4].double()).cpu(),
                                    torch.special.erfcx(a[:4, :4].double()), rtol=1e-12, atol=0),
}
failed = []
for name, check in checks.items():
    try:
        if not check():
            failed.append(f"{name}: differs from the CPU")
    except RuntimeError as e:
        failed.append(f"{name}: {str(e).splitlines()[0]}")
for line in failed:
    print(f"after the fills: {line}")
print(f"RESULT mode=oom first_gib={first} second_gib={second} carries_on={int(not failed)}")
