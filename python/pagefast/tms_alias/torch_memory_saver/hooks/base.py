"""torch_memory_saver.hooks.base as pagefast serves it: the hook modes,
both served by the preloaded libpagefast.so."""
HookMode = str
