#!/usr/bin/env python3
"""tests/package/readme_cases.py: README.md's own install and check commands,
run as written, so that the front door cannot rot. The commands are read
from README.md itself: the fenced sh blocks between the comments
"begin readme-test:NAME" and "end readme-test:NAME". Each case runs them in
one bash (set -e), from this source tree (as from a clone), with HOME a
fresh folder: ~/pagefast-venv is then a fresh virtual environment.

    debian  install-debian, then check: offline, with Debian's
            meson-python. Skipped (77) when /usr/bin/python3 lacks
            meson-python or venv (Debian: python3-mesonpy python3-venv).
    index   install-index, then check: pip fetches meson-python, meson
            and ninja for the build. Skipped (77) when no package index
            answers.

Then: the library inside the new environment; the check block with the
fake driver as libcuda.so.1: exactly one "pool here" line, "pool here
yes", the program run under pagefast-run; and without a driver `python -m
pagefast` exits 4 with "pool here   no" as its last line.

Only the build folder is the test's: meson-python's is kept under the test
build folder (PIP_CONFIG_SETTINGS, as pip reads its options from the
environment), shared with the wheel case, so that a later run is
incremental. Apart from that the commands are the README's.

    meson   install-meson: a build folder and a prefix of its own, then
            pkg-config with PKG_CONFIG_PATH names the installed library.

usage: readme_cases.py debian|index|meson --build DIR
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from casekit import check, main  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SKIP = 77
BUILD_TIMEOUT_S = 1500  # a hang guard: the first build compiles the library on two cores


def readme_blocks():
    """{NAME: the lines of the sh blocks marked readme-test:NAME}."""
    with open(os.path.join(SOURCE, "README.md")) as f:
        text = f.read()
    blocks = {}
    for m in re.finditer(r"<!-- begin readme-test:([\w-]+)[^>]*-->(.*?)<!-- end readme-test:\1 -->", text, re.S):
        code = re.findall(r"```sh\n(.*?)```", m.group(2), re.S)
        blocks[m.group(1)] = "".join(code)
    return blocks


def clean_env(home, **extra):
    # pip's own settings (an index, a proxy, certificates) stay: they are
    # how this machine reaches packages, as for its user.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PAGEFAST", "FAKECUDA", "VIRTUAL_ENV"))
           and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "PIP_CONFIG_SETTINGS")}
    env["HOME"] = home
    env.update(extra)
    return env


def bash(script, env, timeout):
    """The lines as one bash script (set -e) from the source tree, each
    echoed before it runs."""
    echoed = "".join("printf '%%s\\n' %s\n%s\n" % (shlex.quote("$ " + line), line)
                     for line in script.splitlines() if line.strip())
    r = subprocess.run(["bash", "-e", "-c", echoed], cwd=SOURCE, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)
    print(r.stdout[-6000:])
    return r


def has(python, modules):
    return os.path.exists(python) and subprocess.run(
        [python, "-c", "import " + ", ".join(modules)], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL).returncode == 0


def index_reachable():
    """Whether pip can fetch the build's own packages (the index, a proxy
    or a mirror as pip is set up here)."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0", "--timeout",
                            "15", "-d", d, "meson-python", "meson", "ninja"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
        if r.returncode != 0:
            print("pip download meson-python meson ninja: rc %d\n%s" % (r.returncode, r.stdout[-800:]))
        return r.returncode == 0


