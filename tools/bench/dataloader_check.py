#!/usr/bin/env python3
"""tools/bench/dataloader_check.py: a PyTorch DataLoader whose worker
processes make CUDA tensors (shared with the main process through CUDA
IPC, docs/IPC.md), with pin_memory, checked batch by batch. Each item is a
CPU tensor (pinned by the loader's pin-memory thread) and a CUDA tensor
made on the worker's GPU; every batch's sums are compared with what they
must be (computed on the CPU), and a digest of all of them is printed.

Without --child it runs itself twice, without pagefast and with it
(--lib, default build/interpose/libpagefast.so, or LD_PRELOAD if set), and
passes when both runs saw every batch right and their digests are the
same. Last line: "dataloader check: PASS|FAIL ...".

usage: python3 tools/bench/dataloader_check.py [--lib PATH] [--batches 200] [--workers 4]
"""
import argparse
import hashlib
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ITEM_NUMEL = 1 << 16
BATCH = 8
PRIME = 1000003


class Items:
    """The dataset (a map-style one: __len__ and __getitem__), at module
    level so that the spawned workers can unpickle it."""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return self.batches * BATCH

    def __getitem__(self, i):
        import torch
        g = torch.Generator().manual_seed(i)
        cpu = torch.randint(0, 1000, (4096,), generator=g, dtype=torch.int64)
        gpu = torch.arange(ITEM_NUMEL, device="cuda", dtype=torch.int64) * (i + 1) % PRIME
        return cpu, gpu


def child(batches, workers):
    import torch
    from torch.utils.data import DataLoader

    batch_sums = {}
    for i in range(batches * BATCH):
        g = torch.Generator().manual_seed(i)
        cpu = int(torch.randint(0, 1000, (4096,), generator=g, dtype=torch.int64).sum())
        gpu = int((torch.arange(ITEM_NUMEL, dtype=torch.int64) * (i + 1) % PRIME).sum())
        s = batch_sums.setdefault(i // BATCH, [0, 0])
        s[0] += cpu
        s[1] += gpu

    loader = DataLoader(Items(batches), batch_size=BATCH, num_workers=workers, pin_memory=True, collate_fn=collate,
                        multiprocessing_context="spawn", prefetch_factor=4)
    digest = hashlib.sha256()
    seen = wrong = unpinned = 0
    for k, b in enumerate(loader):
        if not b.cpu.is_pinned():
            unpinned += 1
        cpu_sum = int(b.cpu.cuda(non_blocking=True).sum())
        gpu_sum = int(b.gpu.sum())
        if [cpu_sum, gpu_sum] != batch_sums.get(k):
            wrong += 1
        digest.update(f"{k} {cpu_sum} {gpu_sum}\n".encode())
        seen += 1
    torch.cuda.synchronize()
    ok = seen == batches and wrong == 0 and unpinned == 0
    print(f"RESULT dataloader {'OK' if ok else 'FAILED'} batches {seen} wrong {wrong} unpinned {unpinned} "
          f"digest {digest.hexdigest()[:16]}")
    return 0 if ok else 1


class Batch:
    """A batch the pin-memory thread pins in part: its CPU tensor (pinning
    a CUDA tensor is an error)."""

    def __init__(self, cpu, gpu):
        self.cpu, self.gpu = cpu, gpu

    def pin_memory(self, device=None):
        self.cpu = self.cpu.pin_memory()
        return self


def collate(items):
    import torch
    return Batch(torch.stack([c for c, _ in items]), torch.stack([g for _, g in items]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", default=os.environ.get("LD_PRELOAD") or os.path.join(ROOT, "build", "interpose",
                                                                                      "libpagefast.so"))
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        return child(args.batches, args.workers)
    lib = os.path.abspath(args.lib)
    if not os.path.exists(lib):
        print(f"missing {lib}")
        print("dataloader check: FAIL (no library)")
        return 2
    results = {}
    for label, preload in [("without pagefast", None), ("with pagefast", lib)]:
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        if preload:
            env["LD_PRELOAD"] = preload
        try:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--batches", str(args.batches),
                                "--workers", str(args.workers)], capture_output=True, text=True, env=env, timeout=1800)
            lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT dataloader")]
            line = lines[-1] if lines else f"no result (rc {r.returncode}): {r.stderr.strip()[-400:]}"
            ok = r.returncode == 0 and " OK " in line
        except subprocess.TimeoutExpired:
            line, ok = "hung (30 min)", False
        results[label] = (ok, line)
        print(f"{label}: {line}", flush=True)
    digests = {label: line.split("digest ")[-1] for label, (ok, line) in results.items() if "digest " in line}
    same = len(digests) == 2 and len(set(digests.values())) == 1
    passed = all(ok for ok, _ in results.values()) and same
    print(f"dataloader check: {'PASS' if passed else 'FAIL'} ({args.batches} batches, {args.workers} workers making "
          f"CUDA tensors, pin_memory; every batch's sums right in both runs: "
          f"{all(ok for ok, _ in results.values())}; same digest with and without pagefast: {same})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
