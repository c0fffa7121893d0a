"""WDP paper, Table 1 evaluated on Figure 1's grid, and Figure 1 (privacy budget vs order): a computed table,
``conf/table/wdp_mechanisms.yaml`` (its grid per scale), run by ``dpgen table wdp_mechanisms --scale paper``
(``make table-wdp-mechanisms``, ``make fig-wdp-orders``: one run writes both).

Laplace (scale ``b`` = the paper's lambda) and Gaussian (std ``sigma``) mechanisms with sensitivity 1,
scales 1, 2, 3, 5, orders 1..10 (the paper's grid), under RDP (order alpha) and WDP (order mu).

Writes ``outputs/tables/wdp_mechanisms.{csv,md}`` (columns ``mechanism,framework,scale,order,epsilon``)
and ``outputs/figures/wdp_fig1_orders.png``.

RDP at order 1 is the KL-divergence limit (Table 1's ``alpha = 1`` row for Laplace, ``1/(2 sigma^2)``
for Gaussian): the Renyi divergence is continuous in alpha at 1, so the curves start there.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from dpgen.privacy.wdp import gaussian_epsilon, laplace_epsilon

FRAMEWORKS = ("RDP", "WDP")
MECHANISMS = ("laplace", "gaussian")


def compute(settings, run_root=None, data_root=None, seed=0, progress=True, dataset=None, select=None):
    """The table's rows on the scale's grid (``settings``: ``noise_scales``, ``orders``); closed forms only, so
    ``run_root``, ``data_root``, ``seed``, ``progress``, ``dataset`` and ``select`` are unused. Pictures: none."""
    return compute_rows(settings["noise_scales"], settings["orders"]), {}


def compute_rows(scales: Sequence[float], orders: Sequence[int]) -> List[Dict]:
    rows = []
    for mech in MECHANISMS:
        fn = laplace_epsilon if mech == "laplace" else gaussian_epsilon
        for fw in FRAMEWORKS:
            for s in scales:
                for o in orders:
                    eps = fn(s, order=o, framework=fw.lower(), sensitivity=1.0)
                    rows.append(
                        {"mechanism": mech, "framework": fw, "scale": float(s), "order": int(o), "epsilon": eps}
                    )
    return rows


def _paper_settings() -> Optional[str]:
    try:
        from dpgen.utils.paper import read_paper_table

        for r in read_paper_table("wdp_figures_settings"):
            if r.get("figure") == "1":
                return f"{r['what']}: {r['settings']}"
    except (FileNotFoundError, KeyError):
        return None
    return None


def notes_for(rows, settings=None, scale=None, dataset=None) -> List[str]:
    """The table's notes: the paper's setting, the formulas, what the paper expects."""
    notes = [
        "Sensitivity 1. Laplace scale = the paper's lambda; Gaussian scale = sigma.",
        "RDP: Mironov (2017) Table 2 (= WDP Table 1); at order 1 the KL-divergence limit "
        "(Laplace 1/b + exp(-1/b) - 1, Gaussian 1/(2 sigma^2)).",
        "WDP: Propositions 7-8 as printed: Laplace 1/2 (sqrt(2 [1/b + exp(-1/b) - 1]))^(1/mu), "
        "Gaussian 1/2 (1/sigma)^(1/mu). These equal Proposition 10 applied to the KL value; the actual "
        "mu-Wasserstein distance between the two shifted output distributions is 1 (= Delta) at every mu.",
        "The paper gives Figure 1 as curves only (no numbers); expected qualitative behaviour: WDP rises "
        "slowly with mu (Proposition 4), RDP of the Gaussian mechanism with sigma = 1 rises steeply.",
        "Gaussian sigma = 1: the WDP closed form is 1/2 at every order (base 1/sigma = 1); for sigma < 1 "
        "it would decrease with mu, contrary to Proposition 4.",
    ]
    paper = _paper_settings()
    if paper:
        notes.insert(0, f"Paper (Figure 1) settings: {paper}.")
    return notes


def plot(rows: List[Dict], pictures=None, settings=None, dataset=None):
    """Figure 1: epsilon vs order, one panel per (mechanism, framework), one curve per scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpgen.utils.io import label_axes

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    panels = [("laplace", "RDP"), ("laplace", "WDP"), ("gaussian", "RDP"), ("gaussian", "WDP")]
    sym = {"laplace": "\\lambda", "gaussian": "\\sigma"}
    for ax, (mech, fw) in zip(axes, panels):
        for s in sorted({r["scale"] for r in rows}):
            pts = sorted(
                (r["order"], r["epsilon"])
                for r in rows
                if r["mechanism"] == mech and r["framework"] == fw and r["scale"] == s
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"${sym[mech]}$={s:g}")
        label_axes(ax, "order " + ("$\\alpha$" if fw == "RDP" else "$\\mu$"), "$\\epsilon$",
                   f"{'LM' if mech == 'laplace' else 'GM'} under {fw}")
    fig.suptitle("WDP Figure 1: privacy budget vs order (sensitivity 1)")
    fig.tight_layout()
    return fig
