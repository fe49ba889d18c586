#!/usr/bin/env python3
"""tools/bench/nvml_peak.py: the peak GPU memory one process holds, polled
through NVML (libnvidia-ml.so.1, the driver's own library) as fast as it
answers, until standard input closes.

  nvml_peak.py PID [--interval-us N]

Prints one JSON line: {"source": "nvml", "peak_mib": ..., "samples": ...,
"seconds": ..., "interval_ms": ...}. The peak is the most that
nvmlDeviceGetComputeRunningProcesses reported for PID, summed over every
device, in any sample. Exits 3 with one line on stderr when NVML is not
there (no driver) or refuses, so that the caller can fall back.

Why not nvidia-smi: one nvidia-smi query is a new process that takes tens
of milliseconds, so a loop of them sees a few samples a second and misses
a buffer that lives for a few milliseconds. A program whose memory comes
and goes (cudaMalloc with PyTorch's caching off) then looks smaller than
one whose memory stays (a pool): the comparison is biased against the
pool. NVML in one process answers in well under a millisecond.
"""
import ctypes
import json
import sys
import threading
import time

NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1  # per-process memory hidden (some containers)


class ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 takes it.
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def fail(why):
    print(f"nvml_peak: {why}", file=sys.stderr)
    sys.exit(3)


def main():
    args = sys.argv[1:]
    if not args or not args[0].isdigit():
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    pid = int(args[0])
    interval = 200e-6
    if "--interval-us" in args:
        interval = int(args[args.index("--interval-us") + 1]) * 1e-6
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        fail(f"no NVML ({e})")
    rc = nvml.nvmlInit_v2()
    if rc != 0:
        fail(f"nvmlInit_v2 returned {rc}")
    count = ctypes.c_uint(0)
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
        fail("no device")
    devices = []
    for i in range(count.value):
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == 0:
            devices.append(handle)
    query = nvml.nvmlDeviceGetComputeRunningProcesses_v3
    infos = (ProcessInfo * 256)()

    def used_bytes():
        total = 0
        for handle in devices:
            n = ctypes.c_uint(len(infos))
            rc = query(handle, ctypes.byref(n), infos)
            if rc not in (0, NVML_ERROR_INSUFFICIENT_SIZE):
                return None
            for k in range(min(n.value, len(infos))):
                if infos[k].pid == pid:
                    if infos[k].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE:
                        return None
                    total += infos[k].usedGpuMemory
        return total

    if used_bytes() is None:
        fail("nvmlDeviceGetComputeRunningProcesses_v3 refused, or hides per-process memory")
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    peak, samples, start = 0, 0, time.perf_counter()
    while not done.is_set():
        b = used_bytes()
        if b is not None:
            peak = max(peak, b)
            samples += 1
        time.sleep(interval)
    seconds = time.perf_counter() - start
    print(json.dumps({"source": "nvml", "peak_mib": peak >> 20, "samples": samples, "seconds": round(seconds, 3),
                      "interval_ms": round(1000 * seconds / max(samples, 1), 3)}))


if __name__ == "__main__":
    main()
