#!/usr/bin/env python3
"""tests/tools/doctor_cases.py: python -m pagefast (the doctor) and the end
of tools/quickstart as a user meets them in a clone, on the fake driver.

- clone: with PYTHONPATH=python and no installed package, the doctor and
  --lib find build/interpose/libpagefast.so and the launcher in build/tools;
  with no build at all it says the library is missing without offering its
  path as a command to run.
- refused: a setting the library refuses under PAGEFAST_STRICT=1 is said to
  be refused (exit status 3), not "does not load" (1); so is a PAGEFAST_*
  variable pagefast does not read, with what was meant, even where the
  environment carries the library's "already said" marker.
- quickstart: tools/quickstart --after-build ends with pagefast's one-line
  summary of the run and the next three commands, not raw counters.

usage: doctor_cases.py CASE --build DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402

ARGS = None  # set by casekit.main
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(*parts):
    return os.path.join(os.path.abspath(ARGS.build), *parts)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PAGEFAST", "FAKECUDA")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env["LD_LIBRARY_PATH"] = build("tests", "fakecuda")
    env.update(extra or {})
    return env


def run(argv, env, cwd=None):
    return subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)


def make_clone(root, with_build=True):
    """A clone's layout: python/pagefast from the source, and build/ with the
    library and the tools of the build under test."""
    shutil.copytree(os.path.join(SOURCE, "python", "pagefast"), os.path.join(root, "python", "pagefast"),
                    ignore=shutil.ignore_patterns("lib", "bin", "libexec", "__pycache__", "_version.py"))
    if with_build:
        os.makedirs(os.path.join(root, "build", "interpose"))
        os.makedirs(os.path.join(root, "build", "tools"))
        os.symlink(build("interpose", "libpagefast.so"), os.path.join(root, "build", "interpose", "libpagefast.so"))
        for name in ("pagefast-run", "pagefast-stat", "pagefast-ctl"):
            os.symlink(build("tools", name), os.path.join(root, "build", "tools", name))
    return os.path.join(root, "python")


def doctor(pythonpath, extra=None, args=()):
    return run([sys.executable, "-m", "pagefast", *args], env=clean_env(dict(extra or {}, PYTHONPATH=pythonpath)),
               cwd="/")


def case_clone():
    with tempfile.TemporaryDirectory() as root:
        pythonpath = make_clone(root)
        lib = os.path.join(root, "build", "interpose", "libpagefast.so")
        r = doctor(pythonpath, args=["--lib"])
        check(r.returncode == 0 and r.stdout.strip() == lib, f"--lib from a clone: {lib} ({r.returncode} {r.stdout!r}"
              f" {r.stderr!r})")
        r = doctor(pythonpath)
        check(r.returncode == 0 and "pool here   yes" in r.stdout and f"LD_PRELOAD={lib} " in r.stdout,
              f"the doctor from a clone finds the build's library: rc {r.returncode} {r.stdout!r}")
        check(os.path.join(root, "build", "tools", "pagefast-run") in r.stdout,
              f"and the build's launcher ({r.stdout!r})")
    with tempfile.TemporaryDirectory() as root:
        pythonpath = make_clone(root, with_build=False)
        r = doctor(pythonpath)
        check(r.returncode == 1 and "cannot load: missing" in r.stdout and "LD_PRELOAD=" not in r.stdout,
              f"no build: missing, and no command naming the missing path ({r.returncode} {r.stdout!r})")


def case_refused():
    with tempfile.TemporaryDirectory() as root:
        pythonpath = make_clone(root)
        r = doctor(pythonpath, {"PAGEFAST_STRICT": "1", "PAGEFAST_CONF": "chunksize:1M"})
        check(r.returncode == 3 and "pool here   no: a setting is refused" in r.stdout
              and "stops at load (exit status 125)" in r.stdout and "did you mean chunk_size?" in r.stdout
              and "does not load" not in r.stdout,
              f"a refused setting under PAGEFAST_STRICT=1: refused, rc 3 ({r.returncode} {r.stdout!r})")
        r = doctor(pythonpath, {"PAGEFAST_CONF": "chunksize:1M"})
        check(r.returncode == 3 and "a setting is refused" in r.stdout, f"without strict: rc 3 ({r.returncode})")
        meant = "PAGEFAST_LIMIT: not a variable pagefast reads: did you mean PAGEFAST_CONF=limit:?"
        r = doctor(pythonpath, {"PAGEFAST_LIMIT": "40G"})
        check(r.returncode == 3 and meant in r.stdout and "pool here   no:" in r.stdout,
              f"PAGEFAST_LIMIT: reported refused, with what was meant ({r.returncode} {r.stdout!r})")
        # The marker a preloaded parent leaves does not hide it from the doctor.
        said = run(["sh", "-c", "printenv PAGEFAST_SAID"],
                   env=clean_env({"PAGEFAST_LIMIT": "40G", "LD_PRELOAD": build("interpose", "libpagefast.so")}))
        check(said.stdout.strip() != "", f"the library leaves its marker ({said.stdout!r} {said.stderr!r})")
        r = doctor(pythonpath, {"PAGEFAST_LIMIT": "40G", "PAGEFAST_SAID": said.stdout.strip()})
        check(r.returncode == 3 and meant in r.stdout, f"with the marker inherited: still reported ({r.stdout!r})")
        r = doctor(pythonpath, {"PAGEFAST_STRICT": "1", "PAGEFAST_CONF": "chunk_size:4M"})
        check(r.returncode == 0 and "pool here   yes" in r.stdout, f"good settings under strict: yes ({r.stdout!r})")


def case_quickstart():
    r = run([os.path.join(SOURCE, "tools", "quickstart"), "--after-build", build()], env=clean_env())
    lines = r.stdout.splitlines()
    served = [l for l in lines if l.startswith("quickstart: pagefast served it: ")]
    check(r.returncode == 0 and len(served) == 1 and " allocation calls, " in served[0],
          f"the summary line ({r.returncode} {r.stdout!r} {r.stderr!r})")
    check(len(lines) >= 4 and "python3 -m pagefast" in lines[-3] and "pagefast-run --" in lines[-2]
          and "pagefast-stat" in lines[-1], f"ends with the next three commands ({lines[-4:]})")
    check("cuMemAlloc_v2" not in r.stdout and len(lines) <= 8, f"no raw counters ({len(lines)} lines)")


if __name__ == "__main__":
    sys.exit(casekit.main(globals()))
