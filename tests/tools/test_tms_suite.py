#!/usr/bin/env python3
"""tests/tools/test_tms_suite.py: tools/gpu/tms-suite without a GPU: a
fake torch_memory_saver source, a fake compiler and a fake Python whose
`-m pytest` writes the events tools/gpu/pytest_outcomes.py would. Checks
the real package's build commands (both hook modes, named as its setup.py
names them, in the package folder), that the real side runs with the real
package on PYTHONPATH and no LD_PRELOAD, the pagefast side with the alias
first on PYTHONPATH and libpagefast.so preloaded, and the table: one row a
test with both outcomes, differences marked, the GPU and CPU-twin columns,
and the exit status (1 when a test differs).
Usage: test_tms_suite.py TOOL"""
import os
import stat
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


FAKE_PYTHON = """#!%(python)s
import json, os, sys
if sys.argv[1] == "-c":
    print("12.8" if "torch.version.cuda" in sys.argv[2] else %(site)r)
    sys.exit(0)
assert sys.argv[1:5] == ["-m", "pytest", "-p", "pytest_outcomes"], sys.argv
side = "pagefast" if os.environ.get("LD_PRELOAD") else "real"
with open(os.path.join(%(log)r, side), "w") as f:
    json.dump({"cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH", ""),
               "preload": os.environ.get("LD_PRELOAD", ""), "args": sys.argv[5:]}, f)
def emit(nodeid, outcome):
    with open(os.environ["PF_OUTCOMES"], "a") as f:
        for when, o in (("setup", "passed"), ("call", outcome), ("teardown", "passed")):
            f.write(json.dumps({"event": "report", "nodeid": nodeid, "when": when, "outcome": o, "xfail": False,
                                "text": "E boom" if o == "failed" else ""}) + "\\n")
emit("test/test_examples.py::test_simple[preload]", "passed")
emit("test/test_examples.py::test_disk_backup[torch]", "failed" if side == "pagefast" else "passed")
emit("test/test_utils.py::test_change_env_restores_previous_value", "passed")
"""

FAKE_CXX = """#!/bin/sh
echo "$@" >> %(log)r/cxx
while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done
"""


def main():
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "source")
        for d in ("test", "csrc", "torch_memory_saver"):
            os.makedirs(os.path.join(source, d))
        open(os.path.join(source, "setup.py"), "w").close()
        open(os.path.join(source, "test", "test_utils.py"), "w").close()
        site = os.path.join(tmp, "site")
        os.makedirs(os.path.join(site, "nvidia", "cuda_runtime", "lib"))
        open(os.path.join(site, "nvidia", "cuda_runtime", "lib", "libcudart.so.12"), "w").close()
        cuda_home = os.path.join(tmp, "cuda")
        os.makedirs(os.path.join(cuda_home, "include"))
        open(os.path.join(cuda_home, "include", "cuda.h"), "w").close()
        log = os.path.join(tmp, "log")
        os.makedirs(log)
        python = os.path.join(tmp, "python")
        with open(python, "w") as f:
            f.write(FAKE_PYTHON % {"python": sys.executable, "site": site, "log": log})
        cxx = os.path.join(tmp, "cxx")
        with open(cxx, "w") as f:
            f.write(FAKE_CXX % {"log": log})
        lib = os.path.join(tmp, "libpagefast.so")  # never loaded: the fake Python only reads LD_PRELOAD
        open(lib, "w").close()
        for path in (python, cxx):
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        env = dict(os.environ, PATH=os.environ.get("PATH", ""))
        r = subprocess.run([TOOL, "--lib", lib, "--source", source, "--python", python, "--cxx", cxx,
                            "--cuda-home", cuda_home, "--libcuda", lib, "--work", os.path.join(tmp, "work")],
                           env=env, capture_output=True, text=True, timeout=120)
        out = r.stdout
        print(out[-3000:], r.stderr[-2000:])
        check(r.returncode == 1, "exit 1 when a test differs (%d)" % r.returncode)
        builds = open(os.path.join(log, "cxx")).read().splitlines() if os.path.exists(os.path.join(log, "cxx")) else []
        check(len(builds) == 2, "two libraries built (%d)" % len(builds))
        for mode in ("preload", "torch"):
            check(any("-DTMS_HOOK_MODE_%s=1" % mode.upper() in b and
                      "torch_memory_saver/torch_memory_saver_hook_mode_%s_cu12.abi3.so" % mode in b and
                      "-I%s/include" % cuda_home in b and "libcudart.so.12" in b for b in builds),
                  "the %s hook library built as setup.py names it: %r" % (mode, builds))
        import json
        real = json.load(open(os.path.join(log, "real")))
        drop_in = json.load(open(os.path.join(log, "pagefast")))
        check(real["preload"] == "" and real["pythonpath"].split(os.pathsep)[0] == real["cwd"],
              "the real side: its package first on PYTHONPATH, nothing preloaded: %r" % real)
        check(drop_in["preload"] == lib and drop_in["pythonpath"].split(os.pathsep)[0].endswith(
              os.path.join("python", "pagefast", "tms_alias")),
              "the pagefast side: the alias first on PYTHONPATH, libpagefast.so preloaded: %r" % drop_in)
        check(drop_in["args"][-3:] == ["test/test_examples.py", "test/test_utils.py",
                                       "test/test_configure_subprocess.py"], "the named tests: %r" % drop_in["args"])
        rows = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| test/") and len(cells) == 5:
                rows[cells[0]] = cells[1:]
        check(rows.get("test/test_examples.py::test_disk_backup[torch]") == ["passed", "failed (differs)", "yes", "disk"],
              "a differing test's row, with its CPU twin: %r" % rows)
        check(rows.get("test/test_examples.py::test_simple[preload]") == ["passed", "passed", "yes", "tms"],
              "an equal test's row, with its CPU twin")
        unit = "test/test_utils.py::test_change_env_restores_previous_value"
        check(rows.get(unit) == ["passed", "passed", "no", "alias"],
              "a unit test's row: no GPU needed")
        check("1 of 3 tests differ" in out and "E boom" in out, "the summary and the difference's text")
    print("FAILED: %d" % len(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
