#!/usr/bin/env python3
"""tools/bench/footprint.py: the footprint's GPU measurements (docs/POOL.md
"Footprint", "Sleep and wake"). Run with PyTorch's caching off
(PYTORCH_NO_CUDA_MEMORY_CACHING=1), with and without pagefast preloaded;
tools/bench/footprint-run runs every case and prints a table.

  footprint.py train resnet18|gpt2 STEPS [--sleep-at K [--keep]]
      A training loop (ResNet-18, or a GPT-2-small-sized decoder on random
      tokens whose sequence length changes every step: the dynamic-shape
      loop). Prints steps/s (median step), the peak GPU memory this process
      held (NVML, polled by tools/bench/nvml_peak.py; nvidia-smi every 20 ms
      where NVML is not there), and the losses' exact hex
      values. --sleep-at K: pagefast_sleep between step K and K+1 (keep by
      default: the run must give the same losses bit for bit), then wake.
  footprint.py sleep GIB
      Fills GIB GiB of 1 GiB tensors, then pagefast_sleep(KEEP) and
      pagefast_wake: the time of each, the copy bandwidth they reached,
      nvidia-smi's used memory before, during and after, and whether every
      byte came back (checked on the GPU); then torch's pinned-copy
      bandwidth of this machine, the sleep and wake GiB/s next to it, and
      the phases pagefast logged (PAGEFAST_LOG=info: sync, copy, unmap and
      release / create, map and access, copy, host give-back; =debug also
      the copy threads' own breakdown), read back from this process's
      stderr.
"""
import contextlib
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import torch

KEEP = 1


def lib():
    try:
        l = ctypes.CDLL(None)
        l.pagefast_sleep.argtypes = [ctypes.c_uint]
        return l
    except (OSError, AttributeError):
        return None


