"""tests/tools/gpu_script_kit.py: what the checks of a GPU script without a
GPU share (test_colocated_rl.py, test_across_processes.py): a check that
records failures, the script run with arguments, whether it compiles, and
the exit status."""
import py_compile
import subprocess
import sys

failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(tool, args):
    return subprocess.run([sys.executable, tool] + args, capture_output=True, text=True, timeout=60)


def compiles(tool, tmp):
    """Checks that the script compiles (its byte code written into tmp)."""
    try:
        py_compile.compile(tool, cfile=tmp + "/c.pyc", doraise=True)
        ok = True
    except py_compile.PyCompileError as e:
        ok = False
        print(e)
    check(ok, "the script compiles")


def status():
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0
