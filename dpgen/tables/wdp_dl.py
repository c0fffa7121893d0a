"""WDP Table 2's extraction and figure; the table itself is ``conf/table/wdp_table2.yaml`` (``make table-wdp-dl``,
``dpgen table wdp_table2 --scale smoke|cpu|paper``): per dataset a non-private and a private DP-SGD run whose one
training is accounted by the moments (DP), Bayesian (BDP) and Wasserstein (WDP) accountants.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from dpgen.privacy.report import PrivacyReport

#: the run's accountant -> the table's column suffix
ACC_KEY = {"moments": "DP", "bdp": "BDP", "wdp": "WDP"}


def wdp_row(res, cell: Dict[str, Any]) -> Dict[str, Any]:
    """A cell's columns: the non-private run's accuracy, or the private run's accuracy, epsilons, attack
    probabilities, noise multiplier (the paper's sigma) and noise std (sigma C), steps and per-step timings."""
    m = res.last
    if m is None:
        return {}
    if cell.get("role") == "nonprivate":
        return {"nonprivate_acc": round(m["test_acc"], 2)}
    p, tm = m["privacy"], m["timing_ms_per_step"]
    rep = PrivacyReport.of(p, m.get("method"))
    ov = tm.get("overhead_vs_dpsgd_percent", {})
    row = {"private_acc": round(m["test_acc"], 2), "noise_multiplier": rep.cells()["noise_multiplier"],
           "noise_std": rep.cells()["noise_std"], "steps": m["steps"],
           "epochs": m["epochs"], "ms_per_step_dpsgd": tm.get("sgd"), "overhead_bdp_pct": ov.get("bdp"),
           "overhead_wdp_pct": ov.get("wdp")}
    for a, k in ACC_KEY.items():
        r = p["accountants"].get(a)
        if r:
            row[f"eps_{k}"], row[f"attack_{k}"] = round(r["epsilon"], 4), round(r["attack_probability"], 4)
    return row


def epsilon_figure(spec, rows, cells, results) -> None:
    """The three epsilons against the epoch of the first finished private run (its metrics.jsonl)."""
    done = [(c, cell) for (c, cell), res in zip(cells, results) if c.get("role") == "private" and res.status == "ok"]
    if not done:
        return
    (c, cell) = done[0]
    run_dir = cell.run_dir(cell.seeds[0] if cell.seeds else 0)
    import matplotlib.pyplot as plt

    from dpgen.utils.io import save_figure

    recs = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    recs = [r for r in recs if "eps_moments" in r]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for a, label, style in (("moments", "DP (moments, $\\delta$=1e-5)", "-o"),
                            ("bdp", "BDP (Bayesian, $\\delta$=1e-10)", "-s"),
                            ("wdp", "WDP (Wasserstein, $\\delta$=1e-10)", "-^")):
        pts = [(r["epoch"], r[f"eps_{a}"]) for r in recs if f"eps_{a}" in r]
        if pts:
            ax.plot(*zip(*pts), style, ms=3, label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("$\\varepsilon$ spent")
    ax.set_yscale("log")
    ax.set_title(f"DP-SGD on {c['dataset']}: three accountants, one training (SCALE={spec['scale']})", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, "wdp_table2_epsilons")
