"""python -m pagefast: what is installed, the CUDA driver this machine would
use, and whether pagefast's pool would serve a CUDA program run here with
this environment: one line "pool here   yes: ..." or "no: ...", with why.

    python -m pagefast           the report
    python -m pagefast --json    the same as one JSON object
    python -m pagefast --lib     the library's absolute path, for LD_PRELOAD
    python -m pagefast --tms-alias   the folder that, first on PYTHONPATH, makes
                                 `import torch_memory_saver` pagefast's
    python -m pagefast --version

The pool question is answered by the library itself: a child process loads
it with ctypes and reads the "mode" and "config" of pagefast_stats_json(),
so PAGEFAST and PAGEFAST_CONF are parsed exactly as a preloaded run would
parse them. The driver is asked only cuDriverGetVersion, which creates no
context. The report ends with the "pool here" line.

Exit status: 0 the pool would serve here; 1 the library is missing or
cannot load; 2 a usage error; 3 a setting is refused (a bad key or value,
which the library runs as a pass-through or, with PAGEFAST_STRICT=1, stops
the program for at load; or a PAGEFAST_* variable it does not read, which
it only warns of: pagefast-run refuses both); 4 the pool would not serve
for another reason
(PAGEFAST=0, pool:off, no working CUDA driver).
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys

from . import __version__, library_path, tool_path

# Runs in a child: loading the library runs its constructor (NUMA binding,
# logging setup) and that should not happen to the caller's process.
_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.pagefast_version.restype = ctypes.c_char_p
lib.pagefast_stats_json.restype = ctypes.c_size_t
lib.pagefast_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
size = lib.pagefast_stats_json(None, 0)
buf = ctypes.create_string_buffer(size)
lib.pagefast_stats_json(buf, size)
doc = json.loads(buf.value.decode())
print(json.dumps({"version": lib.pagefast_version().decode(), "active": lib.pagefast_is_active(),
                  "mode": doc["pagefast"]["mode"], "reason": doc["pagefast"].get("reason", ""),
                  "config": doc["pagefast"]["config"]}))
"""

def _run_probe(lib, env):
    r = subprocess.run([sys.executable, "-c", _PROBE, lib], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    # "pagefast: LEVEL: ..." or "pagefast[PID ...]: LEVEL: ...": the library's own lines.
    return r, [line for line in r.stderr.splitlines() if line.startswith(("pagefast:", "pagefast["))]


def probe_library(lib):
    """The library's own answer: version, mode and configuration, and
    whether a setting is refused: the probe runs under PAGEFAST_STRICT=1
    (unless the environment sets it), where the library stops at load
    (exit status 125) on any setting pagefast-run refuses, a PAGEFAST_*
    variable it does not read among them; then again as the environment
    is, for the answer."""
    if not os.path.isfile(lib):
        return {"loads": False, "error": "missing"}
    # PAGEFAST_SAID would make the library say a refused setting at debug only.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PAGEFAST_STATS", "PAGEFAST_TRACE", "PAGEFAST_REPORT", "LD_PRELOAD", "PAGEFAST_SAID")}
    strict_given = env.get("PAGEFAST_STRICT", "").strip() != ""
    refused = stops = False
    try:
        r, messages = _run_probe(lib, env if strict_given else dict(env, PAGEFAST_STRICT="1"))
        if r.returncode == 125 and any("=1: stopping the program" in m for m in messages):
            refused, stops = True, strict_given
            stopped_with = messages
            r, messages = _run_probe(lib, {k: v for k, v in env.items() if k != "PAGEFAST_STRICT"})
            if stops:  # the user's own PAGEFAST_STRICT=1: its words
                messages = stopped_with
    except (OSError, subprocess.SubprocessError) as e:
        return {"loads": False, "error": str(e)}
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-1:] or ["exit status %d" % r.returncode]
        return {"loads": False, "error": tail[0], "messages": messages}
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"loads": False, "error": "unreadable answer: %r" % r.stdout[-200:]}
    out.update({"loads": True, "messages": messages, "refused": refused, "stops": stops})
    return out


def _mapped_path(fragment):
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and fragment in os.path.basename(parts[-1]):
                    return parts[-1]
    except OSError:
        pass
    return None


def probe_driver():
    """libcuda.so.1 as the dynamic loader finds it, and its CUDA version."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"loads": False, "error": str(e)}
    version = ctypes.c_int(0)
    rc = cuda.cuDriverGetVersion(ctypes.byref(version))
    out = {"loads": True, "path": _mapped_path("libcuda.so"), "result": rc}
    if rc == 0:
        out["version"] = version.value
        out["cuda"] = "%d.%d" % (version.value // 1000, (version.value % 1000) // 10)
    return out


def _launcher():
    """pagefast-run as the user types it: the console script on PATH when it
    is this installation's, else the launcher inside the package."""
    found = shutil.which("pagefast-run")
    if found and os.path.realpath(os.path.dirname(found)) == os.path.realpath(os.path.dirname(sys.executable)):
        return found
    return tool_path("pagefast-run")


def _shown(launcher):
    """pagefast-run as the user would type it: its name when that is the
    one on PATH, else its path."""
    found = shutil.which("pagefast-run")
    if found and os.path.realpath(found) == os.path.realpath(launcher):
        return "pagefast-run"
    return launcher


