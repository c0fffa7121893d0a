"""DP-SWD Figure 2 (section 6.1), SWD vs DP-SWD between two Gaussians: a computed table
(``conf/table/dpswd_toy.yaml``, its sizes per scale), ``dpgen table dpswd_toy --scale smoke|paper``
(``make fig-dpswd-toy``).

Source N(0, I_d), target N(c 1_d, I_d) in d = 5, c in [0, 1]; n samples on each side; k random
directions; the empirical SWD_2^2 (Eq. 4) and the DP_sigma SWD_2^2 of Algorithm 1 (N(0, sigma^2)
noise on every projected sample of both sides) for sigma in {1, 3}; mean and std over the scale's
``draws`` (5) draws of the samples, directions and noise (one draw gives both distances: same samples,
same U); ``p``: the order of the SWD (2; 1 also works).

The paper (section 6.1) states neither n, k, nor the grid of c; the ``paper`` scale uses c in
{0, 0.05, ..., 1}, n in {500, 1000, 5000} and k = 1000 (the authors' default number of
projections); ``smoke`` (a few seconds) c in {0, 0.2, ..., 1}, n in {250, 1000}, k = 100.

Population values, for reference: a mean shift leaves the two projected (and noised) laws
translates of one another, W_2^2(N(a, s^2), N(b, s^2)) = (a - b)^2, so
SWD_2^2 = DP_sigma SWD_2^2 = c^2 E[(u . 1_d)^2] = c^2 for every sigma: in this experiment any gap
between DP-SWD and SWD is a finite-sample effect of the noise (the sampling error of W_2^2
grows with the projected variance 1 + sigma^2).

Writes outputs/figures/dpswd_fig2_toy.png and outputs/tables/dpswd_toy.csv (+ .md).
"""

from __future__ import annotations

import math

import torch

from dpgen.losses.sliced import random_projections, sliced_wasserstein

D = 5
SIGMAS = (1.0, 3.0)


def population(c: float, p: int, d: int = D) -> float:
    """SWD_p^p between N(0, I_d) and N(c 1_d, I_d) (= DP_sigma SWD_p^p for every sigma)."""
    if p == 2:
        return c * c  # E[(u . 1)^2] = ||1||^2 / d = 1
    # p = 1: c E|u . 1| = c sqrt(d) E|u_1|, E|u_1| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))
    return c * math.sqrt(d) * math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def compute(settings, run_root=None, data_root=None, seed=0, progress=True, dataset=None, select=None):
    """One row per (n, c, sigma); ``settings``: the scale's grid ``c``, sizes ``n``, directions ``k``, order ``p``
    and ``draws``. Pictures: none (the figure is drawn from the rows)."""
    with torch.no_grad():
        return _rows(settings, seed), {}


def _rows(s, seed: int):
    p = s["p"]
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n in s["n"]:
        for c in map(float, s["c"]):  # a YAML 0 or 1 reads as an int; the CSV writes c as a float
            swd, dp = [], {sig: [] for sig in SIGMAS}
            for _ in range(s["draws"]):
                x = torch.randn(n, D, generator=g)
                y = torch.randn(n, D, generator=g) + c
                u = random_projections(D, s["k"], g)
                swd.append(float(sliced_wasserstein(x, y, projections=u, p=p)))
                for sig in SIGMAS:
                    dp[sig].append(float(sliced_wasserstein(x, y, projections=u, p=p, sigma=sig, generator=g)))
            sw = torch.tensor(swd, dtype=torch.float64)
            for sig in SIGMAS:
                v = torch.tensor(dp[sig], dtype=torch.float64)
                rows.append({
                    "sigma": sig,
                    "n": n,
                    "c": round(c, 4),
                    "population": population(c, p),
                    "swd_mean": sw.mean().item(),
                    "swd_std": sw.std().item(),
                    "dpswd_mean": v.mean().item(),
                    "dpswd_std": v.std().item(),
                    "offset": (v - sw).mean().item(),
                })
    return rows


def _curve(rows, sig, n, key):
    rr = sorted((r for r in rows if r["sigma"] == sig and r["n"] == n), key=lambda r: r["c"])
    return [r["c"] for r in rr], [r[f"{key}_mean"] for r in rr], [r[f"{key}_std"] for r in rr]


def _spearman(a, b):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den else float("nan")


def findings(rows, p: int = 2):
    """Per (sigma, n): monotonicity of the mean DP-SWD in c, resolution, and the noise offset."""
    out = []
    ns = sorted({r["n"] for r in rows})
    for sig in SIGMAS:
        for n in ns:
            c, m, sd = _curve(rows, sig, n, "dpswd")
            _, sm, ssd = _curve(rows, sig, n, "swd")
            rr = [r for r in rows if r["sigma"] == sig and r["n"] == n]
            steps = [m[i + 1] > m[i] for i in range(len(m) - 1)]
            # smallest c whose DP-SWD band lies above the c = 0 band (mean -/+ std)
            resolved = next((c[i] for i in range(1, len(c)) if m[i] - sd[i] > m[0] + sd[0]), None)
            swd_resolved = next((c[i] for i in range(1, len(c)) if sm[i] - ssd[i] > sm[0] + ssd[0]), None)
            out.append({
                "sigma": sig,
                "n": n,
                "monotone": all(steps),
                "increasing_steps": sum(steps),
                "steps": len(steps),
                "spearman": _spearman(c, m),
                "min_at_c0": min(range(len(m)), key=lambda i: m[i]) == 0,
                "resolved_c": resolved,
                "swd_resolved_c": swd_resolved,
                "offset_c0": m[0] - sm[0],
                "offset_mean": sum(r["offset"] for r in rr) / len(rr),
                "offset_min": min(r["offset"] for r in rr),
                "offset_max": max(r["offset"] for r in rr),
                "swd_c1": sm[-1],
                "dpswd_c1": m[-1],
                "population_c1": population(c[-1], p),
            })
    return out


