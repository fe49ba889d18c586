"""torch_memory_saver.utils as pagefast serves it: the lookup of a
package's hook library by the GPU runtime torch was built for (a CUDA
build: <stem>_cu<major>.*.so; ROCm or XPU: <stem>.*.so; in this folder,
else the one above), falling back to pagefast's libpagefast.so, which
serves both of torch_memory_saver's hook modes; and change_env."""
import contextlib
import glob
import os

from pagefast.torch_memory_saver import is_xpu  # noqa: F401

_CUDA_MAJORS = (13, 12)


def _torch_version():
    try:
        import torch
    except ImportError:
        return None
    return getattr(torch, "version", None)


def _cuda_major():
    version = _torch_version()
    cuda = getattr(version, "cuda", None)
    if cuda:
        try:
            return int(str(cuda).split(".")[0])
        except ValueError:
            pass
    import ctypes
    for major in _CUDA_MAJORS:
        try:
            ctypes.CDLL("libcudart.so.%d" % major)
            return major
        except OSError:
            continue
    return None


def get_binary_path_from_package(stem):
    """The one library of `stem` built for this runtime beside the
    package, else pagefast's libpagefast.so. Several: RuntimeError."""
    here = os.path.dirname(os.path.abspath(__file__))
    if getattr(_torch_version(), "hip", None) or is_xpu():
        pattern = stem + ".*.so"
    else:
        major = _cuda_major()
        pattern = stem + ("_cu%d.*.so" % major if major is not None else "*.so")
    for folder in (here, os.path.dirname(here)):
        found = sorted(glob.glob(os.path.join(glob.escape(folder), pattern)))
        if len(found) > 1:
            raise RuntimeError("torch_memory_saver: more than one library matches %r: %s" % (pattern, found))
        if found:
            import pathlib
            return pathlib.Path(found[0])
    from pagefast.torch_memory_saver import _loaded_library_path
    return _loaded_library_path()


@contextlib.contextmanager
def change_env(key, value):
    """os.environ[key] = value for the block, then as it was (absent again
    if it was absent)."""
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