def verdict(probe, driver):
    """Whether the pool would serve a CUDA program run here with this
    environment, and why: one answer from the library's mode and the
    driver, so that the report never says two things."""
    if not probe.get("loads"):
        return {"pool": False, "why": "the library does not load (%s)" % probe.get("error")}
    mode, reason = probe.get("mode"), probe.get("reason", "")
    # The stats document's words (docs/STATS.md "State words"): active, off
    # (PAGEFAST=0 or pool:off, said by the reason), pass-through (refused).
    if mode == "off" and reason == "pool:off":
        mode = "forward"
    if probe.get("stops"):
        return {"pool": False, "refused": True,
                "why": "a setting is refused (the library's message above): with PAGEFAST_STRICT=1 the program "
                       "stops at load (exit status 125); pagefast-run refuses to start it"}
    if probe.get("refused") and mode != "pass-through":
        return {"pool": False, "refused": True,
                "why": "a PAGEFAST_* variable is not one pagefast reads (the library's message above): the pool "
                       "would serve without it; pagefast-run and PAGEFAST_STRICT=1 refuse it"}
    if mode in ("pass-through", "off"):
        if (reason and reason != "PAGEFAST=0") or any(": error: " in m for m in probe.get("messages", [])):
            return {"pool": False, "refused": True,
                    "why": "a setting is refused (the library's message above), so every call goes to the "
                           "driver untouched; pagefast-run would refuse to start the program"}
        return {"pool": False, "why": "PAGEFAST=%s: every call goes to the driver untouched"
                                      % (os.environ.get("PAGEFAST") or "0")}
    if mode == "forward":
        return {"pool": False, "why": "pool:off: every call is counted and goes to the driver"}
    if not driver.get("loads"):
        return {"pool": False,
                "why": "no CUDA driver here (libcuda.so.1 does not load): nothing to serve; where there is one, "
                       "the pool would serve cuMemAlloc/cuMemFree as configured"}
    if driver.get("result") != 0:
        return {"pool": False, "why": "the driver answers cuDriverGetVersion with %d: CUDA does not work here, "
                                      "with or without pagefast" % driver.get("result")}
    return {"pool": True, "why": "the pool serves cuMemAlloc/cuMemFree (on a device with CUDA virtual memory "
                                 "management; a device without it passes through, with one log line)"}


def report():
    lib = library_path()
    probe, driver = probe_library(lib), probe_driver()
    return {
        "pagefast": __version__,
        "library": lib,
        "launcher": _launcher(),
        "environment": {k: os.environ.get(k) for k in ("PAGEFAST", "PAGEFAST_CONF", "LD_PRELOAD")},
        "library_probe": probe,
        "driver": driver,
        "verdict": verdict(probe, driver),
    }


def print_report(r):
    p = r["library_probe"]
    print("pagefast %s" % r["pagefast"])
    if p.get("loads"):
        print("  library   %s (loads; version %s)" % (r["library"], p["version"]))
    else:
        print("  library   %s: cannot load: %s" % (r["library"], p.get("error")))
    print("  launcher  %s" % r["launcher"])
    d = r["driver"]
    if not d["loads"]:
        print("driver      libcuda.so.1 not loadable (%s)" % d["error"])
    elif d["result"] != 0:
        print("driver      %s: cuDriverGetVersion returned %d" % (d["path"], d["result"]))
    else:
        print("driver      %s: CUDA %s (cuDriverGetVersion %d)" % (d["path"], d["cuda"], d["version"]))
    env = r["environment"]
    print("environment PAGEFAST=%s PAGEFAST_CONF=%s" % (env["PAGEFAST"] or "(unset)", env["PAGEFAST_CONF"] or "(unset)"))
    if p.get("loads"):
        print("settings    %s" % p["config"])
        for m in p.get("messages", []):
            print("            %s" % m)
    if os.path.isfile(r["library"]):
        print("use         LD_PRELOAD=%s python train.py" % r["library"])
        print("            %s -- python train.py" % _shown(r["launcher"]))
    else:
        print("use         nothing yet: build the library (tools/quickstart in a clone) or install the package")
    v = r["verdict"]
    print("pool here   %s: %s" % ("yes" if v["pool"] else "no", v["why"]))


def exit_status(r):
    """The module docstring's exit status of a report."""
    if not r["library_probe"].get("loads"):
        return 1
    v = r["verdict"]
    if v["pool"]:
        return 0
    return 3 if v.get("refused") else 4


def main(argv):
    if argv[:1] == ["--lib"]:
        lib = library_path()
        if not os.path.isfile(lib):
            sys.stderr.write("pagefast: error: %s is missing\n" % lib)
            return 1
        print(lib)
        return 0
    if argv[:1] == ["--tms-alias"]:
        print(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tms_alias"))
        return 0
    if argv[:1] == ["--version"]:
        print(__version__)
        return 0
    if argv and argv[0] not in ("--json",):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 0 if argv[0] in ("-h", "--help") else 2
    r = report()
    if argv[:1] == ["--json"]:
        print(json.dumps(r, indent=2))
    else:
        print_report(r)
    return exit_status(r)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
