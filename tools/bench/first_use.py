#!/usr/bin/env python3
"""tools/bench/first_use.py: how much device memory the driver and the CUDA
libraries take on first use, outside the program's allocator. This is what
pagefast's `headroom` must leave free (docs/POOL.md "Headroom").

Run it without pagefast. After each step it reads the device's free memory
(cuMemGetInfo through torch.cuda.mem_get_info) and subtracts what PyTorch's
caching allocator holds (memory_reserved), so the figure is memory taken
by the driver (context, modules loaded lazily) and by the libraries' own
handles and buffers. Prints one line per step and a last line

  FIRST_USE total_mib=N largest_step_mib=M

usage: python3 tools/bench/first_use.py [--nccl]
"""
import argparse
import os
import tempfile

import torch

MiB = 1 << 20


def outside(total):
    free, _ = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nccl", action="store_true", help="also a one-rank NCCL group and an all_reduce")
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    _, total = torch.cuda.mem_get_info()
    base = outside(total)
    print(f"STEP context outside_mib={base / MiB:.0f}")
    steps = []

    def step(name, fn):
        before = outside(total)
        fn()
        torch.cuda.synchronize()
        after = outside(total)
        steps.append(after - before)
        print(f"STEP {name} delta_mib={(after - before) / MiB:.0f} outside_mib={after / MiB:.0f}")

    a = torch.randn(2048, 2048, device="cuda")
    step("cublas_fp32", lambda: a @ a)
    step("cublaslt_bf16", lambda: (a.bfloat16() @ a.bfloat16()).float())
    x = torch.randn(8, 64, 56, 56, device="cuda")
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    step("cudnn_conv", lambda: conv(x).sum().backward())
    step("kernels", lambda: [torch.softmax(a, 1), torch.nn.functional.layer_norm(a, (2048,)), a.sort(1),
                             a.topk(5, 1), a.cumsum(1), torch.nn.functional.gelu(a), a.argmax(1), a[a > 0].sum()])
    step("cusolver", lambda: torch.linalg.qr(a[:512, :512]))
    step("cufft", lambda: torch.fft.rfft(a))
    step("curand", lambda: torch.rand(1 << 20, device="cuda").normal_())
    if args.nccl:
        import torch.distributed as dist
        path = os.path.join(tempfile.mkdtemp(), "rendezvous")

        def nccl():
            dist.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
            t = torch.ones(1 << 20, device="cuda")
            dist.all_reduce(t)
        step("nccl", nccl)
    print(f"FIRST_USE total_mib={(outside(total) - base) / MiB:.0f} largest_step_mib={max(steps) / MiB:.0f} "
          f"context_mib={base / MiB:.0f}")
    if args.nccl:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
