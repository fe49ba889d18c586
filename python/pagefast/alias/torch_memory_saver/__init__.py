"""torch_memory_saver, answered by pagefast (pagefast.torch_memory_saver):
found first when the folder above is on PYTHONPATH (pagefast/alias).
Every public name is pagefast's object itself, so the singleton is one
whichever name a module imports it by."""
from pagefast.torch_memory_saver import TorchMemorySaver, configure_subprocess, torch_memory_saver

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]
