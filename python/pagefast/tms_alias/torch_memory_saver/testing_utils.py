"""torch_memory_saver.testing_utils as pagefast serves it: the helpers
torch_memory_saver's own tests import."""
from .utils import is_xpu  # noqa: F401


def get_device():
    return "xpu" if is_xpu() else "cuda"


def empty_cache():
    import torch
    torch.cuda.empty_cache()


def get_and_print_gpu_memory(message, gpu_id=0):
    """Memory in use on the device as the real package's tests measure it:
    NVML's count (torch.cuda.device_memory_used: memory pagefast's pool
    holds idle counts as used, as other processes see it); the driver's
    free memory where torch has no NVML reading or on ROCm. Printed."""
    import torch
    nvml = getattr(torch.cuda, "device_memory_used", None)
    if nvml is not None and not getattr(torch.version, "hip", None):
        used = nvml(gpu_id)
    else:
        free, total = torch.cuda.mem_get_info(gpu_id)
        used = total - free
    print("GPU %d memory: %.2f GB (%s)" % (gpu_id, used / 1024 ** 3, message))
    return used
