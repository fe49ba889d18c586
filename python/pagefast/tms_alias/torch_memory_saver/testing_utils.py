"""torch_memory_saver.testing_utils as pagefast serves it: the helpers
torch_memory_saver's own tests import."""
from .utils import is_xpu  # noqa: F401


def get_device():
    return "xpu" if is_xpu() else "cuda"


def empty_cache():
    import torch
    torch.cuda.empty_cache()


def get_and_print_gpu_memory(message, gpu_id=0):
    """Memory in use on the device, as the driver counts it (printed)."""
    import torch
    free, total = torch.cuda.mem_get_info(gpu_id)
    used = total - free
    print("GPU %d memory: %.2f GB (%s)" % (gpu_id, used / 1024 ** 3, message))
    return used
