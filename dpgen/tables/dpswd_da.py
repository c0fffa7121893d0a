"""DP-SWD Table 1 and Figure 3 (domain adaptation): their extraction and figure. The tables themselves are
``conf/table/dpswd_table1_domain_adaptation.yaml`` (``make table-dpswd-da``) and
``conf/table/dpswd_fig3_da_epsilon[_dpswd_frame].yaml`` (``make fig-dpswd-eps``), run by ``dpgen table``.
"""

from __future__ import annotations

from typing import Any, Dict

from dpgen.privacy.report import PrivacyReport
from dpgen.tables.grid import mean_std


def da_row(res, cell: Dict[str, Any]) -> Dict[str, Any]:
    """A cell's target accuracy (mean / std over its runs), its runs' mean wall time and the last run's privacy
    (epsilon spent, delta, noise multiplier and noise std, bound, how target rows were bounded) and speed."""
    row: Dict[str, Any] = {"runs": len(res.runs)}
    if not res.runs:
        return row
    row["acc"], row["acc_std"] = mean_std(res.values(lambda r: r["target_acc"]))
    row["wall_s_per_run"] = round(res.wall_s / len(res.runs), 1)
    m = res.last
    p = m["privacy"]
    rep = PrivacyReport.of(p, m.get("method"))  # no sigma: it meant the std here and the multiplier elsewhere
    row.update(steps=m["steps"], epochs=m.get("epochs"), steps_per_s=m.get("steps_per_second"))
    if rep.private:
        row.update(**rep.cells(), delta=rep.delta, bound=p["bound"], row_bound=p["row_bound"].split(":")[0])
    return row


def epsilon_figure(spec, rows, cells, results) -> None:
    """Figure 3: target accuracy against epsilon, one line per problem (mean and std over the runs)."""
    import matplotlib.pyplot as plt

    from dpgen.utils.io import save_figure

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for problem in dict.fromkeys(r["problem"] for r in rows):
        pts = sorted((float(r["epsilon"]), r["acc"], r["acc_std"]) for r in rows
                     if r["problem"] == problem and r.get("status") == "ok")
        if pts:
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3,
                        label=problem)
    ax.set_xlabel("epsilon")
    ax.set_ylabel("target accuracy (%)")
    ax.set_title(f"{spec['title'].format(scale=spec['scale'])}", fontsize=8)
    ax.legend()
    save_figure(fig, spec["table"])