def notes_for(rows, settings, scale=None, dataset=None):
    s = settings
    p, draws = s["p"], s["draws"]
    f = findings(rows, p)
    notes = [
        f"Setting: d = {D}, c in {{{', '.join(f'{c:g}' for c in s['c'])}}}, n in {s['n']} per side, "
        f"k = {s['k']} fresh directions per draw, p = {p} (SWD_{p}^{p} and DP_sigma SWD_{p}^{p}), {draws} draws "
        "(samples, directions and noise); SWD and DP-SWD of one draw share samples and directions. "
        "The paper does not state n, k or the c grid; these are our choices.",
        "population: SWD = DP-SWD between the two Gaussians (a mean shift only translates the projected, "
        "noised laws), i.e. c^2 for p = 2. offset: mean over draws of DP-SWD - SWD (paired).",
    ]
    mono = [r for r in f if r["monotone"]]
    notes.append(
        f"Monotone in c: the mean DP-SWD increases at every step of c in {len(mono)} of {len(f)} (sigma, n) "
        "curves; " + "; ".join(
            f"sigma {r['sigma']:g}, n {r['n']}: {r['increasing_steps']}/{r['steps']} steps up, Spearman "
            f"{r['spearman']:.3f}" for r in f if not r["monotone"]) + ("." if len(mono) < len(f) else "none fails.")
    )
    notes.append(
        "Distinguishes the distributions (smallest c whose mean - std band lies above the c = 0 mean + std "
        "band; SWD's in brackets): " + "; ".join(
            f"sigma {r['sigma']:g}, n {r['n']}: {r['resolved_c'] if r['resolved_c'] is not None else 'none'} "
            f"({r['swd_resolved_c'] if r['swd_resolved_c'] is not None else 'none'})" for r in f) + ". "
        f"The minimum of the mean DP-SWD is at c = 0 in {sum(r['min_at_c0'] for r in f)} of {len(f)} curves."
    )
    notes.append(
        "Noise offset DP-SWD - SWD (mean over c; range over c): " + "; ".join(
            f"sigma {r['sigma']:g}, n {r['n']}: {r['offset_mean']:+.4f} ({r['offset_min']:+.4f} .. "
            f"{r['offset_max']:+.4f})" for r in f) + ". It is positive, roughly constant in c, grows with "
        "sigma and shrinks as n grows: a finite-sample bias (the population offset is 0), not a change of "
        "the distance."
    )
    all_mono = len(mono) == len(f)
    big_n = max(s["n"])
    holds_big = all(r["monotone"] and r["min_at_c0"] for r in f if r["n"] == big_n)
    notes.append(
        "Verdict: the paper's claim (DP-SWD follows SWD's increasing trend in c, is smallest at c = 0 and so "
        "separates the distributions, the noise only adding an offset) "
        + ("holds on every curve." if all_mono and all(r["min_at_c0"] for r in f) else
           f"holds on average (every curve's Spearman correlation with c >= "
           f"{min(r['spearman'] for r in f):.2f}) and exactly at n = {big_n}"
           + ("" if holds_big else " except where listed above")
           + "; with few samples and sigma = 3 the draw-to-draw spread of DP-SWD swamps the small-c "
           f"differences, so neighbouring c values can swap order ({draws} draws).")
    )
    return notes


def plot(rows, pictures=None, settings=None, dataset=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = settings["p"] if settings else 2
    ns = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(1, len(SIGMAS), figsize=(5.2 * len(SIGMAS), 4.0), sharey=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, sig in zip(axes, SIGMAS):
        for i, n in enumerate(ns):
            col = colors[i % len(colors)]
            c, m, sd = _curve(rows, sig, n, "swd")
            ax.errorbar(c, m, yerr=sd, color=col, ls="--", marker=".", capsize=2, label=f"SWD n={n}")
            c, m, sd = _curve(rows, sig, n, "dpswd")
            ax.errorbar(c, m, yerr=sd, color=col, ls="-", marker="o", ms=3, capsize=2, label=f"DP-SWD n={n}")
        cs = sorted({r["c"] for r in rows})
        ax.plot(cs, [population(c, p) for c in cs], color="k", ls=":", label="population (both)")
        ax.set_title(f"sigma = {sig:g}")
        ax.set_xlabel("c (target mean c 1_d, d = 5)")
        ax.set_ylabel(f"distance (SWD_{p}^{p})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("DP-SWD Figure 2: SWD vs DP-SWD between N(0, I) and N(c 1, I) (mean +/- std over draws)")
    fig.tight_layout()
    return fig
