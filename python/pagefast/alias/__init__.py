"""A folder to put on PYTHONPATH: its torch_memory_saver package is
pagefast.torch_memory_saver under torch_memory_saver's own name, so that a
framework that imports torch_memory_saver (SGLang, slime, verl) uses
pagefast's regions with no change to its code (docs/SLEEP.md "Coming from
torch_memory_saver"):

    export PYTHONPATH="$(python -c 'import pagefast.alias as a; print(a.__path__[0])')${PYTHONPATH:+:$PYTHONPATH}"
    pagefast-run -- python -m sglang.launch_server ... --enable-memory-saver

A PYTHONPATH entry comes before site-packages, so this package is found
first even where the real torch_memory_saver is installed; child
processes inherit the variable, as they inherit LD_PRELOAD.
"""
