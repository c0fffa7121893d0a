"""Entropic-LDP GAN Figure 11 (appendix 5.5) on the MNIST of ../shared: ``conf/table/ldp_trainsize.yaml`` (its
sizes per scale), run by ``dpgen table ldp_trainsize --scale smoke|paper`` (``make fig-ldp-trainsize``).

The first n of the 8,000 ``mnist10k`` training images (flattened), privatised by the Gaussian
mechanism (l2 ball of radius 16: no image changes; noise std s), train the FC 2x500 generator
(2-D uniform latent) with the entropic W2 loss (lambda = 2 s^2). Reported: exact W2 between
``n_eval`` generated images and (a) ``n_eval`` of the clean images used for training ("train"),
(b) ``n_eval`` held-out clean images of the test split ("test"). Theorem 2 predicts a decrease
with n (parametric rate); close train and test curves mean no overfitting.
Writes outputs/tables/ldp_trainsize.csv (+ .md) and outputs/figures/ldp_fig11_trainsize.png.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dpgen.losses.entropic import matched_loss_params
from dpgen.methods.entropic_ldp import epsilon_for_noise_scale, privatise
from dpgen.tables.ldp_common import fit_generator, generate, load_mnist_images, w2

RADIUS = 16.0
DELTA = 1e-5


def compute(settings, run_root, data_root=None, seed=0, progress=True, dataset="mnist10k", select=None):
    """One row per training-set size n, each a run in ``run_root/n<n>``; ``settings``: the scale's sizes (noise, n,
    steps, batch, n_eval). ``select``: unused (its runs are not split over processes). Pictures: none."""
    s = settings
    xtr, xte = load_mnist_images(data_root, dataset)
    clean = xtr.reshape(len(xtr), -1).numpy()
    ne = s["n_eval"]
    ref_test = xte.reshape(len(xte), -1)[:ne].numpy()
    eps = epsilon_for_noise_scale("gaussian", s["noise"], RADIUS, DELTA)
    z_all, sc = privatise(clean, "gaussian", eps, DELTA, RADIUS, rng=np.random.default_rng([seed, 31]))
    p, reg = matched_loss_params("gaussian", sc)
    rows = []
    for n in s["n"]:
        target = torch.tensor(z_all[:n], dtype=torch.float32)  # each record privatised once, subsets nest
        gen, sec, _ = fit_generator(
            target, "entropic", p, reg, generator="fc500", code_dim=2, steps=s["steps"], batch_size=s["batch"],
            lr=1e-3, optimizer="adam", seed=seed, progress=progress, preset="ldp_mnist_convergence",
            release={"method.mechanism": "gaussian", "privacy.epsilon": eps, "method.radius": RADIUS},
            run_dir=Path(run_root) / f"n{n}")
        g = generate(gen, ne).numpy()
        m = min(ne, n)
        rows.append({"n": n, "noise_scale": sc, "epsilon": eps, "w2_to_train": w2(g[:m], clean[:m]),
                     "w2_to_test": w2(g, ref_test), "steps": s["steps"], "batch_size": min(s["batch"], n),
                     "seconds": round(sec, 1)})
    return rows, {}


def plot(rows, pictures=None, settings=None, dataset=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    ns = [r["n"] for r in rows]
    ax.plot(ns, [r["w2_to_train"] for r in rows], marker="o", label="train (clean)")
    ax.plot(ns, [r["w2_to_test"] for r in rows], marker="s", label="test (held-out clean)")
    ax.set_xscale("log")
    ax.set_xlabel("number of privatised training images n")
    ax.set_ylabel("W2(generated, clean)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"Entropic-LDP GAN Fig. 11 (s = {rows[0]['noise_scale']:g})", fontsize=9)
    fig.tight_layout()
    return fig



def notes_for(rows, settings, scale, dataset="mnist10k"):
    s = settings
    dec = all(a["w2_to_test"] >= b["w2_to_test"] for a, b in zip(rows, rows[1:]))
    gap = max(abs(r["w2_to_train"] - r["w2_to_test"]) for r in rows)
    return [
        f"Setting ({scale}): Gaussian s = {s['noise']}, l2 ball radius {RADIUS:g}, FC 2x500 + 2-D uniform latent, "
        f"entropic W2 (lambda = 2 s^2), Adam lr 1e-3, {s['steps']} steps of batch {s['batch']}; W2 exact on "
        f"{s['n_eval']} generated vs min(n, {s['n_eval']}) clean training images (train) and {s['n_eval']} held-out "
        "test images (test). Note: with n < n_eval the train reference has only n points.",
        "Paper (Figure 11, shape only): both curves decrease with n and stay close (no overfitting).",
        f"Ours: W2 to test {'decreases' if dec else 'does not decrease monotonically'} with n; largest "
        f"|train - test| gap {gap:.3g}.",
    ]
