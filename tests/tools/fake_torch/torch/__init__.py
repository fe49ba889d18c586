"""tests/tools/fake_torch/torch: a test double of the few torch names
pagefast.torch and pagefast.torch_memory_saver use (torch.cuda.MemPool,
use_mem_pool, graph, current_device, device), and tensors over bytes at
an address (tensor.py). It allocates no device memory: it records each
call, with the pagefast region open on the calling thread at that moment,
in torch.cuda.calls, for test_tms_compat.py to check the
order of regions and pools. It proves what pagefast does around these
calls, not how PyTorch's allocator behaves."""
from . import cuda, version  # noqa: F401
from .tensor import Tensor, device_tensor, dtype, empty, float32, frombuffer, int64, uint8  # noqa: F401
