"""DP-SWD Table 4: the noise std sigma reaching epsilon = 10, ours beside the paper's.

A computed table (``conf/table/dpswd_table4_noise.yaml``): ``dpgen table dpswd_table4_noise --scale paper``
(``make table-dpswd-noise``) writes ``outputs/tables/dpswd_table4_noise.{csv,md}``; ``--scale alternatives``
also solves the accountant for the notes' readings with the RDP conversion at delta/2.

Columns: ``sigma_paper`` (published), ``sigma_ours`` (Eq. 6 and Proposition 2 as written:
Bernstein/CLT bound at delta/2, RDP -> DP conversion at delta/2, ceil(N/B) steps per epoch) and
``sigma_paper_convention`` (the authors' conventions, which reproduce the published numbers:
k counted twice in the Bernstein square root, bound at delta/2 but RDP conversion at delta,
N//B + 1 steps per epoch, VisDA at delta = 1e-6; see :mod:`dpgen.privacy.projection`).

The 12 accountant calibrations (14 with the scale's ``alternatives: true``) run on up to two worker processes
(the scale's ``workers:``, default min(2, cpus)).
"""

from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional

from dpgen.privacy.calibration import calibrate_noise_multiplier
from dpgen.privacy.projection import (
    authors_steps,
    calibrate_dpswd_sigma,
    sensitivity_bound,
)
from dpgen.utils.paper import read_paper_table

TABLE = "dpswd_table4_noise"
EPSILON = 10.0
COLUMNS = [
    "data", "delta", "d", "k", "N", "epochs", "batch_size", "bound",
    "sigma_paper", "sigma_ours", "sigma_paper_convention",
]
#: the authors' script ran VisDA at delta = 1e-6 (Table 1's caption) though Table 4 prints 1e-5
PAPER_DELTA_OVERRIDES = {"VisDA": 1e-6}
#: the published sigmas must be reproduced to this relative precision
TOLERANCE = 0.02


def parse_paper_row(row: Dict[str, str]) -> Dict:
    n = row["N"].strip()
    n = int(float(n[:-1]) * 1000) if n.upper().endswith("K") else int(float(n))
    return {
        "data": row["data"], "delta": float(row["delta"]), "d": int(row["d"]), "k": int(row["k"]),
        "N": n, "epochs": int(row["epochs"]), "batch_size": int(row["batch_size"]),
        "bound": {"b": "bernstein", "c": "clt"}.get(row["bound"].strip()[:1].lower(), row["bound"]),
        "sigma_paper": float(row["sigma"]),
    }


def _group_key(r: Dict) -> tuple:
    return (r["N"], r["batch_size"], r["epochs"], r["delta"])


def _solve_group(rows: List[Dict], alternatives: bool = False) -> List[Dict]:
    """All rows sharing (N, B, epochs, delta): the noise multipliers are computed once each."""
    out = []
    for r in rows:
        common = dict(epsilon=EPSILON, k=r["k"], d=r["d"], n=r["N"], batch_size=r["batch_size"],
                      epochs=r["epochs"], bound=r["bound"])
        ours = calibrate_dpswd_sigma(delta=r["delta"], convention="paper_text", **common)
        delta_a = PAPER_DELTA_OVERRIDES.get(r["data"], r["delta"])
        conv = calibrate_dpswd_sigma(delta=delta_a, convention="authors_code", **common)
        # the authors' accountant at delta/2 (for the alternative readings in the notes)
        steps_a = authors_steps(r["N"], r["batch_size"], r["epochs"])
        if steps_a == ours["steps"] and delta_a == r["delta"]:
            z_half = ours["noise_multiplier"]
        elif not alternatives:
            z_half = None
        else:
            z_half = calibrate_noise_multiplier(EPSILON, delta_a / 2, r["batch_size"] / r["N"], steps_a)
        out.append({**r, "ours": ours, "conv": conv, "delta_a": delta_a, "z_half": z_half})
    return out


