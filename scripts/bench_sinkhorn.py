#!/usr/bin/env python
"""Benchmark of DP-Sinkhorn on CPU (part of ``make bench``).

1. The Sinkhorn divergence forward + backward (gradient w.r.t. the generated batch x) at batch
   50, 200 and 500 on 784-d rows (plus alpha_c = 15 one-hot labels: 794 columns), entropy 0.05
   on the cost ||x - y||^2 (DP-Sinkhorn's MNIST setting), float32, one process, interleaved,
   median over repeats:

     geomloss  dpgen.losses.sinkhorn_divergence (SamplesLoss "sinkhorn", tensorized backend,
               blur = sqrt(eps / 2), epsilon-scaling 0.5: a fixed number of iterations)
     POT       ot.sinkhorn2 (method="sinkhorn_log", torch backend, the same cost and eps),
               debiased 2 OT(x, y) - OT(x, x) - OT(y, y), stopping at stopThr=1e-6 or 1000
               iterations

   with the Sinkhorn iterations each used (geomloss: the length of its epsilon schedule, per
   OT term; POT: the iterations its three solves ran in total).
2. DP-Sinkhorn training steps per second at batch 50 on CPU: the shared trainer, DCGAN
   generator, Poisson batches on 8,000 random 28 x 28 images (the data's content does not change
   the cost), image-gradient clip + noise, accountant step included.

    python scripts/bench_sinkhorn.py [--repeats 5] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from dpgen.losses.sinkhorn import (conditional_rows, pot_sinkhorn2_divergence, sinkhorn_divergence,  # noqa: E402
                                   sinkhorn_iterations)

EPS, ALPHA_C, D = 0.05, 15.0, 784


def make_rows(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, D, generator=g)
    y = torch.rand(n, D, generator=g) ** 2
    lx = torch.randint(0, 10, (n,), generator=g)
    ly = torch.randint(0, 10, (n,), generator=g)
    return conditional_rows(x, lx, 10, ALPHA_C), conditional_rows(y, ly, 10, ALPHA_C)


def time_fb(fn, x, y, repeats):
    times, out = [], None
    for _ in range(repeats):
        xr = x.clone().requires_grad_(True)
        t0 = time.perf_counter()
        out = fn(xr, y)
        val = out[0] if isinstance(out, tuple) else out
        val.backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_loss(repeats):
    print(f"Sinkhorn divergence forward+backward, d = {D} + 10 labels (alpha_c {ALPHA_C}), eps = {EPS}, "
          f"float32, {torch.get_num_threads()} thread(s), median of {repeats}")
    print(f"{'batch':>6} {'geomloss ms':>12} {'iters':>6} {'POT ms':>10} {'iters':>6} {'POT/geomloss':>13} "
          f"{'S geomloss':>11} {'S POT':>11}")
    rows = []
    for n in (50, 200, 500):
        x, y = make_rows(n)
        geo = lambda a, b: sinkhorn_divergence(a, b, EPS)  # noqa: E731
        pot = lambda a, b: pot_sinkhorn2_divergence(a, b, EPS, num_iter_max=1000, tol=1e-6)  # noqa: E731
        time_fb(geo, x, y, 1)  # warm-up
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_pot, (v_pot, it_pot) = time_fb(pot, x, y, 1)
        t_geo, v_geo = time_fb(geo, x, y, repeats)
        it_geo = 3 * sinkhorn_iterations(x, y, EPS)  # three OT terms
        rows.append((n, t_geo, it_geo, t_pot, it_pot))
        print(f"{n:>6} {1e3 * t_geo:>12.1f} {it_geo:>6} {1e3 * t_pot:>10.1f} {it_pot:>6} {t_pot / t_geo:>13.1f} "
              f"{float(v_geo.detach()):>11.3f} {float(torch.as_tensor(v_pot).detach()):>11.3f}")
    print("  (S POT is POT's linear loss <P, C>, not the entropic dual value geomloss returns; values differ by "
          "the entropy term. POT stops at 1000 iterations per solve when not converged.)")
    return rows


def bench_training(steps):
    import tempfile

    import numpy as np

    from dpgen.config import register_configs, validate
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from dpgen.data.images import write_idx
    from dpgen.tasks import run as run_task

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        raw = root / "MNIST" / "raw"
        raw.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for prefix, n in (("train", 8000), ("t10k", 100)):
            write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
            write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))
        register_configs()
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = validate(compose(config_name="config", overrides=[
                "experiment=dpsinkhorn_mnist", f"dataset.data_root={root}", "dataset.n_train=8000",
                f"trainer.steps={steps}",
                "trainer.progress=false", "task.eval_models=[]", "task.fid=false", "trainer.device=cpu",
                f"trainer.checkpoint_every={10 * steps}", f"trainer.log_every={steps}"]))
        m = run_task(cfg, Path(tmp) / "run")
    # train_seconds includes loading the data and building the model: time per step from the steps alone
    sps = m["steps"] / m["train_seconds"]
    print(f"DP-Sinkhorn training on CPU: batch 50 (Poisson, q = 50/8000 on 8,000 random 28x28 images), DCGAN generator, "
          f"{m['steps']} steps in {m['train_seconds']:.1f} s (incl. setup) = {sps:.2f} steps/s; "
          f"epsilon spent {m['privacy']['epsilon_spent']:.4f}")
    return sps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args(argv)
    bench_loss(args.repeats)
    bench_training(args.steps)


if __name__ == "__main__":
    main()
