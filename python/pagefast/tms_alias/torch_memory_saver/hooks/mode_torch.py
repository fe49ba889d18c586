"""torch_memory_saver.hooks.mode_torch as pagefast serves it: nothing to
load, the preloaded libpagefast.so sees torch's allocations either way."""
