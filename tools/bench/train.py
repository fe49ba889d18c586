#!/usr/bin/env python3
"""tools/bench/train.py: a short PyTorch training loop on random data (no
downloads): a torchvision ResNet-18, or a small transformer built from a
config. Deterministic settings, so that runs with and without pagefast must
give the same losses bit for bit. Prints the median step time and the
losses' exact hex values."""
import statistics
import sys
import time

import torch


def build(kind):
    if kind == "resnet18":
        import torchvision

        model = torchvision.models.resnet18(num_classes=100)
        x = torch.randn(64, 3, 224, 224)
        y = torch.randint(0, 100, (64,))
        return model, x, y, torch.nn.CrossEntropyLoss()
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, dropout=0.0,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=6), torch.nn.Linear(512, 1000))
    x = torch.randn(32, 256, 512)
    y = torch.randint(0, 1000, (32, 256))
    loss = torch.nn.CrossEntropyLoss()
    return model, x, y, lambda out, tgt: loss(out.reshape(-1, 1000), tgt.reshape(-1))


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    # The fused attention kernels' backward passes (flash, memory-efficient,
    # cuDNN) accumulate with atomics: the transformer's losses then differ
    # from run to run without pagefast too (seen on the H200, 2026-12-02).
    # The math kernel is deterministic.
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    model, x, y, loss_fn = build(kind)
    model = model.cuda()
    x, y = x.cuda(), y.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times, losses = [], []
    for step in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    step_s = statistics.median(times[5:])
    print(f"RESULT model={kind} steps={steps} median_step_s={step_s:.6f} first_step_s={times[0]:.4f}")
    print("losses " + " ".join(float(l).hex() for l in losses))


if __name__ == "__main__":
    main()
