#!/usr/bin/env python3
"""tests/interpose/ipc_cost_cases.py: what CUDA IPC of pool blocks costs in
driver calls, on the fake driver (docs/IPC.md "The importer's chunk
mappings"), and its threads. Each case a separate meson test in suite
'ipc': `ipc_cost_cases.py CASE --build DIR`.

The exporter is ipc_target, the importer ipc_importer (driven as in
ipc_safety_cases.py); the importer reads the fake driver's call counters
('N'), so that a case sees which calls an open or a close made.
"""
import argparse
import time
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casekit  # noqa: E402  (tests/casekit.py)
from casekit import check  # noqa: E402
import ipc_safety_cases as safety  # noqa: E402
from ipc_safety_cases import CUDA_SUCCESS, MiB, Importer, Target, settle  # noqa: E402

ARGS = None
CALLS = ["cuMemImportFromShareableHandle", "cuMemMap", "cuMemSetAccess", "cuMemAddressReserve", "cuMemUnmap",
         "cuMemAddressFree"]
# Small chunks: blocks A and B of 1 MiB share the first 4 MiB chunk; C
# (6 MiB, more than a chunk) has one of its own.
ENV = {"PAGEFAST_CONF": "chunk_size:4M"}


def counts(imp):
    out, ok = {}, True
    for name in CALLS:
        rc, _, value, _ = imp.call("N", handle=name.encode().ljust(64, b"\0"))
        ok = ok and rc == CUDA_SUCCESS
        out[name] = value
    check(ok, "the importer reads the fake driver's call counts")
    return out


def made(imp, before):
    """The driver calls made since `before`, by name (those made)."""
    now = counts(imp)
    return {k: now[k] - before[k] for k in CALLS if now[k] != before[k]}


def three_blocks(t):
    check(t.ask(f"alloc 0 {MiB} 41") == "ok" and t.ask(f"alloc 1 {MiB} 42") == "ok" and
          t.ask(f"alloc 2 {6 * MiB} 43") == "ok", "blocks A, B (1 MiB) and C (6 MiB)")
    return t.handle(0), t.handle(1), t.handle(2)


def case_open_calls():
    """The first block of a chunk imports, maps and opens the chunk (one
    call each); a second block of it, while the first is open, makes no
    driver call; a block of another chunk imports that one. The chunk's
    mapping goes with its last block, and its address space is used again
    by the next mapping of its size."""
    t, imp = Target(ENV), Importer(ENV)
    a, b, c = three_blocks(t)
    check(imp.call("F")[0] == CUDA_SUCCESS, "the importer counts its descriptors")
    fds_before = imp.call("F")[2]
    first = {"cuMemImportFromShareableHandle": 1, "cuMemMap": 1, "cuMemSetAccess": 1, "cuMemAddressReserve": 1}
    n = counts(imp)
    check(imp.open(a, slot=0) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), "A opens with A's bytes")
    got = made(imp, n)
    check(got == first, f"A's open imports, maps and opens its chunk, one call each ({got})")
    n = counts(imp)
    check(imp.open(b, slot=1) == CUDA_SUCCESS and imp.reads(1, MiB, 0x42), "B opens with B's bytes")
    got = made(imp, n)
    check(got == {}, f"B, in A's chunk, opens without a driver call ({got})")
    check(imp.reads(0, MiB, 0x41), "A keeps its bytes")
    n = counts(imp)
    check(imp.open(c, slot=2) == CUDA_SUCCESS and imp.reads(2, 6 * MiB, 0x43), "C opens with C's bytes")
    got = made(imp, n)
    check(got == first, f"C, in a chunk of its own, imports that one ({got})")
    check(imp.write(1, MiB, 0x62) == CUDA_SUCCESS and t.ask("check 1 62") == "check 1",
          "what the importer writes to B reaches the exporter's B")
    check(t.ask("check 0 41") == "check 1", "... and not A")
    n = counts(imp)
    check(imp.close(1) == CUDA_SUCCESS, "B closes")
    got = made(imp, n)
    check(got == {}, f"B's close leaves the chunk mapped for A ({got})")
    check(imp.reads(0, MiB, 0x41), "A reads its bytes after B's close")
    n = counts(imp)
    check(imp.close(0) == CUDA_SUCCESS, "A closes")
    got = made(imp, n)
    check(got == {"cuMemUnmap": 1}, f"A's close, the chunk's last, unmaps it and keeps its address space ({got})")
    n = counts(imp)
    check(imp.open(a, slot=0) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), "A opens again")
    got = made(imp, n)
    want = {k: v for k, v in first.items() if k != "cuMemAddressReserve"}
    check(got == want, f"... in the address space kept ({got})")
    check(imp.close(0) == CUDA_SUCCESS and imp.close(2) == CUDA_SUCCESS, "A and C close")
    fds_after = imp.call("F")[2]
    check(fds_after <= fds_before + 1, f"no descriptor left behind but the link to the exporter "
          f"({fds_before} before, {fds_after} after)")
    # The exporter learnt of every close: a block freed now goes at once.
    settle(t)
    check(t.ask("free 0") == "free CUDA_SUCCESS" and t.ask("free 0") == "free CUDA_ERROR_INVALID_VALUE",
          "A, closed by the importer, is freed at once (a second free is a double free)")
    imp.quit()
    t.quit()


