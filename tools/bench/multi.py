#!/usr/bin/env python3
"""tools/bench/multi.py: the multi-GPU measurements on a machine with several
GPUs, side by side in one run, each configuration in fresh processes
(--repeats, default 5, shuffled), medians and ratios:

  allreduce  torchrun --nproc_per_node N tools/bench/allreduce.py, without
             pagefast and under pagefast-run, for N = 2, 4, 8 (as many as
             the machine has): right sum on every rank, bus bandwidth of a
             1 GiB all-reduce, each rank's pool only on its own device, the
             NUMA node each rank bound
  peer       tools/gpu/peer_bench (devices 0 and 1): peer copy and
             peer-reading kernel bandwidth over cudaMalloc memory, without
             and with pagefast
  seed       tools/bench/seed.py on every GPU at once (one process per GPU,
             CUDA_VISIBLE_DEVICES), without and with pagefast

NCCL's multicast (NVLS) and multi-node NVLink stay off. Builds nothing.
With fewer than two GPUs it says so and exits 2.

  tools/bench/multi.py [--build DIR] [--repeats N] [--only allreduce,peer,seed] [--md FILE]

Not yet run on a machine with several GPUs.
"""
import argparse
import datetime
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from run import clean_env, results  # noqa: E402  (tools/bench/run.py)
from run import run as bench_run  # noqa: E402
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "NCCL_MNNVL_ENABLE": "0"}


def gpu_count():
    try:
        r = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return 0
    return len([l for l in r.stdout.splitlines() if l.startswith("GPU ")])


def run(argv, env_extra, timeout=600):
    return bench_run(argv, dict(NCCL_ENV, **env_extra), timeout=timeout)


def med(values):
    return statistics.median(values) if values else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="allreduce,peer,seed")
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    gpus = gpu_count()
    if gpus < 2:
        print(f"tools/bench/multi.py: needs 2 or more GPUs, this machine has {gpus}", file=sys.stderr)
        return 2
    only = set(args.only.split(","))
    lib = os.path.join(args.build, "interpose", "libpagefast.so")
    launcher = [os.path.join(ROOT, "tools", "pagefast-run"), "--lib", lib, "--"]
    rng = random.Random(12345)
    py = sys.executable
    md = []
    all_ok = True

    if "allreduce" in only:
        md += ["### NCCL all-reduce, 1 GiB float32 (bus bandwidth GB/s, median over processes of each job's slowest rank)", "",
               "| ranks | without pagefast | with pagefast | with / without | sums right | pool on own device only | NUMA nodes bound (with) |",
               "| ---: | ---: | ---: | ---: | --- | --- | --- |"]
        for n in [k for k in (2, 4, 8) if k <= gpus]:
            bw = {"without": [], "with": []}
            sums_ok, own_only, nodes = True, True, set()
            torchrun = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                        os.path.join(HERE, "allreduce.py")]
            for _ in range(args.repeats):
                for label in rng.sample(["without", "with"], 2):
                    argv = launcher + torchrun if label == "with" else torchrun
                    r = run(argv, {})
                    ranks = results(r.stdout)
                    if r.returncode != 0 or len(ranks) != n:
                        sums_ok = False
                        continue
                    bw[label].append(min(float(x["busbw_gbs"]) for x in ranks))
                    sums_ok &= all(x["ok"] == "1" for x in ranks)
                    if label == "with":
                        own_only &= all(x["pooled_devices"] == x["local_rank"] for x in ranks)
                        nodes |= {(x["local_rank"], x["numa_node"]) for x in ranks}
            a, b = med(bw["without"]), med(bw["with"])
            all_ok &= sums_ok and own_only
            md.append(f"| {n} | {a:.1f} | {b:.1f} | {b / a:.3f} | {'yes' if sums_ok else 'NO'} | "
                      f"{'yes' if own_only else 'NO'} | {' '.join(f'{r}:{nd}' for r, nd in sorted(nodes))} |")
        md.append("")

    if "peer" in only:
        bench = os.path.join(args.build, "tools", "gpu", "peer_bench")
        got = {"without": [], "with": []}
        for _ in range(args.repeats):
            for label in rng.sample(["without", "with"], 2):
                r = run([bench], {"LD_PRELOAD": lib} if label == "with" else {})
                for x in results(r.stdout):
                    got[label].append(x)
                    all_ok &= x["bad"] == "0"
        md += ["### peer access, devices 0 and 1, 1 GiB (GB/s, medians)", "",
               "| what | cudaMalloc memory | pagefast memory | pagefast / cudaMalloc |", "| --- | ---: | ---: | ---: |"]
        for key, name in (("copy_gbs", "cudaMemcpyPeer 0 -> 1"), ("read_gbs", "kernel on 1 reading 0's memory")):
            a = med([float(x[key]) for x in got["without"]])
            b = med([float(x[key]) for x in got["with"]])
            md.append(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
        md.append("")

    if "seed" in only:
        passes = ["first_s", "second_s", "after_empty_cache_s"]
        got = {"without": {p: [] for p in passes}, "with": {p: [] for p in passes}}
        for _ in range(args.repeats):
            for label in rng.sample(["without", "with"], 2):
                extra = {"LD_PRELOAD": lib} if label == "with" else {}
                procs = []
                for g in range(gpus):
                    e = clean_env(dict(extra, CUDA_VISIBLE_DEVICES=str(g)))
                    procs.append(subprocess.Popen([py, os.path.join(HERE, "seed.py")], env=e, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True))
                for p in procs:
                    out, _ = p.communicate(timeout=600)
                    for x in results(out):
                        for k in passes:
                            got[label][k].append(float(x[k]))
        md += [f"### seed benchmark on all {gpus} GPUs at once (s, medians over GPUs and processes)", "",
               "| pass | without pagefast | with pagefast | with / without |", "| --- | ---: | ---: | ---: |"]
        for k in passes:
            a, b = med(got["without"][k]), med(got["with"][k])
            md.append(f"| {k[:-2]} | {a:.4f} | {b:.4f} | {b / a:.2f} |")
        md.append("")

    commit = os.environ.get("PAGEFAST_COMMIT", "unknown")
    text = "\n".join([f"Multi-GPU run, {datetime.date.today()}, commit {commit}, {gpus} GPUs, "
                      f"{args.repeats} fresh processes per configuration",
                      f"command: tools/bench/multi.py --repeats {args.repeats} --only {args.only}", ""] + md)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
