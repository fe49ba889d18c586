#!/usr/bin/env python3
"""tools/bench/jax_loop.py: an allocation-heavy JAX loop for run.py's `jax`
section; run it with XLA_PYTHON_CLIENT_ALLOCATOR=platform (JAX then asks
the platform for every buffer and gives it back when the buffer dies).
Each step makes buffers of several sizes, reduces them and drops them.
Prints one RESULT line (median step time, total) and a checksum that must
not change under pagefast."""
import statistics
import sys
import time

import jax
import jax.numpy as jnp

SIZES = [1 << 10, 1 << 16, 1 << 20, 5 << 20, 20 << 20, 64 << 20]  # float32 elements * 4 bytes


@jax.jit
def step(x):
    return jnp.sum(x * 2.0 + 1.0)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for n in SIZES:  # compile once per shape, outside the timing
        step(jnp.ones(n // 4, dtype=jnp.float32)).block_until_ready()
    times, total = [], 0.0
    for i in range(steps):
        t0 = time.perf_counter()
        acc = 0.0
        for n in SIZES:
            x = jnp.full(n // 4, float(i % 7), dtype=jnp.float32)
            acc += float(step(x))
            del x
        times.append(time.perf_counter() - t0)
        total += acc
    print(f"RESULT label=jax median_step_s={statistics.median(times):.6f} total_s={sum(times):.4f} "
          f"backend={jax.default_backend()}")
    print(f"checksum {total:.1f}")


if __name__ == "__main__":
    main()
