#!/usr/bin/env python
"""Benchmark of the domain-adaptation methods on CPU (part of ``make bench``).

1. DP-DANN's private release, the clipped sum of the target's per-sample gradients (feature extractor +
   discriminator, digits networks, B = 128 images of 28 x 28), three ways, median over repeats:

     ghost   opacus fast gradient clipping: ghost norms for Linear, per-sample conv gradients, a second
             backward of sum_i c_i l_i (DPDANN's default)
     func    torch.func vmap(grad) per-sample gradients, then dpgen.privacy.clipping.clip_per_sample
     opacus  opacus GradSampleModule per-sample gradients, then clip_per_sample

   and the largest difference between their clipped sums (they compute the same quantity).
2. Training steps per second of DANN, SWD, DP-SWD and DP-DANN on the U-M preset's networks and batch
   size (one step = the method's step + Adam + accountant step), on random images: the data's
   content does not change the cost. A paper-length U-M run is 7,900 such steps.

    python scripts/bench_da.py [--repeats 5] [--steps 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

B = 128


def bench_release(repeats: int):
    from dpgen.methods.dpdann import OpacusGhostClip, OpacusPerSample, per_sample_grads
    from dpgen.models.da_nets import make_da_nets
    from dpgen.privacy.clipping import clip_per_sample

    torch.manual_seed(0)
    g, _, disc, _ = make_da_nets("digits", (1, 28, 28), 10)
    xt = torch.rand(B, 1, 28, 28)
    clip = 0.5  # below the typical norm at initialisation: the clipping is active
    ghost, gsm = OpacusGhostClip(g, disc, clip), OpacusPerSample(g, disc)

    def via(fn):
        def run():
            names, grads = fn(xt)
            clipped, _ = clip_per_sample(grads, clip)
            return [c.sum(0) for c in clipped]
        return run

    impls = {"ghost": lambda: ghost(xt)[1], "func": via(lambda x: per_sample_grads(g, disc, x)), "opacus": via(gsm)}
    times = {k: [] for k in impls}
    outs = {}
    for _ in range(repeats + 1):  # the first round warms up
        for k, fn in impls.items():
            t0 = time.perf_counter()
            outs[k] = fn()
            times[k].append(time.perf_counter() - t0)
    diff = max(float((a - b).abs().max()) for k in ("func", "opacus") for a, b in zip(outs["ghost"], outs[k]))
    print(f"DP-DANN release, clipped per-sample sum, digits networks, B = {B}, C = {clip}:")
    for k in impls:
        print(f"  {k:7s} {1e3 * statistics.median(times[k][1:]):7.1f} ms")
    print(f"  largest difference between the clipped sums: {diff:.2e}")


def da_steps_per_second(name: str, steps: int, device="cpu", extra=()) -> float:
    """Training steps/s of DA method ``name`` on the U-M preset's networks (B = 128, random 28 x 28 images):
    the method's step + Adam + the accountant step, on ``device`` (synchronised around the timing)."""
    from dpgen.config import compose_preset
    from dpgen.methods.da_base import DABatch
    from dpgen.models.da_nets import make_da_nets
    from dpgen.methods.registry import DataInfo, build

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    cfg = compose_preset("da_um", [f"method={name}", *extra, "trainer.epochs=null", "trainer.steps=7900"])
    torch.manual_seed(0)
    g, h, disc, d = make_da_nets("auto", (1, 28, 28), 10)
    g, h = g.to(dev), h.to(dev)
    disc = disc.to(dev) if disc is not None else None
    cfg.trainer.batch_size = B
    method = build(cfg, DataInfo(10000, (1, 28, 28), 10, feat_dim=d), 7900, "domain_adaptation", disc=disc)
    method.rng = torch.Generator(device=dev).manual_seed(0)
    sampler = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(list(g.parameters()) + list(h.parameters()) + method.parameters(), lr=1e-3)
    xs, ys = torch.rand(1000, 1, 28, 28, device=dev), torch.randint(0, 10, (1000,), device=dev)
    xt = torch.rand(10000, 1, 28, 28, device=dev)

    def step(i):
        idx_t = method.sample_batch(10000, B, sampler).to(dev)
        idx_s = torch.randint(0, 1000, (B,), device=dev)
        opt.zero_grad(set_to_none=True)
        method.step({"g": g, "h": h}, DABatch(xs[idx_s], ys[idx_s], xt[idx_t], i / steps))
        opt.step()
        method.account()

    step(0)
    sync()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    sync()
    return steps / (time.perf_counter() - t0)


def bench_steps(steps: int):
    from dpgen.tables.declared import load_table

    # the Table 1 settings (DP-SWD: the Bernstein bound), as conf/table/dpswd_table1_domain_adaptation.yaml has them
    cells = {c.get("key"): c for c in load_table("dpswd_table1_domain_adaptation", "paper")["cells"]}
    print(f"Domain-adaptation training steps (U-M preset networks, B = {B}, random 28 x 28 images):")
    for name in ("dann", "swd", "dpswd", "dpdann"):
        ov = list(cells[name].get("overrides") or [])
        base = next(o.split("=", 1)[1] for o in ov if o.startswith("method="))
        rate = da_steps_per_second(base, steps, extra=[o for o in ov if not o.startswith("method=")])
        print(f"  {name:7s} {rate:6.2f} steps/s  (7,900 steps: {7900 / rate / 60:5.1f} min)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} thread(s)")
    bench_release(a.repeats)
    bench_steps(a.steps)


if __name__ == "__main__":
    main()
