#!/usr/bin/env python3
"""tools/bench/hf_train.py: a Hugging Face model that nobody here wrote,
trained for a few steps on random tokens (no download: GPT-2 small built from
its config, random weights). Meant to run with and without pagefast, and with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, whose segment then grows
through the program's own VMM calls (docs/OWN-VMM.md).

  hf_train.py [STEPS] [--empty-cache-at K]

Sequence lengths vary from step to step (64..1024 tokens, batch 8), so the
allocator grows as the longest step so far grows. --empty-cache-at K calls
torch.cuda.empty_cache() after step K (an evaluation phase would), so the
steps after it grow again. Deterministic settings: losses must match bit for
bit with and without pagefast.

Prints one RESULT line (first_step_s: step 0, growth and first kernel loads
included; regrow_step_s: the step after the empty_cache, if any;
median_step_s: steps 3.. except that one; peak_reserved_mib: PyTorch's own
max_memory_reserved) and a losses line of exact hex values."""
import os
import statistics
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402


def main():
    args = sys.argv[1:]
    empty_at = -1
    if "--empty-cache-at" in args:
        i = args.index("--empty-cache-at")
        empty_at = int(args[i + 1])
        del args[i:i + 2]
    steps = int(args[0]) if args else 20

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)
    # Eager attention: its backward is deterministic (the fused kernels'
    # are not; they are also switched off above, so that sdpa would run the
    # math kernel). transformers 5 takes the choice on the config.
    try:
        cfg._attn_implementation = "eager"
    except (AttributeError, ValueError):
        pass
    model = GPT2LMHeadModel(cfg).cuda()
    attention = getattr(model.config, "_attn_implementation", "?")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    lengths = [int(torch.randint(64, 1025, (1,), generator=gen)) for _ in range(steps)]
    batches = [torch.randint(0, cfg.vocab_size, (8, n), generator=gen) for n in lengths]

    times, losses = [], []
    for step in range(steps):
        tokens = batches[step].cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=tokens, labels=tokens)
        out.loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(out.loss.item())
        if step == empty_at:
            torch.cuda.empty_cache()

    regrow = times[empty_at + 1] if 0 <= empty_at < steps - 1 else float("nan")
    warm = [t for i, t in enumerate(times) if i >= 3 and i != empty_at + 1] or times
    peak = torch.cuda.max_memory_reserved() / 2**20
    print(f"RESULT first_step_s={times[0]:.5f} regrow_step_s={regrow:.5f} median_step_s={statistics.median(warm):.5f} "
          f"peak_reserved_mib={peak:.0f} steps={steps} attention={attention}")
    print("losses " + " ".join(float(l).hex() for l in losses))


if __name__ == "__main__":
    main()
