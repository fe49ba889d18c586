#!/usr/bin/env python3
"""tools/bench/frameworks.py: the non-PyTorch programs of the GPU check.
Each makes a known number of device allocations through its framework's
plain path and prints `own allocations N frees M` plus a checksum that must
not change under pagefast.

  frameworks.py cupy    CuPy with its memory pool switched off
  frameworks.py numba   Numba device arrays
  frameworks.py jax     JAX with XLA_PYTHON_CLIENT_ALLOCATOR=platform
"""
import os
import sys

SIZES = [512, 4096, 1 << 16, 1 << 20, 3 << 20, 20 << 20]
ROUNDS = 10


def cupy_case():
    import weakref

    import cupy

    # No pool: every allocation is one cudaMalloc made by a cupy Memory
    # object, and its release one cudaFree. Count them as CuPy makes them.
    counts = {"alloc": 0, "free": 0}

    def on_free():
        counts["free"] += 1

    def plain_malloc(size):
        mem = cupy.cuda.memory.Memory(size)
        if size:
            counts["alloc"] += 1
            weakref.finalize(mem, on_free)
        return cupy.cuda.memory.MemoryPointer(mem, 0)

    cupy.cuda.set_allocator(plain_malloc)
    total = 0.0
    for r in range(ROUNDS):
        for b in SIZES:
            a = cupy.full(b // 4, r + 1, dtype=cupy.float32)
            total += float(a.sum())
            del a
    cupy.cuda.Device().synchronize()
    import gc

    gc.collect()
    print(f"own allocations {counts['alloc']} frees {counts['free']}")
    print(f"checksum {total:.1f}")


def numba_case():
    from numba import cuda
    import numpy as np

    n = 0
    total = 0.0
    for r in range(ROUNDS):
        for b in SIZES:
            host = np.full(b // 4, r + 1, dtype=np.float32)
            d = cuda.to_device(host)
            n += 1
            total += float(d.copy_to_host().sum())
            del d
    cuda.current_context().deallocations.clear()
    cuda.synchronize()
    print(f"own allocations {n} frees {n}")
    print(f"checksum {total:.1f}")


def jax_case():
    os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    import jax
    import jax.numpy as jnp

    total = 0.0
    n = 0
    for r in range(ROUNDS):
        for b in SIZES:
            a = jax.device_put(jnp.full((b // 4,), r + 1, dtype=jnp.float32))
            n += 1
            total += float(a.sum())
            a.delete()
    stats = jax.devices()[0].memory_stats() or {}
    print(f"own allocations {stats.get('num_allocs', -1)} frees -1 arrays {n}")
    print(f"checksum {total:.1f}")


if __name__ == "__main__":
    {"cupy": cupy_case, "numba": numba_case, "jax": jax_case}[sys.argv[1]]()