def compute_rows(workers: Optional[int] = None, alternatives: bool = False) -> List[Dict]:
    """Table 4 rows with both calibrations; ``alternatives`` also solves the authors' accountant at
    delta/2 where it differs from ours (MNIST, VisDA) for the notes' alternative readings."""
    rows = [parse_paper_row(r) for r in read_paper_table(TABLE)]
    groups: Dict[tuple, List[Dict]] = {}
    for r in rows:
        groups.setdefault(_group_key(r), []).append(r)
    group_list = list(groups.values())
    workers = workers if workers is not None else min(2, os.cpu_count() or 1)
    if workers > 1:
        import multiprocessing as mp

        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        # the longest groups first, so the two workers finish together
        order = sorted(range(len(group_list)), key=lambda i: -len(group_list[i]))
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
            solved = dict(zip(order, ex.map(_solve_group, [group_list[i] for i in order],
                                            [alternatives] * len(order))))
        results = [solved[i] for i in range(len(group_list))]
    else:
        results = [_solve_group(g, alternatives) for g in group_list]
    by_name = {r["data"]: r for g in results for r in g}
    return [by_name[r["data"]] for r in rows]


def finish_row(r: Dict) -> Dict:
    """Table fields plus the factor decomposition sigma_conv / sigma_ours."""
    ours, conv = r["ours"], r["conv"]
    k, d, delta, delta_a, bound = r["k"], r["d"], r["delta"], r["delta_a"], r["bound"]
    w_text = sensitivity_bound(k, d, delta / 2, bound)
    w_text_a = sensitivity_bound(k, d, delta_a / 2, bound)
    w_conv = sensitivity_bound(k, d, delta_a / 2, bound, convention="authors_code")
    out = {c: r[c] for c in COLUMNS if c in r}
    out.update({
        "sigma_ours": round(ours["sigma"], 4),
        "sigma_paper_convention": round(conv["sigma"], 4),
        "conv_vs_paper_%": round(100 * (conv["sigma"] / r["sigma_paper"] - 1), 2),
        "paper/ours": round(r["sigma_paper"] / ours["sigma"], 3),
        "k_twice": round(math.sqrt(w_conv / w_text_a), 4),
        "delta_fix": round(math.sqrt(w_text_a / w_text), 4),
        "accountant": round(conv["noise_multiplier"] / ours["noise_multiplier"], 4),
        # for the notes' alternative readings (not columns): the authors' noise multiplier at delta and at delta/2
        "delta_a": delta_a, "z": conv["noise_multiplier"], "z_half": r["z_half"],
    })
    return out


def _alternatives(rows: List[Dict]) -> List[str]:
    """Max |gap| to the published sigmas under other readings of the authors' conventions."""
    readings = [
        ("bound at delta, RDP at delta", 1.0, "z"),
        ("bound at delta/2, RDP at delta (adopted)", 0.5, "z"),
        ("bound at delta, RDP at delta/2", 1.0, "z_half"),
        ("bound at delta/2, RDP at delta/2 (their later corrected script)", 0.5, "z_half"),
    ]
    notes = []
    for label, fb, which in readings:
        if which == "z_half" and any(r["z_half"] is None for r in rows):
            notes.append(f"Reading '{label}': run with --scale alternatives to evaluate it.")
            continue
        gaps = []
        for r in rows:
            z = r[which]
            w = sensitivity_bound(r["k"], r["d"], r["delta_a"] * fb, r["bound"], convention="authors_code")
            gaps.append((100 * (z * math.sqrt(w) / r["sigma_paper"] - 1), r["data"]))
        worst = max(gaps, key=lambda g: abs(g[0]))
        notes.append(
            f"Reading '{label}' (k twice, N//B+1 steps/epoch, VisDA at 1e-6): gaps "
            + ", ".join(f"{n} {g:+.1f}%" for g, n in gaps)
            + f"; worst {worst[1]} {worst[0]:+.1f}%."
        )
    return notes


