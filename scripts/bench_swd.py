#!/usr/bin/env python
"""Benchmark of the DP-SWD loss on CPU (``make bench-swd``): dpgen vs POT vs the matmul+sort floor.

One forward+backward (gradient w.r.t. x) at n = 1000 samples per side, d = 784, k = 1000
projections, p = 2, float32, all timed in the same process, interleaved, median over repeats:

  dpgen        dpgen.losses.sliced_wasserstein(x, y, projections=U, p=2)           (SWD_2^2)
  dpgen DP     the same with sigma = 1: the DP-SWD of Algorithm 1 (noise on both sides)
  dpgen fresh  sigma = 1 and k fresh projections drawn in the call (what a training step does)
  POT          ot.sliced_wasserstein_distance(x, y, projections=U, p=2) ** 2 (torch backend)
  floor        ((sort(x @ U) - sort(y @ U)) ** 2).mean(): the matmul + sort both sides,
               nothing else; no implementation of SWD can do less work

Targets: dpgen >= 3x faster than POT and within 1.5x of the floor (both for the plain SWD
with the same U, the like-for-like comparison).

Peak memory: each variant runs once more in a fresh subprocess; once the inputs exist the RSS
high-water mark is reset (/proc/self/clear_refs, Linux) and the peak RSS increase during one
forward+backward is read with resource.getrusage(RUSAGE_SELF).ru_maxrss. The child runs with
MALLOC_MMAP_THRESHOLD_=65536 so that freed tensors leave the RSS (glibc would otherwise reuse
resident heap pages and the increase would read ~0). tracemalloc is not
used: it only sees Python's allocator, not torch's tensor memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the environment before torch/POT run: they set KMP_* variables that change how the memory
# children allocate (their peak then reads ~0)
BASE_ENV = dict(os.environ)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import dpgen  # noqa: E402,F401  (before POT: keeps POT's JAX, CuPy and TensorFlow backends off)

N, D, K, SIGMA = 1000, 784, 1000, 1.0
TARGET_VS_POT, TARGET_VS_FLOOR = 3.0, 1.5


def make_inputs(n=N, d=D, k=K, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randn(n, d, generator=g) + 0.5
    u = torch.randn(d, k, generator=g)
    u = u / u.norm(dim=0, keepdim=True)
    return x, y, u


def variants(k=K):
    import ot

    from dpgen.losses.sliced import sliced_wasserstein

    gen = torch.Generator().manual_seed(1)

    def dpgen_swd(x, y, u):
        return sliced_wasserstein(x, y, projections=u, p=2)

    def dpgen_dp(x, y, u):
        return sliced_wasserstein(x, y, projections=u, p=2, sigma=SIGMA, generator=gen)

    def dpgen_fresh(x, y, u):
        return sliced_wasserstein(x, y, n_projections=k, p=2, sigma=SIGMA, generator=gen)

    def pot(x, y, u):
        return ot.sliced_wasserstein_distance(x, y, projections=u, p=2) ** 2

    def floor(x, y, u):
        sx, _ = torch.sort(x @ u, dim=0)
        sy, _ = torch.sort(y @ u, dim=0)
        return ((sx - sy) ** 2).mean()

    return {"dpgen": dpgen_swd, "dpgen DP": dpgen_dp, "dpgen fresh": dpgen_fresh, "POT": pot, "floor": floor}


def step(fn, x, y, u):
    x.grad = None
    loss = fn(x, y, u)
    loss.backward()
    return loss


def time_all(repeats, warmup):
    x, y, u = make_inputs()
    x.requires_grad_(True)
    fns = variants()
    times = {name: [] for name in fns}
    values = {}
    for _ in range(warmup):
        for name, fn in fns.items():
            values[name] = step(fn, x, y, u).item()
    for _ in range(repeats):  # interleaved: a load spike hits every variant alike
        for name, fn in fns.items():
            t0 = time.perf_counter()
            step(fn, x, y, u)
            times[name].append(time.perf_counter() - t0)
    return times, values


def _reset_peak_rss() -> bool:
    """Reset the process's RSS high-water mark (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_memory_child(name):
    x, y, u = make_inputs()
    x.requires_grad_(True)
    fn = variants()[name]
    # the imports peaked higher than one step will: reset the high-water mark to the current RSS
    reset = _reset_peak_rss()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step(fn, x, y, u)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux; without the reset the increase can read 0 (a lower bound)
    print(json.dumps({"peak_rss_increase_mb": (after - before) / 1024, "reset": reset}))


def peak_memory(name):
    p = subprocess.run([sys.executable, __file__, "--memory-child", name], capture_output=True, text=True,
                       env={**BASE_ENV, "OMP_NUM_THREADS": str(torch.get_num_threads()),
                            # every block >= 64 KiB gets its own mmap and is unmapped when freed, so
                            # the RSS follows the live tensors instead of reusing pages the imports
                            # left resident in malloc's heap (without this the increase reads ~0)
                            "MALLOC_MMAP_THRESHOLD_": "65536"})
    if p.returncode != 0:
        return float("nan")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return r["peak_rss_increase_mb"] if r["reset"] else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_child:
        peak_memory_child(args.memory_child)
        return None

    import ot

    print(f"DP-SWD loss, forward+backward w.r.t. x, CPU float32: n = {N} per side, d = {D}, k = {K}, p = 2")
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), POT {ot.__version__}; "
          f"median of {args.repeats} interleaved repeats after {args.warmup} warm-up rounds")
    # memory children first: started after the timing loop they read ~0 (not understood; the
    # parent's torch/OpenMP state leaks into them somehow), started before they read sane values
    mem = {k: (float("nan") if args.no_memory else peak_memory(k)) for k in variants()}
    times, values = time_all(args.repeats, args.warmup)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{'variant':12s} {'median ms':>10s} {'min ms':>8s} {'vs floor':>9s} {'POT / it':>9s} "
          f"{'peak MB':>8s} {'value':>10s}")
    for name in med:
        print(f"{name:12s} {1e3 * med[name]:10.1f} {1e3 * min(times[name]):8.1f} "
              f"{med[name] / med['floor']:8.2f}x {med['POT'] / med[name]:8.2f}x {mem[name]:8.1f} "
              f"{values[name]:10.5f}")
    speedup = med["POT"] / med["dpgen"]
    overhead = med["dpgen"] / med["floor"]
    ok_pot, ok_floor = speedup >= TARGET_VS_POT, overhead <= TARGET_VS_FLOOR
    print(f"\ndpgen vs POT: {speedup:.2f}x faster (target >= {TARGET_VS_POT:g}x): {'met' if ok_pot else 'MISSED'}")
    print(f"dpgen vs matmul+sort floor: {overhead:.2f}x (target <= {TARGET_VS_FLOOR:g}x): "
          f"{'met' if ok_floor else 'MISSED'}")
    print(f"same value as POT: |dpgen - POT| = {abs(values['dpgen'] - values['POT']):.2e}")
    print("peak MB: peak RSS increase during one forward+backward in a fresh process: the RSS high-water "
          "mark is reset (/proc/self/clear_refs) once x, y, U exist, then read with "
          "resource.getrusage(RUSAGE_SELF).ru_maxrss; the inputs (3 x ~3 MB) are not counted. "
          f"For scale: one n x k float32 matrix is {N * K * 4 / 2**20:.1f} MB.")
    return {"median_s": med, "peak_mb": mem, "speedup_vs_pot": speedup, "vs_floor": overhead}


if __name__ == "__main__":
    main()
