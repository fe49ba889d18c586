#!/usr/bin/env python3
"""tools/bench/batch_finder.py: what every automatic batch-size finder does
(Accelerate's find_executable_batch_size, Lightning's tuner): try a training
step at a batch size, halve it on torch.cuda.OutOfMemoryError after
empty_cache, until a step fits; then train STEPS steps at that size.

Run it with and without pagefast: the final batch size and the losses must
be the same, bit for bit (deterministic cuDNN, a fixed seed, random
weights and data made on the CPU). Prints

  RESULT mode=batch_finder model=M batch=B steps=S tries=T loss_hash=H first_loss=L last_loss=L step_s=X

usage: batch_finder.py [--model resnet50|gpt2] [--start N] [--steps S]
"""
import argparse
import hashlib
import struct
import time

import torch


def make(model_name):
    if model_name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(num_classes=1000)

        def batch(n, g):
            return (torch.randn(n, 3, 224, 224, generator=g), torch.randint(0, 1000, (n,), generator=g))

        def loss_of(m, x, y):
            return torch.nn.functional.cross_entropy(m(x), y)
        return model, batch, loss_of
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    config._attn_implementation = "eager"
    model = GPT2LMHeadModel(config)

    def batch(n, g):
        ids = torch.randint(0, config.vocab_size, (n, 1024), generator=g)
        return ids, ids

    def loss_of(m, x, y):
        return m(input_ids=x, labels=y).loss
    return model, batch, loss_of


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "gpt2"])
    ap.add_argument("--start", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model, batch, loss_of = make(args.model)
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    n, tries = args.start, 0
    while True:
        tries += 1
        try:
            g = torch.Generator().manual_seed(1)
            x, y = batch(n, g)
            loss = loss_of(model, x.cuda(), y.cuda())
            loss.backward()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            del x, y, loss
            break
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            x = y = loss = None
            torch.cuda.empty_cache()
            n //= 2
            if n == 0:
                raise
    # Training from the same start: the weights as made, fresh optimiser.
    model.load_state_dict(state)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    g = torch.Generator().manual_seed(2)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        x, y = batch(n, g)
        loss = loss_of(model, x.cuda(non_blocking=True), y.cuda(non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    elapsed = time.perf_counter() - start
    digest = hashlib.sha256(b"".join(struct.pack("<d", v) for v in losses)).hexdigest()[:16]
    print(f"RESULT mode=batch_finder model={args.model} batch={n} steps={args.steps} tries={tries} "
          f"loss_hash={digest} first_loss={losses[0]!r} last_loss={losses[-1]!r} step_s={elapsed / args.steps:.4f}")


if __name__ == "__main__":
    main()
