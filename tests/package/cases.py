#!/usr/bin/env python3
"""tests/package/cases.py: the packages as a user gets them (docs/PACKAGING.md).

    wheel    builds the wheel with meson-python (offline, --no-build-isolation),
             installs it into a fresh venv, then: `python -m pagefast --lib`
             names a loadable library inside the venv; a fake-driver program
             runs under the installed pagefast-run and pagefast counts its
             calls; `python -m pagefast` reads the driver and the pool's mode
             and gives one answer; the helpers in the package's libexec/ are
             found; every console script runs.
    install  `meson install` into a DESTDIR: the tools in bin (pagefast-run,
             -stat, -replay, -simulate, -ctl), pagefast.pc, LICENSE, docs,
             the helpers in libexec, and the installed launcher and replayer
             find them there.

Each needs only Debian packages (python3-mesonpy, python3-venv for the wheel);
the wheel case exits 77 (skipped) when no Python can import mesonpy.
"""
import glob
import json
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from casekit import check, main  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SKIP = 77


def run(argv, env=None, timeout=300, **kw):
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=timeout, **kw)
    if r.returncode != 0:
        print("$ %s\n-> rc %d\n%s%s" % (" ".join(argv), r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PAGEFAST", "FAKECUDA")) and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(extra)
    return env


def builder_python():
    """A Python with meson-python (Debian's python3-mesonpy lives in /usr/bin/python3's)."""
    for candidate in [sys.executable, "/usr/bin/python3"]:
        if candidate and os.path.exists(candidate) and \
                subprocess.run([candidate, "-c", "import mesonpy, venv, ensurepip"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL).returncode == 0:
            return candidate
    return None


def made_counts(stdout):
    """The workload's own count of each call: its line 'made NAME=N ...'."""
    for line in stdout.splitlines():
        if line.startswith("made "):
            return {k: int(v) for k, v in (item.split("=") for item in line.split()[1:])}
    return {}


def check_fake_program(launcher, build, tmp, label):
    """door_linked (the fake driver's workload) under `launcher`: pagefast counts every call it made."""
    stats = os.path.join(tmp, label + "-stats.json")
    env = clean_env(LD_LIBRARY_PATH=os.path.join(build, "tests", "fakecuda"), PAGEFAST_STATS=stats)
    r = run([launcher, "--", os.path.join(build, "tests", "interpose", "door_linked")], env=env)
    check(r.returncode == 0, "%s: door_linked under %s exits 0" % (label, launcher))
    made = made_counts(r.stdout)
    check(made.get("cuMemAlloc_v2", 0) > 0, "%s: the workload made allocations (%s)" % (label, made))
    try:
        with open(stats) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        check(False, "%s: PAGEFAST_STATS written (%s)" % (label, e))
        return
    counted = {k: v for k, v in doc["calls"].items() if v}
    check(counted == made, "%s: pagefast counted exactly the program's calls (%s vs %s)" % (label, counted, made))
    check(doc["pagefast"]["mode"] == "active", "%s: the pool served them (mode %s)" % (label, doc["pagefast"]["mode"]))


def case_wheel():
    build = os.path.abspath(ARGS.build)  # noqa: F821 (set by casekit.main)
    python = builder_python()
    if not python:
        print("no Python with meson-python and venv (Debian: python3-mesonpy python3-venv): skipped")
        sys.exit(SKIP)
    work = os.path.join(build, "tests", "package", "wheel")
    dist = os.path.join(work, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    # The build venv sees the system's meson-python; the wheel is built
    # there, in a build folder kept between runs (incremental).
    buildenv = os.path.join(work, "buildenv")
    if not os.path.exists(os.path.join(buildenv, "bin", "pip")):
        r = run([python, "-m", "venv", "--system-site-packages", buildenv])
        check(r.returncode == 0, "build venv created")
    # The kept folder is rebuilt from scratch when a meson.build changed
    # since it was made: meson-python (Debian 12's) then packed the files
    # of the old install plan, and a file added to the package was missing
    # from the wheel.
    kept = os.path.join(work, "mesonpy-build")
    stamp = os.path.join(work, "mesonpy-build.stamp")
    digest = hashlib.sha256()
    for top, dirs, files in os.walk(SOURCE):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")) and d != "subprojects")
        for name in sorted(files):
            if name in ("meson.build", "meson_options.txt", "meson.options", "pyproject.toml"):
                with open(os.path.join(top, name), "rb") as f:
                    digest.update(f.read())
    wanted = digest.hexdigest()
    if not os.path.exists(stamp) or open(stamp).read() != wanted:
        shutil.rmtree(kept, ignore_errors=True)
        # Without its native file meson-python configures afresh instead of
        # reconfiguring a folder that is gone, as on a first run.
        native = os.path.join(SOURCE, ".mesonpy-native-file.ini")
        if os.path.exists(native):
            os.remove(native)
        with open(stamp, "w") as f:
            f.write(wanted)
    r = run([os.path.join(buildenv, "bin", "pip"), "wheel", "--no-build-isolation", "--no-deps", "--no-index",
             "--config-settings", "builddir=" + os.path.join(work, "mesonpy-build"), "-w", dist, SOURCE],
            env=clean_env(PIP_NO_INDEX="1"), timeout=900)
    check(r.returncode == 0, "pip wheel builds the wheel")
    wheels = glob.glob(os.path.join(dist, "pagefast-*.whl"))
    check(len(wheels) == 1, "one wheel: %s" % wheels)
    if len(wheels) != 1:
        return
    arch = os.uname().machine
    check(wheels[0].endswith("-py3-none-manylinux_2_28_%s.whl" % arch), "tagged manylinux_2_28: %s" % wheels[0])

    with tempfile.TemporaryDirectory(prefix="pf-wheel-") as tmp:
        venv = os.path.join(tmp, "venv")
        r = run([python, "-m", "venv", venv])
        check(r.returncode == 0, "fresh venv created")
        vbin = os.path.join(venv, "bin")
        r = run([os.path.join(vbin, "pip"), "install", "--no-index", "--no-deps", wheels[0]], env=clean_env())
        check(r.returncode == 0, "pip install of the wheel into the fresh venv")
        env = clean_env(PATH=vbin + os.pathsep + os.environ.get("PATH", ""))

        r = run([os.path.join(vbin, "python"), "-m", "pagefast", "--lib"], env=env)
        lib = r.stdout.strip()
        check(r.returncode == 0 and os.path.isabs(lib) and lib.startswith(venv + os.sep),
              "python -m pagefast --lib names a path inside the venv: %s" % lib)
        r = run([os.path.join(vbin, "python"), "-c", "import ctypes, sys; "
                 "l = ctypes.CDLL(sys.argv[1]); l.pagefast_version.restype = ctypes.c_char_p; "
                 "print(l.pagefast_version().decode())", lib], env=env)
        version = run([os.path.join(vbin, "python"), "-m", "pagefast", "--version"], env=env).stdout.strip()
        check(r.returncode == 0 and r.stdout.strip() == version and version != "unknown",
              "the library loads and answers pagefast_version %r (package %r)" % (r.stdout.strip(), version))

        launcher = shutil.which("pagefast-run", path=vbin)
        check(launcher == os.path.join(vbin, "pagefast-run"), "pagefast-run is on the venv's PATH")
        r = run([launcher, "--print-lib"], env=env)
        check(r.stdout.strip() == lib, "the installed pagefast-run uses the package's library: %s" % r.stdout.strip())
        check_fake_program(launcher, build, tmp, "wheel")

        fake = os.path.join(build, "tests", "fakecuda")
        r = run([os.path.join(vbin, "python"), "-m", "pagefast", "--json"], env=dict(env, LD_LIBRARY_PATH=fake))
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        probe, driver = doc.get("library_probe", {}), doc.get("driver", {})
        check(probe.get("loads") and probe.get("mode") == "active", "python -m pagefast: pool active (%s)" % probe)
        check(driver.get("loads") and driver.get("version", 0) > 0 and fake in (driver.get("path") or ""),
              "python -m pagefast: the fake driver and its version (%s)" % driver)
        r = run([os.path.join(vbin, "python"), "-m", "pagefast", "--json"],
                env=dict(env, LD_LIBRARY_PATH=fake, PAGEFAST_CONF="chunk_size:3M"))
        probe = json.loads(r.stdout).get("library_probe", {}) if r.stdout.strip() else {}
        check(probe.get("mode") == "pass-through" and any("chunk_size" in m for m in probe.get("messages", [])),
              "python -m pagefast: a bad PAGEFAST_CONF shows as pass-through with the library's message (%s)" % probe)
        r = run([os.path.join(vbin, "python"), "-m", "pagefast", "--json"], env=dict(env, LD_LIBRARY_PATH="/nonexistent"))
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        check(r.returncode == 4 and doc.get("driver", {}).get("loads") is False,
              "python -m pagefast: no driver is reported, not a crash, exit status 4 (%s)" % doc.get("driver"))
        r = run([os.path.join(vbin, "python"), "-m", "pagefast"], env=dict(env, LD_LIBRARY_PATH=fake))
        check(r.returncode == 0 and "pool here   yes: " in r.stdout and lib in r.stdout,
              "python -m pagefast prints the report: the pool would serve here")
        print(r.stdout)
        # One answer each time: never a yes beside a word of pass-through.
        # The exit status says it too: 3 a refused setting, 4 no pool for another reason.
        for extra, want, rc in [({"LD_LIBRARY_PATH": "/nonexistent"}, "pool here   no: no CUDA driver", 4),
                                ({"LD_LIBRARY_PATH": fake, "PAGEFAST": "0"}, "pool here   no: PAGEFAST=0", 4),
                                ({"LD_LIBRARY_PATH": fake, "PAGEFAST_CONF": "chunksize:2M"}, "pool here   no: a setting",
                                 3),
                                ({"LD_LIBRARY_PATH": fake, "PAGEFAST_CONF": "pool:off"}, "pool here   no: pool:off", 4)]:
            r = run([os.path.join(vbin, "python"), "-m", "pagefast"], env=dict(env, **extra))
            verdicts = [l for l in r.stdout.splitlines() if l.startswith("pool here")]
            check(r.returncode == rc and len(verdicts) == 1 and verdicts[0].startswith(want)
                  and r.stdout.rstrip().splitlines()[-1] == verdicts[0]
                  and "pool would pass" not in r.stdout and "active" not in r.stdout,
                  "python -m pagefast with %s says one thing: %s" % (extra, verdicts))

        r = run([launcher, "--numa-report"], env=env)
        check(r.returncode == 0 and "NUMA report" in r.stdout, "pagefast-run --numa-report finds the helper in the package")
        r = run([os.path.join(vbin, "pagefast-replay"), os.path.join(tmp, "missing.pftrace")], env=env)
        check(r.returncode == 2, "pagefast-replay finds its engine in the package (rc 2 for a missing trace, got %d)"
              % r.returncode)
        r = run([os.path.join(vbin, "pagefast-stat"), "--help"], env=env)
        check(r.returncode == 0 and "pagefast-stat" in r.stdout, "pagefast-stat runs from the venv")
        r = run([os.path.join(vbin, "pagefast-simulate"), "--version"], env=env)
        check(r.returncode == 0 and r.stdout.startswith("pagefast-simulate "), "pagefast-simulate runs from the venv")
        r = run([os.path.join(vbin, "pagefast-ctl")], env=env)
        check(r.returncode not in (0, 127) and "pagefast-ctl" in r.stdout + r.stderr,
              "pagefast-ctl runs from the venv (its usage, rc %d)" % r.returncode)


def case_install():
    build = os.path.abspath(ARGS.build)  # noqa: F821
    with tempfile.TemporaryDirectory(prefix="pf-install-") as dest:
        r = run(["meson", "install", "-C", build, "--no-rebuild", "--destdir", dest, "--quiet"])
        check(r.returncode == 0, "meson install into a DESTDIR")
        intro = json.loads(run(["meson", "introspect", "--buildoptions", build]).stdout)
        opt = {o["name"]: o["value"] for o in intro}
        root = dest + opt["prefix"]
        libdir = os.path.join(root, opt["libdir"])
        bindir = os.path.join(root, opt["bindir"])
        libexec = os.path.join(root, opt["libexecdir"], "pagefast")
        docdir = os.path.join(root, opt["datadir"], "doc", "pagefast")
        for path in [os.path.join(libdir, "libpagefast.so"), os.path.join(bindir, "pagefast-run"),
                     os.path.join(bindir, "pagefast-stat"), os.path.join(bindir, "pagefast-replay"),
                     os.path.join(bindir, "pagefast-simulate"), os.path.join(bindir, "pagefast-ctl"),
                     os.path.join(libexec, "pagefast-replay-engine"), os.path.join(libexec, "pagefast-numa-report"),
                     os.path.join(root, opt["includedir"], "pagefast.h"), os.path.join(docdir, "LICENSE"),
                     os.path.join(docdir, "POOL.md"), os.path.join(libdir, "pkgconfig", "pagefast.pc")]:
            check(os.path.isfile(path), "installed: %s" % os.path.relpath(path, dest))
        for helper in ["pagefast-replay-engine", "pagefast-numa-report"]:
            check(not os.path.exists(os.path.join(bindir, helper)), "%s is not in bindir" % helper)
        pc = os.path.join(libdir, "pkgconfig")
        if shutil.which("pkg-config"):
            r = run(["pkg-config", "--define-variable=prefix=" + root, "--variable=preload", "pagefast"],
                    env=dict(os.environ, PKG_CONFIG_PATH=pc))
            check(r.stdout.strip() == os.path.join(libdir, "libpagefast.so"),
                  "pkg-config --variable=preload names the library: %s" % r.stdout.strip())
            r = run(["pkg-config", "--define-variable=prefix=" + root, "--cflags", "pagefast"],
                    env=dict(os.environ, PKG_CONFIG_PATH=pc))
            check(r.returncode == 0 and os.path.join(root, opt["includedir"]) in r.stdout, "pkg-config --cflags")
        launcher = os.path.join(bindir, "pagefast-run")
        r = run([launcher, "--print-lib"], env=clean_env())
        check(r.stdout.strip() == os.path.realpath(os.path.join(libdir, "libpagefast.so")),
              "installed pagefast-run finds the installed library: %s" % r.stdout.strip())
        r = run([launcher, "--numa-report"], env=clean_env())
        check(r.returncode == 0 and "NUMA report" in r.stdout, "installed pagefast-run --numa-report finds libexec's helper")
        r = run([os.path.join(bindir, "pagefast-replay"), os.path.join(dest, "missing.pftrace")], env=clean_env())
        check(r.returncode == 2, "installed pagefast-replay finds libexec's engine (rc %d)" % r.returncode)
        check_fake_program(launcher, build, dest, "install")


if __name__ == "__main__":
    sys.exit(main(globals()))