def run_readme(install, settings, extra_env=None):
    build = os.path.abspath(ARGS.build)  # noqa: F821 (set by casekit.main)
    blocks = readme_blocks()
    for name in (install, "check"):
        check(blocks.get(name, "").strip() != "", "README.md marks a readme-test:%s block" % name)
    if not blocks.get(install, "").strip() or not blocks.get("check", "").strip():
        return
    fake = os.path.join(build, "tests", "fakecuda")
    with tempfile.TemporaryDirectory(prefix="pf-readme-") as home:
        env = clean_env(home, PIP_CONFIG_SETTINGS=settings, **(extra_env or {}))
        r = bash(blocks[install], env, BUILD_TIMEOUT_S)
        check(r.returncode == 0, "README's %s commands run as written (rc %d)" % (install, r.returncode))
        venv = os.path.join(home, "pagefast-venv")
        lib = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pagefast", "--lib"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        check(lib.returncode == 0 and lib.stdout.strip().startswith(venv + os.sep),
              "the library is inside the new environment: %s" % lib.stdout.strip())
        # With a driver (the fake one), the check block runs as written
        # and ends with one line: the pool would serve here.
        r = bash(". ~/pagefast-venv/bin/activate\n" + blocks["check"], dict(env, LD_LIBRARY_PATH=fake), 300)
        verdicts = [l for l in r.stdout.splitlines() if l.startswith("pool here")]
        check(r.returncode == 0 and len(verdicts) == 1 and verdicts[0].startswith("pool here   yes: "),
              "with a driver the check says yes: %s" % verdicts)
        check("ran under pagefast-run" in r.stdout.splitlines(), "pagefast-run ran the program")
        # Without one, python -m pagefast says no in its last line and
        # exits 4, as README.md says.
        r = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pagefast"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        lines = r.stdout.rstrip().splitlines()
        check(r.returncode == 4 and lines and lines[-1].startswith("pool here   no: no CUDA driver"),
              "without a driver: exit status 4 and the last line says no (%d, %s)" % (r.returncode, lines[-1:]))
        # The troubleshooting commands run as written, with the driver.
        check(blocks.get("troubleshoot", "").strip() != "", "README.md marks a readme-test:troubleshoot block")
        r = bash(". ~/pagefast-venv/bin/activate\n" + blocks.get("troubleshoot", ""), dict(env, LD_LIBRARY_PATH=fake),
                 300)
        check(r.returncode == 0 and "pagefast-stat" in r.stdout and "pool here   yes: " in r.stdout
              and "1" in r.stdout.splitlines(), "README's troubleshooting commands run (rc %d)" % r.returncode)


def case_meson():
    """The README's meson install, in the order a user meets it: after
    tools/quickstart made build/ (here: this suite's own build folder
    exists), into a prefix of its own; pkg-config then names the installed
    library. The prefix and the build folder are the test's."""
    block = readme_blocks().get("install-meson", "")
    check("--prefix=/opt/pagefast" in block and "build-install" in block, "README.md marks readme-test:install-meson")
    with tempfile.TemporaryDirectory(prefix="pf-meson-") as tmp:
        prefix, build_dir = os.path.join(tmp, "opt-pagefast"), os.path.join(tmp, "build-install")
        script = block.replace("/opt/pagefast", prefix).replace("build-install", build_dir)
        r = bash(script, clean_env(tmp), BUILD_TIMEOUT_S)
        check(r.returncode == 0 and "Directory already configured" not in r.stdout,
              "README's meson install runs as written (rc %d)" % r.returncode)
        lib = [l for l in r.stdout.splitlines() if l.startswith("/") and l.endswith("/libpagefast.so")]
        check(len(lib) == 1 and lib[0].startswith(prefix + os.sep) and os.path.isfile(lib[0]),
              "pkg-config names the installed library under the prefix: %s" % lib)


def case_debian():
    if not has("/usr/bin/python3", ["mesonpy", "venv", "ensurepip"]):
        print("skipped: /usr/bin/python3 lacks meson-python or venv (Debian: python3-mesonpy python3-venv)")
        sys.exit(SKIP)
    build = os.path.abspath(ARGS.build)  # noqa: F821
    # The wheel case's build folder (tests/package/cases.py): the same
    # source, the same options.
    builddir = os.path.join(build, "tests", "package", "wheel", "mesonpy-build")
    os.makedirs(os.path.dirname(builddir), exist_ok=True)
    run_readme("install-debian", "builddir=" + builddir, {"PIP_NO_INDEX": "1"})


def case_index():
    if not index_reachable():
        print("skipped: no package index answers pip here (the offline way is case debian)")
        sys.exit(SKIP)
    build = os.path.abspath(ARGS.build)  # noqa: F821
    # Its own build folder: its meson and meson-python are pip's, not Debian's.
    builddir = os.path.join(build, "tests", "package", "readme-index", "mesonpy-build")
    os.makedirs(os.path.dirname(builddir), exist_ok=True)
    run_readme("install-index", "build-dir=" + builddir)


if __name__ == "__main__":
    sys.exit(main(globals()))
