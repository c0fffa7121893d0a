#!/usr/bin/env python
"""DP-Kernel's signal against its noise, per bandwidth and batch, on a PUBLIC proxy (USPS): which settings can learn.

DP-Kernel's generator reads grad f~(y) = grad f_D(y) + tau grad G(y) at each generated sample y (docs/DPKERNEL.md).
For a bandwidth s the GP derivative has E||grad G_s(y)||^2 = d / s^2 at every point, so the noise's norm is
tau sqrt(d sum_s 1 / s^2) with tau = sigma sqrt(S) / B; the signal is the clean witness gradient, which for a small s
vanishes (exp(-D^2 / 2 s^2), D the distance to the nearest record of the class). This script measures, on USPS
records framed as MNIST (resize 20, pad 4: the public proxy of docs/SETTINGS.md) and at the noise the full
private data set would need (sigma calibrated to (epsilon, delta) for n records at q = B / n over T steps):

* signal: the clean witness gradient at stand-ins for generated samples, from Poisson batches of expected size B of
  USPS training records: its mean norm at USPS test records (a generator that has converged) and at those records
  blurred (one that draws the shape but not the stroke), and, at the blurred ones, its component toward the sharp
  record: the detail a generator has to learn;
* noise: tau sqrt(d sum_s 1 / s^2) in all, tau sqrt(sum_s 1 / s^2) along one direction (checked against draws of
  :func:`dpgen.methods.dpkernel.gradient_noise` in the tests);
* the detail ratio per step, and times sqrt(T): what T steps of averaging could reach if the signal kept its
  direction (an upper bound, not a prediction of FID).

No private record is read: only USPS (public, by a fixed name) and the public constants n, epsilon, delta. The rule
this script applies is :data:`RULE`; it ranks settings, and the picked preset's own training run says whether it
learns (docs/DPKERNEL.md).

    DPGEN_DATA_ROOT=../shared/data python scripts/dpkernel_proxy_snr.py [--n 60000] [--epsilon 10]
        [--delta 1.5149e-6] [--epochs 50] [--out experiments/fidelity/dpkernel_proxy_snr]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the candidates: DPImageBench's five bandwidths (on [0, 1] pixels), the same with the small ones dropped one by
#: one, and with 16 added; batches up to 120 (the exact GP derivative draw grows as (B / classes)^6: 0.5 s a step at
#: 200 on one thread)
BANDWIDTH_SETS = ([0.5, 1.0, 2.0, 4.0, 8.0], [1.0, 2.0, 4.0, 8.0], [2.0, 4.0, 8.0], [4.0, 8.0], [8.0],
                  [2.0, 4.0, 8.0, 16.0], [4.0, 8.0, 16.0])
BATCHES = (60, 120)
#: the largest accumulated ratio of the detail signal (the clean gradient's component, at a blurred sample, toward
#: its sharp record) to the noise along that direction, times sqrt(T), at the preset's epochs. (A first rule, the
#: whole signal's norm, picked the widest bandwidth alone: its gradient pulls towards the class mean, which an
#: accuracy can reward and fidelity cannot; it was replaced on the proxy's numbers, before any private run.)
RULE = ("largest detail signal / detail noise x sqrt(T) at the blurred stand-in, T = epochs x n / B, at the "
        "preset's epochs (DPImageBench's 50,000 steps of 60 on 60,000 records: 50)")


def noise_norm(tau: float, dim: int, bandwidths: Sequence[float]) -> float:
    """sqrt(E||tau grad G(y)||^2) for G ~ GP(0, sum_s k_s) at one point: tau sqrt(d sum_s 1 / s^2)."""
    return float(tau) * math.sqrt(dim * sum(1.0 / float(s) ** 2 for s in bandwidths))


def mean_signal(points: torch.Tensor, labels: torch.Tensor, real: torch.Tensor, real_labels: torch.Tensor,
                bandwidths: Sequence[float], batch: int, draws: int, generator: torch.Generator,
                directions: Optional[torch.Tensor] = None) -> Tuple[float, float]:
    """Over ``draws`` Poisson batches (rate batch / len(real)) of ``real``: the mean norm of the clean witness
    gradient at ``points``, and (with unit ``directions``, a row per point; else nan) the mean of its component
    along them."""
    from dpgen.methods.dpkernel import witness_gradient
    q = batch / real.shape[0]
    norms, along = [], []
    for _ in range(draws):
        keep = torch.rand(real.shape[0], generator=generator) < q
        g = witness_gradient(points, labels, real[keep], real_labels[keep], bandwidths, batch, num_classes=10)
        norms.append(g.norm(dim=1).mean().item())
        along.append((g * directions).sum(1).mean().item() if directions is not None else float("nan"))
    return sum(norms) / len(norms), sum(along) / len(along)


def table(n: int, epsilon: float, delta: float, epochs: float, real, real_labels, sharp: torch.Tensor,
          blurred: torch.Tensor, point_labels: torch.Tensor, draws: int = 4, seed: int = 0,
          bandwidth_sets=BANDWIDTH_SETS, batches=BATCHES) -> List[dict]:
    """One row per (bandwidths, batch): sigma, tau, the noise, the signal at the sharp and blurred stand-ins, and
    at the blurred one its component toward the sharp record (the direction that adds the detail) against the
    noise's component along it, per step and times sqrt(T)."""
    from dpgen.privacy.calibration import calibrate_noise_multiplier
    rows = []
    dim = int(real[0].numel())
    toward = sharp - blurred
    toward = toward / toward.norm(dim=1, keepdim=True).clamp_min(1e-12)
    for b in batches:
        steps = int(round(epochs * n / b))
        sigma = calibrate_noise_multiplier(epsilon, delta, b / n, steps, sampling="poisson", accountant="rdp")
        for bws in bandwidth_sets:
            tau = sigma * math.sqrt(len(bws)) / b
            noise = noise_norm(tau, dim, bws)
            noise_along = noise_norm(tau, 1, bws)  # one unit direction: tau sqrt(sum_s 1 / s^2)
            g = torch.Generator().manual_seed(seed)
            sig_sharp, _ = mean_signal(sharp, point_labels, real, real_labels, bws, b, draws, g)
            g = torch.Generator().manual_seed(seed)
            sig_blur, along = mean_signal(blurred, point_labels, real, real_labels, bws, b, draws, g, toward)
            rows.append({"bandwidths": list(bws), "batch": b, "steps": steps, "sigma": round(sigma, 4), "tau": tau,
                         "noise_norm": noise, "signal_sharp": sig_sharp, "signal_blurred": sig_blur,
                         "ratio_blurred": sig_blur / noise, "detail_signal": along, "detail_noise": noise_along,
                         "detail_ratio": along / noise_along,
                         "detail_ratio_x_sqrtT": along / noise_along * math.sqrt(steps)})
    return rows


