"""torch_memory_saver.hooks.mode_preload as pagefast serves it."""
import contextlib

from pagefast.torch_memory_saver import configure_subprocess as _configure

from ..utils import get_binary_path_from_package


@contextlib.contextmanager
def configure_subprocess():
    """LD_PRELOAD for the children started inside the block: the hook
    library (libpagefast.so) first, what was there after it."""
    with _configure(str(get_binary_path_from_package("torch_memory_saver_hook_mode_preload"))):
        yield
