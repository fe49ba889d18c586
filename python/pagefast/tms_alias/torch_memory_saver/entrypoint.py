"""torch_memory_saver.entrypoint: pagefast.torch_memory_saver itself, so
that what is set here (is_xpu, for one) is what the module reads."""
import sys

import pagefast.torch_memory_saver as _module

sys.modules[__name__] = _module
