"""WDP paper, Figure 3: effect of beta and delta on the Wasserstein accountant's epsilon. A computed table,
``conf/table/wdp_beta_delta.yaml``, run by ``dpgen table wdp_beta_delta --scale paper`` (``make fig-wdp-beta-delta``).

Corollary 1 gives ``eps = L - log(delta) / beta`` with ``L = sum_t W_t`` the accumulated Theorem-2
loss. (a) eps vs beta for beta = 1..50 and delta in {1e-10, 1e-8, 1e-5, 1e-3}; (b) eps vs delta for
delta in [1e-10, 1e-5] (log axis) and beta in {1, 2, 5, 10}.

The paper does not say which run ``L`` comes from. By default we take one step of our Wasserstein
accountant on one synthetic batch of the Figure 2 setting, drawn with the table's seed (``--seeds S``, default
0): Weibull(0.5) gradients 50 x 1000, all 1225 pairs, q = 1e-3, mu = 16, noise std sigma C with sigma = 0.2,
the gradients expressed in units of ``C`` (the batch's median gradient norm), i.e. noise std 0.2; a scale's
``total_loss: L`` sets ``L`` directly.
``L`` only shifts every curve by the same amount; the shapes come from ``-log(delta)/beta``.

Writes ``outputs/tables/wdp_beta_delta.{csv,md}`` (columns ``panel,beta,delta,total_loss,epsilon``) and
``outputs/figures/wdp_fig3_beta_delta.png``.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from dpgen.privacy.wdp import WassersteinAccountant, pairwise_distances, wdp_epsilon

BETAS_A = tuple(range(1, 51))
DELTAS_A = (1e-10, 1e-8, 1e-5, 1e-3)
BETAS_B = (1, 2, 5, 10)
DELTAS_B = tuple(float(x) for x in np.logspace(-10, -5, 26))
#: the betas of panel (a) whose epsilons the notes list, per delta
SUMMARY_BETAS = (1, 2, 5, 10, 20, 50)


def compute(settings, run_root=None, data_root=None, seed=0, progress=True, dataset=None, select=None):
    """Both panels' rows; ``settings["total_loss"]``: ``L`` (None: :func:`default_total_loss` of ``seed``).
    No run, no data: ``run_root``, ``data_root``, ``progress``, ``dataset`` and ``select`` are unused. Pictures:
    none."""
    given = settings["total_loss"]
    return compute_rows(default_total_loss(seed) if given is None else float(given)), {}


def default_total_loss(seed: int = 0, order: float = 16.0, sample_rate: float = 1e-3, sigma: float = 0.2) -> float:
    """One Wasserstein-accountant step on a Figure-2 batch, gradients in units of the median norm."""
    rng = np.random.default_rng(seed)
    g = rng.weibull(0.5, size=(50, 1000))
    C = float(np.median(np.linalg.norm(g, axis=1)))
    acc = WassersteinAccountant(order=order)
    acc.step(noise_std=sigma, sample_rate=sample_rate, distances=pairwise_distances(g / C))
    return acc.total_loss()


def compute_rows(total_loss: float) -> List[Dict]:
    rows = []
    for d in DELTAS_A:
        for b in BETAS_A:
            rows.append({"panel": "a", "beta": float(b), "delta": d, "total_loss": total_loss,
                         "epsilon": wdp_epsilon(total_loss, d, b)})
    for b in BETAS_B:
        for d in DELTAS_B:
            rows.append({"panel": "b", "beta": float(b), "delta": d, "total_loss": total_loss,
                         "epsilon": wdp_epsilon(total_loss, d, b)})
    return rows


def plot(rows: List[Dict], pictures=None, settings=None, dataset=None):
    """Figure 3: (a) epsilon vs beta per delta, (b) epsilon vs delta per beta."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpgen.utils.io import label_axes

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for d in DELTAS_A:
        pts = [(r["beta"], r["epsilon"]) for r in rows if r["panel"] == "a" and r["delta"] == d]
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], label=f"$\\delta$={d:g}")
    label_axes(ax1, "$\\beta$", "$\\epsilon$", "(a) $\\epsilon$ vs $\\beta$")
    for b in BETAS_B:
        pts = [(r["delta"], r["epsilon"]) for r in rows if r["panel"] == "b" and r["beta"] == b]
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=f"$\\beta$={b:g}")
    ax2.set_xscale("log")
    label_axes(ax2, "$\\delta$", "$\\epsilon$", "(b) $\\epsilon$ vs $\\delta$", grid="both")
    L = rows[0]["total_loss"]
    fig.suptitle(f"WDP Figure 3: $\\epsilon = L - \\log(\\delta)/\\beta$, L = {L:.4g}")
    fig.tight_layout()
    return fig


def notes_for(rows: List[Dict], settings, scale=None, dataset=None) -> List[str]:
    """The paper's setting, where ``L`` comes from, and panel (a)'s epsilon at a few betas per delta."""
    L = rows[0]["total_loss"]
    summary = [f"delta {d:g}: " + ", ".join(f"{r['epsilon']:.4g}" for r in rows if r["panel"] == "a"
                                            and r["delta"] == d and int(r["beta"]) in SUMMARY_BETAS)
               for d in DELTAS_A]
    return [
        "Paper (Figure 3) settings: (a) beta 1..50, delta in 1e-10 1e-8 1e-5 1e-3; (b) delta 1e-10..1e-5 "
        "(log axis), beta in 1 2 5 10. The paper plots curves only; it reports eps falling fast for "
        "beta < 10 and slowly beyond, and falling uniformly in log(delta).",
        f"eps = L - log(delta)/beta (Corollary 1) with L = {L:.6g}"
        + (" (the scale's total_loss)." if settings["total_loss"] is not None else
           ": one Wasserstein-accountant step on a Figure-2 batch (Weibull(0.5), 50 x 1000, 1225 pairs, "
           "q = 1e-3, mu = 16) in units of the median gradient norm C, noise std 0.2 (= sigma C / C)."),
        "L only shifts all curves; the paper does not say which run its L comes from.",
        "Panel (b) uses 26 log-spaced deltas; the table holds every point of both panels.",
        f"Panel (a), epsilon at beta = {', '.join(map(str, SUMMARY_BETAS))}: " + "; ".join(summary) + ".",
    ]