def notes_for(table: List[Dict], settings=None, scale=None, dataset=None) -> List[str]:
    """The table's notes: the two calibrations, each row's factors, the alternative readings (``table``: the rows
    of :func:`compute`)."""
    notes = [
        f"epsilon = {EPSILON:g}. sigma = noise_multiplier * sqrt(w): w bounds the squared L2 "
        "sensitivity ||z^T U||^2 (Lemma 2 Bernstein or the section 3.1 CLT approximation); the noise "
        "multiplier comes from autodp's RDP accountant for the Gaussian mechanism subsampled without "
        "replacement (anaRDPacct.compose_subsampled_mechanism, get_eps), q = batch_size / N.",
        "sigma_ours: Eq. 6 and Proposition 2 as written -- Bernstein term sqrt(2 k v_d ln(1/delta)), "
        "v_d = 2(d-1)/(d^2(d+2)); bound at delta/2 and RDP->DP conversion at delta/2 (total delta); "
        "ceil(N/B) steps per epoch; Table 4's delta for every row.",
        "sigma_paper_convention: the authors' script (github.com/arakotom/dp_swd, da_dp_analysis.py) -- "
        "variance term v_est = k v_d under sqrt(2 k v_est ln(1/delta)), i.e. k counted twice; bound "
        "at delta/2 but get_eps(delta) (the 'used delta instead of delta2' bug their later commit "
        "fixes: the published sigmas give (10, 1.5 delta)-DP, not (10, delta)); N//B + 1 steps per "
        "epoch; VisDA at delta = 1e-6 although Table 4 prints 1e-5. CLT rows use the CLT formula as "
        "written (k once), also at delta/2.",
        f"Every sigma_paper_convention is within {100 * TOLERANCE:g}% of the published value: "
        + ", ".join(f"{t['data']} {t['conv_vs_paper_%']:+.2f}%" for t in table) + ".",
        "Factor columns (their product is sigma_paper_convention / sigma_ours): k_twice = "
        "sqrt(w_authors / w_Eq6) at the same delta; delta_fix = sqrt(w at VisDA's 1e-6 / w at 1e-5) "
        "(1 elsewhere); accountant = ratio of noise multipliers (RDP at delta vs delta/2, N//B+1 vs "
        "ceil(N/B) steps, VisDA's delta). paper/ours > 1: the published sigma adds that much more "
        "noise than Eq. 6 + Prop. 2 need (over-protects); < 1 would under-protect.",
    ]
    for t in table:
        if t["bound"] == "bernstein":
            why = (f"the k-twice Bernstein term inflates sigma by x{t['k_twice']:.3f}"
                   + (f", VisDA's delta 1e-6 by x{t['delta_fix']:.3f}" if t["delta_fix"] != 1 else "")
                   + f", the RDP conversion at delta instead of delta/2 (and their step count) "
                   f"lowers it by x{t['accountant']:.3f}")
        else:
            why = (f"the CLT formula is the same as ours; only the accountant differs "
                   f"(x{t['accountant']:.3f}: RDP at delta instead of delta/2, N//B+1 steps)")
        notes.append(
            f"{t['data']}: published {t['sigma_paper']:g} vs ours {t['sigma_ours']:.3f} "
            f"(published = {t['paper/ours']:.3f} x ours, i.e. "
            f"{'over' if t['paper/ours'] > 1 else 'under'}states the noise needed by "
            f"{abs(100 * (t['paper/ours'] - 1)):.1f}%): {why}; the remaining "
            f"{t['conv_vs_paper_%']:+.2f}% is the authors' hand tuning of sigma to epsilon ~ 10 "
            "and rounding."
        )
    notes.append(
        "M-U: the authors' script uses N = 7468 for MNIST->USPS where Table 4 and section 8.5.1 say "
        "7438; we keep 7438 (the gap moves by about 0.5%). Office's published 8.05 reaches "
        "epsilon ~ 10.2 under the adopted reading (hand tuning)."
    )
    notes.extend(_alternatives(table))
    notes.append(
        "Caveat shared by both conventions: a fresh U is drawn each step and the (1 - delta/2) "
        "sensitivity bound is not union-bounded over the T steps."
    )
    return notes


def compute(settings, run_root=None, data_root=None, seed=0, progress=True, dataset=None, select=None):
    """The table's rows (:func:`finish_row` of each Table 4 row); ``settings``: the scale's ``alternatives`` and
    optional ``workers``. Nothing is random, trained or read from data (``seed``, ``run_root``... unused)."""
    rows = compute_rows(workers=settings.get("workers"), alternatives=bool(settings.get("alternatives")))
    table = [finish_row(r) for r in rows]
    bad = [t for t in table if abs(t["conv_vs_paper_%"]) > 100 * TOLERANCE]
    if bad:
        print(f"[dpgen] WARNING: paper-convention sigma off by more than {100 * TOLERANCE:g}% for "
              + ", ".join(t["data"] for t in bad), file=sys.stderr)
    return table, {}