def hold(imp, kept):
    """The importer opens and holds each (handle, bytes, byte) of `kept`,
    its bytes checked."""
    for slot, (h, nbytes, byte) in enumerate(kept):
        check(imp.call("H", handle=h, slot=slot, nbytes=nbytes, expect=byte)[0] == CUDA_SUCCESS, f"kept {slot}")


def open_on_threads(imp, what):
    """8 threads x 40 rounds open, read and close the held handles again;
    every mapping made meanwhile is unmapped. Returns the driver calls made."""
    n = counts(imp)
    rc, ok, _, _ = imp.call("T", value=8, nbytes=40)
    check(rc == CUDA_SUCCESS and ok == 1, what)
    got = made(imp, n)
    check(got.get("cuMemMap", 0) == got.get("cuMemUnmap", 0) and got.get("cuMemMap", 0) > 0,
          f"every mapping made was unmapped ({got})")
    return got


def case_open_stress():
    """Eight threads open, read and close blocks of the same chunks at
    once, each in its own order: every open reads its block's bytes, and
    once all closed every mapping made is gone."""
    t, imp = Target(ENV), Importer(ENV)
    a, b, c = three_blocks(t)
    check(t.ask("alloc 3 1000 44") == "ok" and t.ask("alloc 4 1000 45") == "ok", "two small blocks")
    d, e = t.handle(3), t.handle(4)
    hold(imp, [(a, MiB, 0x41), (b, MiB, 0x42), (c, 6 * MiB, 0x43), (d, 1000, 0x44), (e, 1000, 0x45)])
    got = open_on_threads(imp, "8 threads x 40 rounds: every open, read and close right")
    check(got.get("cuMemImportFromShareableHandle", 0) == got.get("cuMemMap", 0),
          f"one import per mapping ({got})")
    check(all(t.ask(f"check {i} {b}") == "check 1" for i, b in enumerate(["41", "42", "43", "44", "45"])),
          "the exporter's blocks are untouched")
    imp.quit()
    t.quit()


def case_get_threads():
    """Threads meet in the exporter's cuIpcGetMemHandle (ipc_target
    get-threads): four get the handles of blocks A, B, C and two small ones
    over and over, one of them held open by an importer, while four make,
    export (twice) and free blocks of three sizes and the main thread
    sleeps and wakes the pools 20 times. Every get of a live block answers
    its handle (the same bytes; an error only around a sleep), every new
    block a new export, and the importer reads A's bytes after it all."""
    t, imp = Target(ENV), Importer(ENV)
    a, _, _ = three_blocks(t)
    check(t.ask("alloc 3 1000 44") == "ok" and t.ask("alloc 4 1000 45") == "ok", "two small blocks")
    check(imp.open(a) == CUDA_SUCCESS and imp.reads(0, MiB, 0x41), "the importer holds A open")
    answer = t.ask("get-threads 4 1500 20")
    words = answer.split()
    check(len(words) == 10 and words[1] == "ok" and int(words[2]) > 6000 and int(words[5]) >= 20,
          f"every get answered the block's own handle ({answer}; {t.stderr()[-600:]})")
    check(imp.reads(0, MiB, 0x41) and imp.close() == CUDA_SUCCESS, "A kept its bytes for the importer")
    check(all(t.ask(f"check {i} {b}") == "check 1" for i, b in enumerate(["41", "42", "43", "44", "45"])),
          "the exporter's blocks are untouched")
    for n, nbytes, byte in [(1, MiB, 0x42), (2, 6 * MiB, 0x43), (3, 1000, 0x44)]:
        check(imp.open(t.handle(n)) == CUDA_SUCCESS and imp.reads(0, nbytes, byte) and imp.close() == CUDA_SUCCESS,
              f"block {n}'s handle opens with its bytes after the sleeps")
    imp.quit()
    t.quit()


def case_open_stress_exporters():
    """Eight threads open, read and close blocks of two exporters at once:
    opens of one exporter's blocks go on while the other's are asked for
    and mapped (no lock of the importer is held across either). Every open
    reads its block's bytes, every mapping made is unmapped once all
    closed, and no descriptor is left but one link to each exporter."""
    t1, t2, imp = Target(ENV), Target(ENV), Importer(ENV)
    a, b, c = three_blocks(t1)
    check(t2.ask(f"alloc 0 {MiB} 51") == "ok" and t2.ask(f"alloc 1 {MiB} 52") == "ok" and
          t2.ask("alloc 2 1000 53") == "ok", "the second exporter's blocks")
    kept = [(a, MiB, 0x41), (b, MiB, 0x42), (c, 6 * MiB, 0x43), (t2.handle(0), MiB, 0x51), (t2.handle(1), MiB, 0x52),
            (t2.handle(2), 1000, 0x53)]
    hold(imp, kept)
    fds_before = imp.call("F")[2]
    open_on_threads(imp, "8 threads x 40 rounds over both exporters: every open, read and close right")
    fds_after = imp.call("F")[2]
    check(fds_after <= fds_before + 2, f"no descriptor left but a link to each exporter ({fds_before} before, "
          f"{fds_after} after)")
    imp.quit()
    t1.quit()
    t2.quit()


