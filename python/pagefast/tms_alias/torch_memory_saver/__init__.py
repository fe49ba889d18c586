"""`import torch_memory_saver` served by pagefast (docs/SLEEP.md "Coming
from torch_memory_saver"): with python/pagefast/tms_alias first on
PYTHONPATH (pagefast-run --tms), a framework written for
torch_memory_saver gets pagefast.torch_memory_saver without a change to
its source. The submodules a program or its tests import
(entrypoint, utils, hooks.mode_preload, testing_utils) are here too."""
from pagefast.torch_memory_saver import TorchMemorySaver, torch_memory_saver  # noqa: F401

from .hooks.mode_preload import configure_subprocess  # noqa: F401
