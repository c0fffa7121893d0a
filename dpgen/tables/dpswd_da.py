"""``make table-dpswd-da`` / ``make fig-dpswd-eps``: DP-SWD Table 1 and Figure 3 (domain adaptation).

Table 1: target accuracy (%) of DANN, SWD, DP-DANN and DP-SWD on the nine problems (M-U, U-M,
VisDA, the six Office-31 pairs), mean and std over runs, the paper's numbers beside ours. Every
run is the preset ``experiment=da_<problem> method=<m>`` through ``task=domain_adaptation``; a
problem whose files are absent is listed as skipped with the reason. Runs already finished under
``outputs/runs/dpswd_da/<scale>/...`` (their ``metrics.json``) are reused, so a table can be
assembled from runs made by several processes (``--reuse false`` runs everything again).

Figure 3: DP-SWD target accuracy vs epsilon in [3, 10] on three problems (U-M, M-U, D-W).

Methods: dann, swd, dpdann, dpswd (the paper's Bernstein bound, as Table 1 used), dpswd_frame (dpgen's
default mechanism: the frame bound), dpswd_paper (Algorithm 2 as published).

    python -m dpgen.tables.dpswd_da --scale smoke|cpu|paper [--problems um,mu] [--methods dpswd,swd]
    python -m dpgen.tables.dpswd_da --figure --scale smoke|cpu|paper [--figure-method dpswd_frame]

Writes outputs/tables/dpswd_table1_domain_adaptation.{csv,md} (and a copy ..._<scale>.{csv,md}) and
outputs/figures/dpswd_fig3_da_epsilon.png (+ outputs/tables/dpswd_fig3_da_epsilon.csv).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional

from dpgen.config import table_scales
from dpgen.tables import table_notes
from dpgen.tables.grid import Cell, add_grid_arguments, mean_std, run_cell
from dpgen.utils.io import write_table
from dpgen.utils.paper import VERDICT_NOTE, read_paper_table, verdict

TABLE = "dpswd_table1_domain_adaptation"
FIGURE = "dpswd_fig3_da_epsilon"
#: problem key -> (experiment preset, Table 1 row)
PROBLEMS = {
    "mu": ("da_mu", "M-U"), "um": ("da_um", "U-M"), "visda": ("da_visda", "VisDA"),
    "dw": ("da_office31_dw", "D-W"), "da": ("da_office31_da", "D-A"), "aw": ("da_office31_aw", "A-W"),
    "ad": ("da_office31_ad", "A-D"), "wa": ("da_office31_wa", "W-A"), "wd": ("da_office31_wd", "W-D"),
}
METHODS = {"dann": "DANN", "swd": "SWD", "dpdann": "DP-DANN", "dpswd": "DP-SWD",
           "dpswd_frame": "DP-SWD (dpgen default: frame)", "dpswd_paper": "DP-SWD (Alg. 2 as published)"}
#: rows compared with another method's paper column
PAPER_COLUMN = {"dpswd_paper": "dpswd", "dpswd_frame": "dpswd"}
#: variants: the method they run and their extra overrides
VARIANTS = {"dpswd": ("dpswd", ["+variant=dpswd_bernstein"]),  # Table 1 used the Bernstein bound
            "dpswd_frame": ("dpswd", ["method.directions=haar"]),  # dpgen's default mechanism: bound=frame, clipped rows
            "dpswd_paper": ("dpswd", ["+variant=dpswd_alg2_published"])}  # conf/variant/*.yaml
DIGITS = ("mu", "um")
SCALES = table_scales("dpswd_da")  # conf/scale/{smoke,cpu,paper}.yaml
FIG_EPSILONS = {s: v["epsilons"] for s, v in table_scales("dpswd_da_figure").items()}
FIG_PROBLEMS = ("um", "mu", "dw")

COLUMNS = ["problem", "method", "runs", "acc_mean", "acc_std", "paper_mean", "paper_std", "verdict", "epsilon",
           "epsilon_spent", "delta", "sigma", "bound", "row_bound", "steps", "epochs", "wall_s_per_run",
           "steps_per_s", "status"]


def paper_numbers() -> Dict[str, Dict[str, tuple]]:
    out = {}
    for r in read_paper_table(TABLE):
        out[r["problem"]] = {m: (float(r[f"{m}_mean"]), float(r[f"{m}_std"])) for m in METHODS.values()
                             if f"{m}_mean" in r}
    return out


def cell(scale: str, problem: str, method: str, seeds, extra: List[str] = (), tag: str = "") -> Cell:
    """The grid cell of one (problem, method): ``outputs/runs/dpswd_da/<scale>/<preset>/<method><tag>/seed<k>``."""
    spec = SCALES[scale]
    base, vextra = VARIANTS.get(method, (method, []))
    ov = [f"method={base}", *vextra, *spec["overrides"], *(spec["digits_overrides"] if problem in DIGITS else []),
          *extra]
    preset = PROBLEMS[problem][0]
    return Cell(f"{problem} {method}{tag}", preset, f"dpswd_da/{scale}/{preset}/{method}{tag}", ov, list(seeds))


def run_dir(scale: str, problem: str, method: str, seed: int, tag: str = "") -> Path:
    return cell(scale, problem, method, [seed], tag=tag).run_dir(seed)


def run_table(scale: str, problems: List[str], methods: List[str], runs: Optional[int] = None,
              data_root: Optional[str] = None, reuse: bool = True, seeds: Optional[List[int]] = None,
              collect_only: bool = False) -> List[Dict]:
    """One row per problem x method (a grid cell each), mean/std over the runs; a problem whose data are
    absent is skipped for every method."""
    import torch

    torch.set_num_threads(1)
    wanted = list(seeds if seeds is not None else range(runs or SCALES[scale]["runs"]))
    paper = paper_numbers()
    rows = []
    for prob in problems:
        name = PROBLEMS[prob][1]
        skipped = None
        for method in methods:
            row = {"problem": name, "method": METHODS[method]}
            pm = paper.get(name, {}).get(METHODS[PAPER_COLUMN.get(method, method)])
            if pm:
                row["paper_mean"], row["paper_std"] = pm
            m, res = None, None
            if skipped is None:
                res = run_cell(cell(scale, prob, method, wanted), data_root=data_root, reuse=reuse,
                               collect_only=collect_only)
                skipped = res.skipped
                m = res.last
            row["status"] = skipped or res.status
            row["runs"] = len(res.runs) if res else 0
            if res and res.runs:
                row["acc_mean"], row["acc_std"] = mean_std(res.values(lambda r: r["target_acc"]))
                row["wall_s_per_run"] = round(res.wall_s / len(res.runs), 1)
            if m is not None:
                p = m["privacy"]
                row.update(steps=m["steps"], epochs=m.get("epochs"), steps_per_s=m.get("steps_per_second"))
                if p.get("private"):
                    row.update(epsilon=p["epsilon_budget"], epsilon_spent=round(p["epsilon_spent"], 4),
                               delta=p["delta"], sigma=round(p["sigma"], 4), bound=p["bound"],
                               row_bound=p["row_bound"].split(":")[0])
                else:
                    row["epsilon"] = "inf"
            row["verdict"] = verdict(row.get("acc_mean"), row.get("paper_mean"), row.get("acc_std"),
                                     row.get("paper_std"), row["runs"],
                                     shortened="" if scale == "paper" else f"SCALE={scale}")
            rows.append(row)
            print(f"[dpgen] {name} {METHODS[method]}: {row['status'][:120]}  acc {row.get('acc_mean')} +- "
                  f"{row.get('acc_std')} over {row['runs']} (paper {pm})", flush=True)
    return rows


NOTES = table_notes("dpswd_da")


def main_table(args) -> List[Dict]:
    problems = [p.strip() for p in args.problems.split(",") if p.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for p in problems:
        if p not in PROBLEMS:
            raise SystemExit(f"--problems: {p!r} is not one of {', '.join(PROBLEMS)}")
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"--methods: {m!r} is not one of {', '.join(METHODS)}")
    rows = run_table(args.scale, problems, methods, args.runs, args.data_root, args.reuse, args.seeds,
                     args.collect_only)
    spec = SCALES[args.scale]
    notes = [f"SCALE={args.scale}: {spec['runs'] if not args.runs else args.runs} run(s) per cell; overrides "
             f"{spec['overrides']} (digits also {spec['digits_overrides']}) on top of conf/experiment/da_*.yaml.",
             *NOTES, VERDICT_NOTE]
    if not args.no_write:  # the file name, and a copy per scale so that scales do not overwrite each other
        for name in (TABLE, f"{TABLE}_{args.scale}"):
            write_table(name, rows, COLUMNS, title=f"DP-SWD Table 1: target accuracy (%), SCALE={args.scale}",
                        notes=notes)
    return rows


def main_figure(args) -> List[Dict]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from dpgen.utils.io import save_figure

    torch.set_num_threads(1)
    eps_list = args.epsilons or FIG_EPSILONS[args.scale]
    runs = args.runs or 1
    rows = []
    problems = [p.strip() for p in args.problems.split(",") if p.strip()] if args.problems_set else list(FIG_PROBLEMS)
    method = args.figure_method
    name = FIGURE if method == "dpswd" else f"{FIGURE}_{method}"
    for prob in problems:
        for eps in eps_list:
            row = {"problem": PROBLEMS[prob][1], "epsilon": eps}
            res = run_cell(cell(args.scale, prob, method, range(runs), [f"privacy.epsilon={eps}"],
                                tag="" if eps == 10.0 else f"_eps{eps:g}"),  # epsilon 10: the table's runs
                           data_root=args.data_root, reuse=args.reuse, collect_only=args.collect_only)
            row["status"] = res.status
            if res.skipped:
                rows.append(row)
                break
            row["runs"] = len(res.runs)
            if not res.runs:
                rows.append(row)
                continue
            row["sigma"] = round(res.last["privacy"]["sigma"], 4)
            row["epsilon_spent"] = round(res.last["privacy"]["epsilon_spent"], 4)
            row["acc_mean"], row["acc_std"] = mean_std(res.values(lambda r: r["target_acc"]))
            row["status"] = "ok"
            rows.append(row)
            print(f"[dpgen] fig3 {row['problem']} eps={eps}: {row['acc_mean']}", flush=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for prob in problems:
        pts = [r for r in rows if r["problem"] == PROBLEMS[prob][1] and r.get("status") == "ok"]
        if pts:
            ax.errorbar([r["epsilon"] for r in pts], [r["acc_mean"] for r in pts], yerr=[r["acc_std"] for r in pts],
                        marker="o", capsize=3, label=PROBLEMS[prob][1])
    ax.set_xlabel("epsilon")
    ax.set_ylabel("target accuracy (%)")
    ax.set_title(f"{METHODS[method]}: DA vs epsilon (SCALE={args.scale})", fontsize=9)
    ax.legend()
    save_figure(fig, name)
    bound = ("the frame bound (dpgen's default: sensitivity of the orthonormal frame, no Bernstein term)"
             if method == "dpswd_frame" else "Bernstein bound (the paper's)")
    write_table(name, rows, ["problem", "epsilon", "runs", "acc_mean", "acc_std", "sigma", "epsilon_spent", "status"],
                title=f"DP-SWD Figure 3 ({METHODS[method]}): target accuracy vs epsilon, SCALE={args.scale}",
                notes=[f"DP-SWD with the per-row clip (default), {bound}, delta of Table 1's caption; sigma "
                       "calibrated for each epsilon; the epsilon-10 points are Table 1's runs (same seeds); "
                       "problems whose data are absent are skipped.", *NOTES[-1:]])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=list(SCALES), default="smoke")
    ap.add_argument("--problems", default=None, help=f"comma list of {', '.join(PROBLEMS)} (default: all)")
    ap.add_argument("--methods", default="dann,swd,dpdann,dpswd,dpswd_frame", help=f"comma list of {', '.join(METHODS)}")
    add_grid_arguments(ap)
    ap.add_argument("--figure", action="store_true", help="Figure 3 instead of Table 1")
    ap.add_argument("--figure-method", choices=["dpswd", "dpswd_frame"], default="dpswd",
                    help="Figure 3's DP-SWD: dpswd = the paper's Bernstein bound (writes " + FIGURE + "), "
                         "dpswd_frame = dpgen's default frame bound (writes " + FIGURE + "_dpswd_frame)")
    ap.add_argument("--no-write", action="store_true", help="run only (another process assembles the table)")
    ap.add_argument("--epsilons", type=lambda v: [float(x) for x in v.split(",")], default=None,
                    help="Figure 3's epsilons (default per scale)")
    args = ap.parse_args(argv)
    args.problems_set = args.problems is not None
    if args.problems is None:
        args.problems = ",".join(PROBLEMS)
    return main_figure(args) if args.figure else main_table(args)


if __name__ == "__main__":
    main()
