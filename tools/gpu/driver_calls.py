# tools/gpu/driver_calls.py: a (cuda-)gdb script that logs every CUDA driver
# call a program makes while one of its functions runs: the driver's own
# entry points (cu*) and pagefast's hooks, with the first four arguments
# and the CUresult each returned. Run it with and without pagefast and
# compare the two logs: the call whose answer differs is the one pagefast
# changed (docs/DRIVER-FACTS.md).
#
#   WINDOW=cusparseDestroyCsrilu02Info cuda-gdb -batch -x tools/gpu/driver_calls.py --args PROGRAM ARGS
#
# Each call prints "CALL name rdi rsi rdx rcx -> result". WINDOW names the
# function (a symbol in any loaded library); every call to it opens the
# window and its return closes it. x86-64 only (arguments in rdi, rsi, rdx,
# rcx; the result in eax).
import os

import gdb

WINDOW = os.environ.get("WINDOW", "main")
PATTERNS = os.environ.get("PATTERNS", "^cu[A-Z],^pagefast::hook::cu").split(",")

gdb.execute("set pagination off")
gdb.execute("set breakpoint pending on")
gdb.execute("set confirm off")

tracing = {"on": False, "made": False, "bps": []}


def regs():
    return " ".join(hex(int(gdb.parse_and_eval(r)) & 0xFFFFFFFFFFFFFFFF) for r in ("$rdi", "$rsi", "$rdx", "$rcx"))


class Returned(gdb.FinishBreakpoint):
    def __init__(self, name, args, closes=False):
        super().__init__(gdb.newest_frame(), internal=True)
        self.name, self.args, self.closes = name, args, closes

    def stop(self):
        print(f"CALL {self.name} {self.args} -> {int(gdb.parse_and_eval('$rax')) & 0xFFFFFFFF}", flush=True)
        if self.closes:
            tracing["on"] = False
            for bp in tracing["bps"]:
                bp.enabled = False
            print(f"WINDOW {WINDOW} closed", flush=True)
        return False

    def out_of_scope(self):
        print(f"CALL {self.name} {self.args} -> (no return seen)", flush=True)


class Call(gdb.Breakpoint):
    def stop(self):
        if tracing["on"]:
            frame = gdb.newest_frame()
            try:
                Returned(frame.name() or self.location, regs())
            except Exception as e:  # no unwind information: log the call alone
                print(f"CALL {frame.name() or self.location} {regs()} -> ? ({e})", flush=True)
        return False


class Window(gdb.Breakpoint):
    def stop(self):
        print(f"WINDOW {WINDOW} opened", flush=True)
        tracing["on"] = True
        if not tracing["made"]:
            tracing["made"] = True
            for pattern in PATTERNS:
                names = set()
                for line in gdb.execute(f"info functions {pattern}", to_string=True).splitlines():
                    word = line.split()[-1] if line.split() else ""
                    if line.startswith("0x"):
                        word = line.split()[1]
                    word = word.rstrip(";")
                    if word and not word.startswith("(") and ("cu" in word):
                        names.add(word.split("(")[0])
                for name in sorted(names):
                    if name in ("cuCtxGetCurrent", "cuGetProcAddress", "cuGetProcAddress_v2"):
                        continue
                    try:
                        tracing["bps"].append(Call(name, internal=True))
                    except Exception:
                        pass
            print(f"WINDOW {len(tracing['bps'])} breakpoints", flush=True)
        for bp in tracing["bps"]:
            bp.enabled = True
        Returned(WINDOW, regs(), closes=True)
        return False


Window(WINDOW)
gdb.execute("run")
