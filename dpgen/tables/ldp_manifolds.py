"""Entropic-LDP GAN Figure 1 and appendix Figures 6-7 (section 4.2): ``conf/table/ldp_manifolds.yaml`` (its sizes
per scale), run by ``dpgen table ldp_manifolds --scale smoke|cpu|paper`` (``make fig-ldp-manifolds``).

Points uniform on a 2-D half-circle / ellipse / rectangle (dpgen.data.synthetic, inside the unit
ball) are privatised once: Laplace (l1 ball of radius 1, scale b) or Gaussian (l2 ball of radius 1,
std s). A generator (MLP 2 x 256, 2-D uniform latent, RMSprop, the full set every step as the paper
does) is trained on the privatised points with three losses: the entropic W_p matched to the noise
(p = 1, lambda = b; p = 2, lambda = 2 s^2; no debiasing), the plain W_p (exact, POT) and the
debiased Sinkhorn divergence (same p and lambda). We report the exact W2 between generated and
clean points (and between the privatised and clean points, for reference) at several noise
scales. The epsilon of each noise scale is per record, for the unit ball with the diameter
sensitivity 2 (Gaussian at delta = 1e-5, analytic calibration).

The paper gives no numbers (only scatter plots) and its learning rate and noise levels are lost
from the text: the targets are qualitative. Writes outputs/tables/ldp_manifolds.csv (+ .md),
outputs/figures/ldp_fig1_manifolds.png (points) and ldp_manifolds_w2.png (W2 vs noise scale).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dpgen.data.synthetic import manifold_samples
from dpgen.losses.entropic import matched_loss_params
from dpgen.methods.entropic_ldp import epsilon_for_noise_scale, privatise
from dpgen.privacy.local import project_l1_ball, project_l2_ball
from dpgen.tables.ldp_common import fit_generator, generate, w2

LOSSES = ("entropic", "wasserstein", "sinkhorn")
MECHANISMS = ("laplace", "gaussian")
LR = 1e-3
DELTA = 1e-5


def compute(settings, run_root, data_root=None, seed: int = 0, progress: bool = True, dataset=None, select=None):
    """Rows and point clouds of every (shape, mechanism, noise scale, loss) run, in the run folders
    ``run_root/<shape>_<mechanism>_<noise>_<loss>``; ``settings``: the scale's sizes (shapes, noise, n, steps).
    ``data_root``, ``dataset``, ``select``: unused (synthetic data; its runs are not split over processes)."""
    s = settings
    rows, clouds = [], {}
    for shape in s["shapes"]:
        rng = np.random.default_rng([seed, 11])
        curve = manifold_samples(shape, s["n"], rng)
        for mech in MECHANISMS:
            # the noise is added to the ball-projected points: they are what a generator can recover
            clean = project_l1_ball(curve, 1.0) if mech == "laplace" else project_l2_ball(curve, 1.0)
            clouds[(shape, mech, "clean")] = clean
            for noise in s["noise"]:
                eps = epsilon_for_noise_scale(mech, noise, 1.0, DELTA)
                z, sc = privatise(clean, mech, eps, DELTA, 1.0, rng=np.random.default_rng([seed, 12, len(rows)]))
                p, reg = matched_loss_params(mech, sc)
                target = torch.tensor(z, dtype=torch.float32)
                w2_priv = w2(z, clean)
                for loss in LOSSES:
                    gen, sec, _ = fit_generator(
                        target, loss, p, reg, generator="mlp256_uniform", code_dim=2, steps=s["steps"], lr=LR,
                        optimizer="rmsprop", seed=seed, progress=progress,
                        release={"method.mechanism": mech, "privacy.epsilon": eps, "method.radius": 1.0},
                        run_dir=Path(run_root) / f"{shape}_{mech}_{noise:g}_{loss}")
                    g = generate(gen, s["n"]).numpy()
                    rows.append({"shape": shape, "mechanism": mech, "noise_scale": noise, "epsilon": eps,
                                 "delta": DELTA if mech == "gaussian" else 0.0, "loss": loss, "p": p,
                                 "reg": reg if loss != "wasserstein" else None, "w2_to_clean": w2(g, clean),
                                 "w2_private_to_clean": w2_priv, "n": s["n"], "steps": s["steps"],
                                 "seconds": round(sec, 1)})
                    clouds[(shape, mech, noise, loss)] = g
                clouds[(shape, mech, noise, "private")] = z
    return rows, clouds


def findings(rows):
    """Per (shape, mechanism): is the entropic loss closest to the clean data at every noise scale, and
    does it degrade slowest (smallest slope of W2 vs noise scale)?"""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        for mech in MECHANISMS:
            rr = [r for r in rows if r["shape"] == shape and r["mechanism"] == mech]
            if not rr:
                continue
            noises = sorted({r["noise_scale"] for r in rr})
            val = {(r["loss"], r["noise_scale"]): r["w2_to_clean"] for r in rr}
            best = [min(LOSSES, key=lambda l: val[(l, nz)]) for nz in noises]
            slopes = {l: (np.polyfit(noises, [val[(l, nz)] for nz in noises], 1)[0] if len(noises) > 1 else float("nan"))
                      for l in LOSSES}
            out.append({"shape": shape, "mechanism": mech, "entropic_best_at": sum(b == "entropic" for b in best),
                        "noise_levels": len(noises), "slopes": slopes,
                        "slowest": min(LOSSES, key=lambda l: slopes[l]) if len(noises) > 1 else None})
    return out


def notes_for(rows, settings, scale, dataset=None):
    s = settings
    f = findings(rows)
    notes = [
        f"Setting ({scale}): {s['n']} clean points per shape, unit balls, noise scales {s['noise']} (Laplace b or "
        f"Gaussian s), MLP 2x256 with a 2-D uniform latent, RMSprop lr {LR}, {s['steps']} full-batch steps, geomloss "
        "epsilon-scaling 0.8. w2_to_clean: exact W2 (POT) between as many generated points and the clean points "
        "projected on the mechanism's unit ball (l1 for Laplace, which bends the half-circle, ellipse and rectangle "
        "towards a diamond; l2 for Gaussian, which changes none of them): the input of the noise, i.e. the best a "
        "generator can recover. epsilon: per record (LDP), diameter sensitivity 2.",
        "Paper: Figure 1 / 6 / 7 are scatter plots without numbers (their noise levels and learning rate are lost from the text); its claim is that the entropic loss matched to "
        "the noise recovers the clean manifold (and, Figure 5 on MNIST, is closest to the clean data and degrades "
        "slowest with the noise).",
    ]
    for r in f:
        sl = ", ".join(f"{l} {r['slopes'][l]:.3g}" for l in LOSSES)
        notes.append(f"{r['shape']} / {r['mechanism']}: the entropic loss is closest to the clean data at "
                     f"{r['entropic_best_at']} of {r['noise_levels']} noise scales; slope of W2 vs noise: {sl}"
                     + (f" (slowest: {r['slowest']})." if r["slowest"] else "."))
    total = sum(r["entropic_best_at"] for r in f)
    levels = sum(r["noise_levels"] for r in f)
    slow = sum(r["slowest"] == "entropic" for r in f)
    notes.append(f"Verdict: the entropic loss is closest to the clean data in {total} of {levels} (shape, "
                 f"mechanism, noise) cells and degrades slowest in {slow} of {len(f)} (shape, mechanism) curves.")
    return notes


def plot_points(rows, clouds, settings, dataset=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = settings
    noise = max(s["noise"])
    combos = [(sh, m) for sh in s["shapes"] for m in MECHANISMS]
    fig, axes = plt.subplots(len(combos), 1 + len(LOSSES), figsize=(3.0 * (1 + len(LOSSES)), 2.8 * len(combos)),
                             squeeze=False)
    for i, (sh, m) in enumerate(combos):
        clean = clouds[(sh, m, "clean")]
        priv = clouds[(sh, m, noise, "private")]
        ax = axes[i, 0]
        ax.scatter(priv[:, 0], priv[:, 1], s=2, c="tab:orange", alpha=0.5, label="privatised")
        ax.scatter(clean[:, 0], clean[:, 1], s=2, c="k", label="clean")
        ax.set_title(f"{sh}, {m} {noise:g}", fontsize=8)
        for j, loss in enumerate(LOSSES):
            g = clouds[(sh, m, noise, loss)]
            ax = axes[i, j + 1]
            ax.scatter(clean[:, 0], clean[:, 1], s=2, c="0.7")
            ax.scatter(g[:, 0], g[:, 1], s=2, c="tab:red")
            ax.set_title(f"{loss}", fontsize=8)
        for ax in axes[i]:
            ax.set_xlim(-2, 2)
            ax.set_ylim(-1.5, 2)
            ax.set_aspect("equal")
            ax.tick_params(labelsize=6)
    axes[0, 0].legend(fontsize=6, markerscale=4)
    fig.suptitle("Entropic-LDP GAN Fig. 1/6/7: clean, projected on the ball (black/grey), privatised (orange), "
                 "generated (red)")
    fig.tight_layout()
    return fig


def plot_w2(rows, clouds=None, settings=None, dataset=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    combos = list(dict.fromkeys((r["shape"], r["mechanism"]) for r in rows))
    fig, axes = plt.subplots(1, len(combos), figsize=(3.6 * len(combos), 3.2), squeeze=False)
    for ax, (sh, m) in zip(axes[0], combos):
        rr = [r for r in rows if r["shape"] == sh and r["mechanism"] == m]
        for loss in LOSSES:
            pts = sorted((r["noise_scale"], r["w2_to_clean"]) for r in rr if r["loss"] == loss)
            ax.plot(*zip(*pts), marker="o", label=loss)
        pts = sorted({(r["noise_scale"], r["w2_private_to_clean"]) for r in rr})
        ax.plot(*zip(*pts), ls=":", c="k", label="privatised data")
        ax.set_title(f"{sh}, {m}", fontsize=9)
        ax.set_xlabel("noise scale")
        ax.set_ylabel("W2(generated, clean)")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig

