"""pagefast: a CUDA driver interposer that serves cuMemAlloc/cuMemFree from a
pool on CUDA virtual memory management. This package carries the preload
library and the tools (docs/PACKAGING.md):

    LD_PRELOAD=$(python -m pagefast --lib) python train.py
    pagefast-run -- python train.py
    python -m pagefast            # what is installed, the driver, the pool

The library works by being preloaded, not through Python. A program run
with it can put its pools to sleep and wake them from Python
(pagefast.sleep, pagefast.wake, `with pagefast.asleep(keep=True): ...`), all of
them or the memory of one tag (`with pagefast.region("kv_cache"): ...`,
then pagefast.sleep("kv_cache")), which call the library already loaded in
the process (docs/SLEEP.md). pagefast.torch gives each tag its own PyTorch
memory pool, and pagefast.torch_memory_saver has torch_memory_saver's
names; both import torch when first used, not with this package.
"""
import importlib
import os
import sys

from ._region import current_region, region
from ._sleep import Error, asleep, is_asleep, loaded, sleep, wake

__all__ = ["library_path", "tool_path", "__version__", "Error", "loaded", "sleep", "wake", "is_asleep", "asleep",
           "region", "current_region"]

# Submodules that import torch: loaded on first use (pagefast.torch), never
# by `import pagefast`.
_LAZY = ("torch", "torch_memory_saver")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


_HERE = os.path.dirname(os.path.abspath(__file__))
try:
    from ._version import __version__  # written by meson.build from the project version
except ImportError:  # a source tree, not an installed package
    __version__ = "unknown"


# A clone's build folder, for this package run from the clone's python/
# (PYTHONPATH=python): build/ beside it, as tools/quickstart makes it.
_CLONE_BUILD = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build")


def library_path():
    """Absolute path of the libpagefast.so inside this package, or, for the
    package run from a clone, of the one its build made
    (build/interpose/libpagefast.so); the package's own path when neither
    exists."""
    packaged = os.path.join(_HERE, "lib", "libpagefast.so")
    built = os.path.join(_CLONE_BUILD, "interpose", "libpagefast.so")
    if not os.path.isfile(packaged) and os.path.isfile(built):
        return built
    return packaged


def tool_path(name):
    """Absolute path of a tool shipped inside this package (bin/, then
    libexec/pagefast/), or in a clone's build (build/tools/)."""
    for folder in (os.path.join(_HERE, "bin"), os.path.join(_HERE, "libexec", "pagefast"),
                   os.path.join(_CLONE_BUILD, "tools")):
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    return os.path.join(_HERE, "bin", name)


def _exec_tool(name):
    path = tool_path(name)
    if not os.access(path, os.X_OK):
        sys.stderr.write("%s: error: %s is missing from the pagefast package\n" % (name, path))
        return 127
    os.execv(path, [path] + sys.argv[1:])
    return 127  # not reached


def run_launcher():
    """Console script `pagefast-run`: the launcher inside the package, which
    finds the library beside it (../lib/libpagefast.so)."""
    return _exec_tool("pagefast-run")


def run_stat():
    """Console script `pagefast-stat`."""
    return _exec_tool("pagefast-stat")


def run_replay():
    """Console script `pagefast-replay`."""
    return _exec_tool("pagefast-replay")


def run_simulate():
    """Console script `pagefast-simulate`: the pool's policy over a trace, on the CPU."""
    return _exec_tool("pagefast-simulate")


def run_ctl():
    """Console script `pagefast-ctl`: sleep, wake and status of a running process's pools."""
    return _exec_tool("pagefast-ctl")
