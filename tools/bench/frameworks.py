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
    # object, released when the last pointer to it goes. Count them as CuPy
    # makes them (Memory itself cannot be weakly referenced: count through a
    # pointer subclass that owns it).
    counts = {"alloc": 0, "free": 0}

    class CountedPointer(cupy.cuda.memory.MemoryPointer):
        def __del__(self):
            counts["free"] += 1

    def plain_malloc(size):
        mem = cupy.cuda.memory.Memory(size)
        if not size:
            return cupy.cuda.memory.MemoryPointer(mem, 0)
        counts["alloc"] += 1
        return CountedPointer(mem, 0)

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
    import gc

    gc.collect()
    cuda.current_context().deallocations.clear()  # Numba defers frees; flush them
    cuda.synchronize()
    # Numba defers frees and leaves some to the context's teardown at exit,
    # which releases memory without cuMemFree: it has no count of its own
    # frees to compare, so only allocations are compared.
    print(f"own allocations {n} frees -1")
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