def markdown(rows: List[dict], args) -> str:
    head = ["bandwidths", "batch", "steps", "sigma", "noise norm", "signal (sharp)", "signal (blurred)",
            "signal / noise (blurred)", "detail: signal", "detail: noise", "detail: ratio", "detail: x sqrt(T)"]
    best = max(rows, key=lambda r: r["detail_ratio_x_sqrtT"])
    lines = ["# DP-Kernel on the public proxy: signal against noise, per bandwidth set and batch", "",
             f"USPS (public; resize 20, pad 4 as MNIST), noise calibrated for n = {args.n:,} records at epsilon "
             f"{args.epsilon:g}, delta {args.delta:g} (RDP, Poisson), {args.epochs:g} epochs. {args.points} USPS "
             f"test records stand in for generated samples (sharp), and the same blurred by {args.blur:g} px "
             f"(blurred); the clean witness gradient is averaged over {args.draws} Poisson batches of USPS training "
             "records. Noise norm: tau sqrt(d sum 1 / s^2); detail: the component toward the sharp record at the "
             "blurred one, against tau sqrt(sum 1 / s^2). Made by `scripts/dpkernel_proxy_snr.py`.", "",
             f"Rule: {RULE}. Pick: bandwidths {best['bandwidths']}, batch {best['batch']}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["bandwidths"]), str(r["batch"]), f"{r['steps']:,}", f"{r['sigma']:.4f}",
                 f"{r['noise_norm']:.4g}", f"{r['signal_sharp']:.3g}", f"{r['signal_blurred']:.3g}",
                 f"{r['ratio_blurred']:.3g}", f"{r['detail_signal']:.3g}", f"{r['detail_noise']:.3g}",
                 f"{r['detail_ratio']:.3g}", f"{r['detail_ratio_x_sqrtT']:.3g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60000, help="the private data set's size the noise is calibrated for")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--delta", type=float, default=1.5149e-6, help="DPImageBench's 1 / (n ln n) at n = 60,000")
    ap.add_argument("--epochs", type=float, default=50.0, help="T = epochs x n / B steps (the preset's: 50)")
    ap.add_argument("--points", type=int, default=500, help="USPS test records standing in for generated samples")
    ap.add_argument("--draws", type=int, default=4, help="Poisson batches averaged per setting")
    ap.add_argument("--blur", type=float, default=1.5, help="the blurred stand-in's Gaussian std in pixels")
    ap.add_argument("--out", default=str(ROOT / "experiments/fidelity/dpkernel_proxy_snr"),
                    help="writes <out>.json and <out>.md")
    args = ap.parse_args(argv)
    from dpgen.data import load_dataset
    from dpgen.data.base import as_tensors
    from dpgen.models.restorer import blur
    from dpgen.utils.io import atomic_write_text
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    x, y = as_tensors(load_dataset("usps", "train", resize=20, pad=4))
    xt, yt = as_tensors(load_dataset("usps", "test", resize=20, pad=4))
    pick = torch.randperm(xt.shape[0], generator=torch.Generator().manual_seed(0))[: args.points]
    xt, yt = xt[pick], yt[pick]
    sharp, blurred = xt.flatten(1).double(), blur(xt.double(), args.blur).flatten(1)
    rows = table(args.n, args.epsilon, args.delta, args.epochs, x.flatten(1).double(), y, sharp, blurred, yt,
                 args.draws)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"rule": RULE, "proxy": "usps (resize 20, pad 4)", "n": args.n, "epsilon": args.epsilon,
               "delta": args.delta, "epochs": args.epochs, "points": args.points, "draws": args.draws,
               "blur_px": args.blur, "rows": rows}
    atomic_write_text(out.with_suffix(".json"), json.dumps(payload, indent=1))
    md = markdown(rows, args)
    atomic_write_text(out.with_suffix(".md"), md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
