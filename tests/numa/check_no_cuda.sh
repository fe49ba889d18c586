#!/bin/sh
# tests/numa/check_no_cuda.sh: nothing in numa/ may call CUDA (the driver
# or the runtime) nor name its library: binding happens before the program
# initialises CUDA, and must not do it for them. Checks the undefined
# symbols and the strings of the numa static library.
# usage: check_no_cuda.sh <libpf_numa.a>
set -eu
lib="$1"
if nm -u "$lib" | grep -E '(^|[[:space:]])(cu[A-Z]|cuda[A-Z])' ; then
  echo "numa/ references CUDA symbols (above)" >&2
  exit 1
fi
if strings "$lib" | grep -E 'libcuda|libcudart' ; then
  echo "numa/ names a CUDA library (above)" >&2
  exit 1
fi
echo "numa/: no CUDA symbol, no CUDA library name"