def case_release_race():
    """One thread of the importer opens and closes a block A of the
    exporter (its close is often the importer's last of that exporter, so
    a release-all goes out) while another opens a block B of the same
    chunk and reads it whole, over and over; meanwhile the exporter frees B
    and allocates and fills new blocks where B's memory would come back.
    B's hold must never be ended by A's release-all while B is open or
    being opened: every byte B's thread read while it had B open is B's.
    Five fresh pairs of processes, under a limit that leaves the exporter
    B's memory (in A's live chunk, so the same physical memory) to reuse
    once nothing holds it. Counting an open under way before its request
    goes out is what keeps it: without, most runs read a wrong byte."""
    env = {"PAGEFAST_CONF": "chunk_size:4M,limit:8M"}
    for attempt in range(5):
        t, imp = Target(env), Importer(env)
        check(t.ask(f"alloc 0 {MiB} 41") == "ok" and t.ask(f"alloc 1 {MiB} 42") == "ok", "blocks A and B")
        a, b = t.handle(0), t.handle(1)
        check(imp.call("H", handle=a, slot=0, nbytes=MiB, expect=0x41)[0] == CUDA_SUCCESS and
              imp.call("H", handle=b, slot=1, nbytes=MiB, expect=0x42)[0] == CUDA_SUCCESS, "A and B kept")
        imp.p.stdin.write(safety.REQUEST.pack(ord("U"), 0, 0, 0, 0, 20000, b""))
        imp.p.stdin.flush()
        time.sleep(0.3)  # both threads at work
        freed = t.ask("free 1")
        churn = t.ask(f"churn 3 {MiB} 1")
        rc, ok, b_opens, _ = imp.call_reply()
        check(rc == CUDA_SUCCESS and ok == 1,
              f"round {attempt}: B read right whenever open ({b_opens} opens of B; {freed}; {churn})")
        imp.quit()
        t.quit()


def case_link_kept():
    """After the importer's last close the link to the exporter stays (the
    next open needs no connection) and the exporter has been told that the
    importer holds nothing: a block it freed while held is reused. An
    exporter that closed the idle link (PAGEFAST_IPC_IDLE) is connected to
    again."""
    # As in ipc_safety_cases.py stall: under a limit of 10 MiB, A (3 MiB,
    # two 2 MiB chunks) and B leave room for one more 3 MiB block; a second
    # one can only be A's memory, once A is given back.
    env = {"PAGEFAST_CONF": "chunk_size:2M,limit:10M", "PAGEFAST_IPC_IDLE": "1s"}
    t, imp = Target(env), Importer(env)
    check(t.ask(f"alloc 0 {3 * MiB} 41") == "ok" and t.ask(f"alloc 1 {MiB} 42") == "ok", "blocks A and B")
    a, b = t.handle(0), t.handle(1)
    fds = imp.call("F")[2]
    check(imp.open(a) == CUDA_SUCCESS and imp.reads(0, 3 * MiB, 0x41), "A opens")
    check(t.ask("free 0") == "free CUDA_SUCCESS", "the exporter frees A while the importer holds it")
    check(imp.close() == CUDA_SUCCESS, "A closes")
    after = imp.call("F")[2]
    check(after == fds + 1, f"the link stays after the last close ({fds} descriptors before the open, {after} after "
          "the close)")
    settle(t)
    check(t.ask("free 0") == "free CUDA_ERROR_INVALID_VALUE", "A's free stays answered (a double free)")
    r = t.ask(f"churn 2 {3 * MiB} 0")
    check(r == "churn ok overlapping 1", f"A's memory is the exporter's again: the close reached it ({r})")
    check(imp.open(b) == CUDA_SUCCESS and imp.reads(0, MiB, 0x42) and imp.close() == CUDA_SUCCESS,
          "B opens over the kept link")
    check(imp.call("F")[2] == fds + 1, "... and no other connection was made")
    time.sleep(2.5)  # past the exporter's idle limit: it closed the link
    check(imp.open(b) == CUDA_SUCCESS and imp.reads(0, MiB, 0x42) and imp.close() == CUDA_SUCCESS,
          "B opens again after the exporter closed the idle link")
    check(imp.call("F")[2] == fds + 1, "... over one new link, the old one closed")
    imp.quit()
    t.quit()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--build", required=True)
    safety.ARGS = parser.parse_known_args()[0]
    return casekit.main(globals())


if __name__ == "__main__":
    sys.exit(main())