def gpu_used_mib():
    """This process's GPU memory as nvidia-smi sees it (MiB), else the device's."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(os.getpid()):
            return int(parts[1])
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True).stdout
    return int(out.split()[0]) if out.split() else -1


class PeakSampler:
    """The peak of this process's GPU memory while the block runs: polled
    through NVML by tools/bench/nvml_peak.py (a process of its own, well
    under a millisecond a sample), else by nvidia-smi every 20 ms (tens of
    milliseconds a query: it misses short-lived buffers). `source` says
    which, with the sample count."""

    def __init__(self):
        self.peak = 0
        self.source = "nvidia-smi"
        self.stop = False
        self.child = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, gpu_used_mib())
            time.sleep(0.02)

    def __enter__(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PAGEFAST") and k != "LD_PRELOAD" and not k.startswith("PYTORCH")}
        try:
            self.child = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                        "nvml_peak.py"), str(os.getpid())],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env)
        except OSError:
            self.child = None
        if self.child:
            time.sleep(0.5)  # NVML's start; a child that failed has exited by now
            if self.child.poll() is not None:
                self.child = None
        if not self.child:
            self.thread.start()
        return self

    def __exit__(self, *a):
        if self.child:
            out, err = self.child.communicate(input="", timeout=60)
            try:
                r = json.loads(out.strip().splitlines()[-1])
                self.peak = r["peak_mib"]
                self.source = f"NVML, {r['samples']} samples, one per {r['interval_ms']} ms"
                return
            except (ValueError, IndexError, KeyError):
                print(f"nvml_peak failed: {err.strip()[-300:]}; no peak", file=sys.stderr)
                self.source = "none"
                return
        self.stop = True
        self.thread.join()


def gpt2_like():
    # GPT-2 small: 12 layers, d_model 768, 12 heads, vocabulary 50257.
    layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, dropout=0.0,
                                             batch_first=True, norm_first=True)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50257, 768)
            self.pos = torch.nn.Embedding(1024, 768)
            self.body = torch.nn.TransformerEncoder(layer, num_layers=12)
            self.head = torch.nn.Linear(768, 50257)

        def forward(self, tokens):
            n = tokens.shape[1]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
            h = self.embed(tokens) + self.pos(torch.arange(n, device=tokens.device))
            return self.head(self.body(h, mask=mask, is_causal=True))

    return Model()


def train(kind, steps, sleep_at, keep):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    gen = torch.Generator().manual_seed(1)
    if kind == "resnet18":
        import torchvision

        model = torchvision.models.resnet18(num_classes=100).cuda()
        x = torch.randn(64, 3, 224, 224, generator=gen).cuda()
        y = torch.randint(0, 100, (64,), generator=gen).cuda()
        batch = lambda step: (x, y)
        loss_of = lambda out, tgt: torch.nn.functional.cross_entropy(out, tgt)
    else:
        model = gpt2_like().cuda()
        lengths = [int(torch.randint(64, 1025, (1,), generator=gen)) for _ in range(steps)]
        tokens = [torch.randint(0, 50257, (8, n + 1), generator=gen) for n in lengths]
        batch = lambda step: (tokens[step][:, :-1].cuda(), tokens[step][:, 1:].cuda())
        loss_of = lambda out, tgt: torch.nn.functional.cross_entropy(out.reshape(-1, 50257), tgt.reshape(-1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pf = lib()
    times, cpu, losses, sleep_note = [], [], [], ""
    with PeakSampler() as peak:
        for step in range(steps):
            inp, tgt = batch(step)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            c0 = time.process_time()
            opt.zero_grad(set_to_none=True)
            loss = loss_of(model(inp), tgt)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            losses.append(loss.item())
            if step == sleep_at:
                if not pf or not hasattr(pf, "pagefast_sleep"):
                    sys.exit("--sleep-at needs pagefast preloaded")
                t1 = time.perf_counter()
                rc = pf.pagefast_sleep(KEEP if keep else 0)
                t2 = time.perf_counter()
                during = gpu_used_mib()
                rc2 = pf.pagefast_wake()
                t3 = time.perf_counter()
                sleep_note = (f"sleep rc {rc} {t2 - t1:.3f} s, used during sleep {during} MiB, "
                              f"wake rc {rc2} {t3 - t2:.3f} s")
    warm = times[3:] or times
    # CPU time of every thread of the process (pagefast's included) per
    # step: what a thread that waits by spinning costs.
    warm_cpu = cpu[3:] or cpu
    print(f"{kind}: {1 / statistics.median(warm):.2f} steps/s, peak held {peak.peak} MiB ({peak.source}), "
          f"cpu {1000 * statistics.median(warm_cpu):.1f} ms/step")
    if sleep_note:
        print(sleep_note)
    print("losses " + " ".join(float(l).hex() for l in losses))


@contextlib.contextmanager
def stderr_lines(into):
    """fd 2 (where pagefast logs) into a file for the duration; its lines
    are appended to `into` and written to stderr again afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(f"/tmp/footprint-stderr-{os.getpid()}.txt", "w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            text = f.read().decode(errors="replace")
            os.unlink(f.name)
    sys.stderr.write(text)
    into.extend(text.splitlines())


def logged_phases(lines):
    """The phases of pagefast's sleep and wake lines (docs/POOL.md "Sleep
    and wake": the copy path), one printable line each."""
    out = []
    for line in lines:
        m = re.search(r"(device \d+ asleep in \d+ ms): .*?; (.*)$", line)
        if m:
            out.append(f"  sleep: {m.group(1)}: {m.group(2)}")
        m = re.search(r"(device \d+ awake in \d+ ms): (.*)$", line)
        if m:
            out.append(f"  wake:  {m.group(1)}: {m.group(2)}")
        m = re.search(r"(device \d+: copy (to|from) host: .*)$", line)
        if m:
            out.append(f"  copy threads: {m.group(1)}")
    return out


def sleep_bench(gib):
    pf = lib()
    if not pf or not hasattr(pf, "pagefast_sleep"):
        sys.exit("run with LD_PRELOAD=libpagefast.so")
    blocks = []
    for i in range(gib):
        t = torch.empty(1 << 28, dtype=torch.int32, device="cuda")  # 1 GiB
        t.copy_(torch.arange(1 << 28, dtype=torch.int32, device="cuda") * (i + 1))
        blocks.append(t)
    torch.cuda.synchronize()
    before = gpu_used_mib()
    log = []
    with stderr_lines(log):
        t0 = time.perf_counter()
        rc = pf.pagefast_sleep(KEEP)
        t1 = time.perf_counter()
    during = gpu_used_mib()
    with stderr_lines(log):
        t1w = time.perf_counter()
        rc2 = pf.pagefast_wake()
        t2 = time.perf_counter()
    after = gpu_used_mib()
    sleep_s, wake_s = t1 - t0, t2 - t1w
    ok = all(bool(torch.equal(b, torch.arange(1 << 28, dtype=torch.int32, device="cuda") * (i + 1)))
             for i, b in enumerate(blocks))
    print(f"sleep {gib} GiB: rc {rc}, {sleep_s:.2f} s ({gib / sleep_s:.1f} GiB/s); wake rc {rc2}, "
          f"{wake_s:.2f} s ({gib / wake_s:.1f} GiB/s)")
    print(f"nvidia-smi used: before {before} MiB, asleep {during} MiB, after wake {after} MiB; "
          f"contents {'identical' if ok else 'DIFFER'}")
    # For comparison: the pinned copy bandwidth of this machine, one way each.
    host = torch.empty(1 << 28, dtype=torch.int32, pin_memory=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for b in blocks[:8]:
        host.copy_(b)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    for b in blocks[:8]:
        b.copy_(host)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    n = min(8, len(blocks))
    d2h, h2d = n / (t1 - t0), n / (t2 - t1)
    print(f"pinned copies (torch, 1 GiB each): D2H {d2h:.1f} GiB/s, H2D {h2d:.1f} GiB/s")
    print(f"sleep {gib / sleep_s:.1f} GiB/s vs pinned D2H {d2h:.1f} GiB/s ({100 * gib / sleep_s / d2h:.0f}%); "
          f"wake {gib / wake_s:.1f} GiB/s vs pinned H2D {h2d:.1f} GiB/s ({100 * gib / wake_s / h2d:.0f}%)")
    phases = logged_phases(log)
    print("phases (pagefast log):" if phases else
          "phases: none logged (run with PAGEFAST_LOG=info, or =debug for the copy threads' breakdown)")
    for line in phases:
        print(line)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "train":
        sleep_at = int(sys.argv[sys.argv.index("--sleep-at") + 1]) if "--sleep-at" in sys.argv else -1
        train(sys.argv[2], int(sys.argv[3]), sleep_at, "--no-keep" not in sys.argv)
    elif len(sys.argv) == 3 and sys.argv[1] == "sleep":
        sleep_bench(int(sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
