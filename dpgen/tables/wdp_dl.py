"""``make table-wdp-dl``: WDP Table 2 (DP-SGD image classification under DP, BDP and WDP) + a figure.

For each dataset: a non-private run (plain SGD, the accuracy column) and a private DP-SGD run of the
preset ``conf/experiment/wdp_dl_<dataset>.yaml`` (the Triastcyn & Faltings CNN; sigma calibrated so that
the moments accountant reaches the row's DP epsilon at delta 1e-5), whose same training is accounted by
the moments (DP, 1e-5), Bayesian (BDP, 1e-10) and Wasserstein (WDP, 1e-10) accountants. Each epsilon is
also given as the attack-success probability ``1/(1+exp(-eps))``. The paper's row is printed beside ours
(mnist10k and usps compare with the MNIST row). A dataset whose files are absent is listed as skipped.

    python -m dpgen.tables.wdp_dl --scale smoke|cpu|paper [--datasets mnist10k,usps] [--data-root DIR]
        [--reuse false] [--collect-only]

Writes outputs/tables/wdp_table2.csv (+ .md) and outputs/figures/wdp_table2_epsilons.png (the three
epsilons against the epoch for the first dataset); runs under outputs/runs/wdp_dl/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List

from dpgen.config import table_scales
from dpgen.tables import table_notes
from dpgen.tables.grid import Cell, add_grid_arguments, run_cells
from dpgen.utils.io import write_table
from dpgen.utils.paper import VERDICT_NOTE, read_paper_table, verdict

COLUMNS = ["dataset", "nonprivate_acc", "nonprivate_acc_paper", "nonprivate_acc_verdict", "private_acc",
           "private_acc_paper", "private_acc_verdict",
           "eps_DP", "eps_DP_paper", "attack_DP", "attack_DP_paper",
           "eps_BDP", "eps_BDP_paper", "attack_BDP", "attack_BDP_paper",
           "eps_WDP", "eps_WDP_paper", "attack_WDP", "attack_WDP_paper",
           "sigma", "steps", "epochs", "ms_per_step_dpsgd", "overhead_bdp_pct", "overhead_wdp_pct",
           "wall_s", "status"]
PRESET = {"mnist": "mnist", "fashion_mnist": "fmnist", "cifar10": "cifar10", "svhn": "svhn",
          "mnist10k": "mnist10k", "usps": "usps"}
PAPER_ROW = {"mnist": "MNIST", "fashion_mnist": "F-MNIST", "cifar10": "CIFAR-10", "svhn": "SVHN",
             "mnist10k": "MNIST", "usps": "MNIST"}
ACC_KEY = {"moments": "DP", "bdp": "BDP", "wdp": "WDP"}

SCALES = table_scales("wdp_dl")  # conf/scale/{smoke,cpu,paper}.yaml


def _paper(ds: str) -> Dict[str, str]:
    rows = {r["dataset"]: r for r in read_paper_table("wdp_table2_deep_learning")}
    return rows.get(PAPER_ROW[ds], {})


def _f(v, nd=4):
    try:
        return round(float(v), nd)
    except (TypeError, ValueError):
        return None


def run_table(scale: str, datasets: List[str], data_root: str = None, seed: int = 0, reuse: bool = True,
              collect_only: bool = False) -> List[Dict]:
    """Per dataset two cells of the grid runner (non-private and private, one run each); a finished run is
    read (``reuse``) and an interrupted one resumes from its checkpoint, ledger included."""
    spec = SCALES[scale]
    rows = []
    for ds in datasets:
        paper = _paper(ds)
        row: Dict = {"dataset": ds,
                     "nonprivate_acc_paper": _f(paper.get("nonprivate_acc")),
                     "private_acc_paper": _f(paper.get("private_acc"))}
        for k in ("DP", "BDP", "WDP"):
            row[f"eps_{k}_paper"] = _f(paper.get(f"eps_{k}"))
            row[f"attack_{k}_paper"] = _f(paper.get(f"attack_{k}"))
        folder = f"wdp_dl/{scale}/{ds}" + (f"/seed{seed}" if seed else "")  # seed 0: the folders of earlier tables
        cells = [Cell(f"{ds} non-private", f"wdp_dl_{PRESET[ds]}", f"{folder}/nonprivate", ["method.private=false"],
                      [seed], seed_folders=False),
                 Cell(f"{ds} private", f"wdp_dl_{PRESET[ds]}", f"{folder}/private", [], [seed], seed_folders=False)]
        nonpriv, priv = run_cells(cells, common=spec["overrides"], data_root=data_root, reuse=reuse,
                                  collect_only=collect_only)
        if nonpriv.last:
            row["nonprivate_acc"] = round(nonpriv.last["test_acc"], 2)
        if priv.last:
            m = priv.last
            row["private_acc"] = round(m["test_acc"], 2)
            p = m["privacy"]
            for a, k in ACC_KEY.items():
                r = p["accountants"].get(a)
                if r:
                    row[f"eps_{k}"] = round(r["epsilon"], 4)
                    row[f"attack_{k}"] = round(r["attack_probability"], 4)
            tm = m["timing_ms_per_step"]
            ov = tm.get("overhead_vs_dpsgd_percent", {})
            row.update(sigma=round(p["noise_multiplier"], 4), steps=m["steps"], epochs=m["epochs"],
                       ms_per_step_dpsgd=tm.get("sgd"), overhead_bdp_pct=ov.get("bdp"),
                       overhead_wdp_pct=ov.get("wdp"))
            row["_run"] = str(priv.cell.run_dir(seed))
        for k in ("nonprivate_acc", "private_acc"):
            row[f"{k}_verdict"] = verdict(row.get(k), row[f"{k}_paper"], runs=1,
                                          shortened="" if scale == "paper" else f"SCALE={scale}")
        row["status"] = priv.status if nonpriv.status == "ok" else nonpriv.status
        row["wall_s"] = round(nonpriv.wall_s + priv.wall_s, 1)  # both runs (also when reused)
        rows.append(row)
        print(f"[dpgen] {ds}: {row['status'][:80]}  acc non-private {row.get('nonprivate_acc')} "
              f"(paper {row['nonprivate_acc_paper']}), private {row.get('private_acc')} "
              f"(paper {row['private_acc_paper']}); eps DP {row.get('eps_DP')} (paper {row['eps_DP_paper']}), "
              f"BDP {row.get('eps_BDP')} (paper {row['eps_BDP_paper']}), WDP {row.get('eps_WDP')} "
              f"(paper {row['eps_WDP_paper']})", flush=True)
    return rows


def epsilon_figure(run_dir: Path, dataset: str, scale: str):
    """The three epsilons against the epoch, from a private run's metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpgen.utils.io import save_figure

    recs = [json.loads(l) for l in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if l.strip()]
    recs = [r for r in recs if "eps_moments" in r]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for a, k, style in (("moments", "DP (moments, $\\delta$=1e-5)", "-o"),
                        ("bdp", "BDP (Bayesian, $\\delta$=1e-10)", "-s"),
                        ("wdp", "WDP (Wasserstein, $\\delta$=1e-10)", "-^")):
        pts = [(r["epoch"], r[f"eps_{a}"]) for r in recs if f"eps_{a}" in r]
        if pts:
            ax.plot(*zip(*pts), style, ms=3, label=k)
    ax.set_xlabel("epoch")
    ax.set_ylabel("$\\varepsilon$ spent")
    ax.set_yscale("log")
    ax.set_title(f"DP-SGD on {dataset}: three accountants, one training (SCALE={scale})", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, "wdp_table2_epsilons")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=list(SCALES), default="smoke")
    ap.add_argument("--datasets", default=None, help="comma-separated (default: the scale's)")
    ap.add_argument("--seed", type=int, default=0)
    add_grid_arguments(ap, runs=False)
    ap.add_argument("--reuse-runs", action="store_true", help="the default now (kept for old commands)")
    args = ap.parse_args(argv)
    datasets = [d.strip() for d in (args.datasets or SCALES[args.scale]["datasets"]).split(",") if d.strip()]
    for d in datasets:
        if d not in PRESET:
            ap.error(f"--datasets: {d!r} is not one of {', '.join(PRESET)}")
    rows = run_table(args.scale, datasets, args.data_root, args.seed, args.reuse, args.collect_only)
    ok = [r for r in rows if r.get("status") == "ok"]
    if ok:
        epsilon_figure(Path(ok[0]["_run"]), ok[0]["dataset"], args.scale)
    notes = [
        f"SCALE={args.scale}: {SCALES[args.scale]['overrides']} on top of conf/experiment/wdp_dl_<dataset>.yaml "
        "(Triastcyn & Faltings CNN with GroupNorm, Adam 1e-3, C = 1, Poisson batches, sigma calibrated so the "
        "moments accountant reaches the row's DP epsilon at delta 1e-5).",
        *table_notes("wdp_dl"),
        VERDICT_NOTE,
    ]
    for r in rows:
        r.pop("_run", None)
    write_table("wdp_table2", rows, COLUMNS,
                title=f"WDP Table 2: DP-SGD classification, epsilon under DP / BDP / WDP, SCALE={args.scale}",
                notes=notes)
    return rows


if __name__ == "__main__":
    main()
