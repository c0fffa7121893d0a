"""``make table-dpswd-generation``: DP-SWD Table 2 (downstream accuracy of synthetic data).

Rows SWD, DP-SWD-c, DP-SWD-b (and dpgen's DP-SWD-ch, the rigorous Chernoff bound) on MNIST and
FashionMNIST: MLP and LogReg trained on synthetic samples, tested on the real test set, mean and
std over the runs (5 seeds at SCALE=paper) and, with ``--generations G``, over G synthetic sets of
each trained generator (the paper's "averaged over 5 runs of generation", read as the DP-Sinkhorn
tables read the same words: ``--runs 1 --generations 5`` trains once and samples five times; a
finished run is extended, not trained again). Each run is the experiment preset
``{swd,dpswd}_<dataset>[_b|_c]`` through the shared trainer; a dataset whose files are absent is
listed as skipped with the reason.

    python -m dpgen.tables.dpswd_generation --scale smoke|paper [--datasets mnist,fashion_mnist]
        [--rows SWD DP_SWD_c] [--set trainer.epochs=10 ...] [--seeds 3,4] [--generations 5] [--reuse false]
        [--collect-only]

Writes outputs/tables/dpswd_table2_generation[_<set>].csv (+ .md); runs under
outputs/runs/table2/<scale>[_<set>]/<dataset>/<row>/seed<k>/. A finished run there (its metrics.json) is
read instead of trained again and an interrupted one resumes from its checkpoint (``resume=auto``), so a
paper-length table is assembled over several sessions by running the same command again. Each
generation's evaluation is kept in ``<run>/table_generations/<g>.json`` as it finishes.
"""

from __future__ import annotations

import argparse
import re
from functools import lru_cache
from typing import Dict, List

from dpgen.config import table_scales
from dpgen.config import compose_preset
from dpgen.tables import table_notes
from dpgen.tables.grid import (FIDELITY_COLUMNS, FIDELITY_NOTE, RESULT_FILE, Cell, add_grid_arguments, compose_cell,
                               evaluate_run, fidelity_cells, generations_done, mean_std, metric_values, run_cell)
from dpgen.utils.io import write_table
from dpgen.utils.paper import VERDICT_NOTE, read_paper_table, verdict

COLUMNS = ["dataset", "method", "epsilon", "runs", "generations", "mlp_mean", "mlp_std", "mlp_paper", "mlp_verdict",
           "logreg_mean", "logreg_std", "logreg_paper", "logreg_verdict", *FIDELITY_COLUMNS, "epsilon_spent", "sigma",
           "steps", "wall_s", "status"]

VARIANTS = {  # row name -> (preset suffix, extra overrides)
    "SWD": ("swd_{ds}", []),
    # the same with DP-MERF's bilinear upsampling in the generator (DP-SWD reused DP-MERF's generator)
    "SWD (bilinear upsampling)": ("swd_{ds}", ["model.upsample=bilinear"]),
    # dpgen's non-private SWD: tensor label rows and Adam 1e-3, both chosen on USPS (public proxy, 2 seeds each
    # of the four combinations; docs/RUNS.md): not the paper's baseline, the ceiling a better-tuned SWD reaches
    "SWD (dpgen: tensor labels, Adam 1e-3)": ("swd_{ds}", ["method.label_mode=tensor", "trainer.lr=1e-3"]),
    "DP-SWD-c": ("dpswd_{ds}_c", []),
    "DP-SWD-b": ("dpswd_{ds}_b", []),
    # what the paper ran: [0, 1] pixel rows with norms up to 28, noise calibrated for rows within 1 of each
    # other (no guarantee; the run's privacy report says so)
    "DP-SWD-c (rows unbounded)": ("dpswd_{ds}_c", ["method.row_bound=none"]),
    "DP-SWD-b (rows unbounded)": ("dpswd_{ds}_b", ["method.row_bound=none"]),
    "DP-SWD-ch (dpgen)": ("dpswd_{ds}_b", ["+variant=dpswd_chernoff"]),  # conf/variant/*.yaml
    # dpgen's default variant: frame directions, tensor label rows, DP mean centering, noisy copies, EMA
    "DP-SWD-f (dpgen)": ("dpswd_{ds}_b", ["+variant=dpswd_dpgen"]),
    "DP-SWD-f (dpgen), eps 1": ("dpswd_{ds}_b", ["+variant=dpswd_dpgen", "privacy.epsilon=1"]),
    # the reference baseline users compare with (the paper quotes DP-MERF's numbers): one release, then
    # post-processing
    "DP-MERF (baseline)": ("dpmerf_{ds}", []),
    "DP-MERF (baseline), eps 1": ("dpmerf_{ds}", ["privacy.epsilon=1"]),
}
PRESET_NAME = {"mnist": "mnist", "fashion_mnist": "fmnist", "mnist10k": "mnist10k"}
PAPER_PREFIX = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "mnist10k": "MNIST"}

SCALES = table_scales("dpswd_generation")  # conf/scale/{smoke,cpu,paper}.yaml


PAPER_ROW = {"SWD (bilinear upsampling)": "SWD", "SWD (dpgen: tensor labels, Adam 1e-3)": "SWD",
             "DP-SWD-c (rows unbounded)": "DP-SWD-c", "DP-SWD-b (rows unbounded)": "DP-SWD-b",
             "DP-MERF (baseline)": "DP-MERF"}  # our row -> the paper's row it is compared with


def _paper(method: str, ds: str) -> Dict[str, float]:
    rows = {r["method"]: r for r in read_paper_table("dpswd_table2_generation")}
    r = rows.get(PAPER_ROW.get(method, method))
    if r is None:
        return {"mlp": None, "logreg": None}
    p = PAPER_PREFIX[ds]
    return {"mlp": float(r[f"{p}_MLP"]), "logreg": float(r[f"{p}_LogReg"])}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def run_folder(ds: str, method: str, seed: int, tag: str = ""):
    """outputs/runs/table2/[<tag>/]<dataset>/<row slug>/seed<k>: one folder per row and setting (two rows,
    or one row at two scales, never share one)."""
    return _cell(ds, method, [], tag, [seed]).run_dir(seed)


@lru_cache(maxsize=None)
def _method_keys(preset: str) -> frozenset:
    """The names of the preset's method settings (composed once per process: the table asks per cell and per
    folder name)."""
    return frozenset(dir(compose_preset(preset).method))


def applicable(preset: str, overrides: List[str]) -> List[str]:
    """The scale's overrides that this preset's method has (``method.k`` means nothing to DP-MERF)."""
    keys = _method_keys(preset)
    return [o for o in overrides if not o.startswith("method.") or o.split("=")[0].split(".")[1] in keys]


def _cell(ds: str, method: str, scale_overrides: List[str], tag: str, seeds) -> Cell:
    preset, extra = VARIANTS[method]
    preset = preset.format(ds=PRESET_NAME[ds])
    folder = "/".join(p for p in ("table2", _slug(tag) if tag else "", ds, _slug(method)) if p)
    return Cell(f"{ds} {method}", preset, folder, [*applicable(preset, scale_overrides), *extra], seeds)


def _generations(m: Dict) -> int:
    return int(m.get("generations") or 1)


def _privacy_facts(m: Dict) -> Dict:
    if "privacy" in m:  # a run's metrics.json
        p = m["privacy"]
        return {"epsilon_spent": round(p.get("epsilon_spent", 0.0), 4), "sigma": round(p.get("sigma", 0.0), 4)}
    eps = m.get("epsilon_spent")  # evaluate_run's result ("inf" for a non-private run)
    return {"epsilon_spent": 0.0 if eps == "inf" else eps, "sigma": m.get("sigma", 0.0)}


def run_table(scale: str, datasets: List[str], runs: int = None, data_root: str = None,
              variants: List[str] = None, extra_overrides: List[str] = (), reuse: bool = True,
              collect_only: bool = False, seeds: List[int] = None, generations: int = 1) -> List[Dict]:
    """One row per dataset x variant, mean/std over ``runs`` trained runs x ``generations`` synthetic sets of
    each (the grid runner's cells). ``extra_overrides`` apply to every cell and name the run folders
    (``<scale>_<overrides>``)."""
    if generations < 1:
        raise ValueError(f"generations={generations}: give 1 or more (1: each run's own evaluation only)")
    spec = SCALES[scale]
    seeds = list(seeds) if seeds is not None else range(runs or spec["runs"])
    tag = "_".join([scale, *extra_overrides])
    shortened = ", ".join([f"SCALE={scale}"] * (scale != "paper") + list(extra_overrides))
    rows = []
    for ds in datasets:
        for method in variants or list(VARIANTS):
            cell = _cell(ds, method, [*spec["overrides"], *extra_overrides], tag, seeds)
            paper = _paper(method, ds)
            row = {"dataset": ds, "method": method, "mlp_paper": paper["mlp"], "logreg_paper": paper["logreg"]}
            try:
                cfg = compose_cell(cell, 0)
                row["epsilon"] = cfg.privacy.epsilon if cfg.method.private else "inf"
            except FileNotFoundError:
                pass
            if generations > 1:  # more synthetic sets of each trained generator, each kept as it finishes
                res = run_cell(cell, data_root=data_root, reuse=reuse, collect_only=collect_only,
                               runner=lambda cfg, out: evaluate_run(cfg, out, generations, reuse=reuse),
                               result_file=RESULT_FILE, complete=generations_done(generations))
            else:
                res = run_cell(cell, data_root=data_root, reuse=reuse, collect_only=collect_only)
            for k in ("mlp", "logreg"):
                values = [v for m in res.runs for v in metric_values(m, k)]
                row[f"{k}_mean"], row[f"{k}_std"] = mean_std(values)
                row[f"{k}_verdict"] = verdict(row[f"{k}_mean"], paper[k], row[f"{k}_std"], runs=len(values),
                                              shortened=shortened)
            if res.runs:
                row.update(fidelity_cells(res.runs))
            if res.last:
                row.update(_privacy_facts(res.last), steps=res.last["steps"])
            row.update(runs=len(res.runs), generations=min((_generations(m) for m in res.runs), default=0),
                       wall_s=round(res.wall_s, 1), status=res.status)
            rows.append(row)
            print(f"[dpgen] {ds} {method}: {row['status']}  MLP {row.get('mlp_mean')} (paper {paper['mlp']}), "
                  f"LogReg {row.get('logreg_mean')} (paper {paper['logreg']})", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=list(SCALES), default="smoke")
    ap.add_argument("--datasets", default="mnist,fashion_mnist")
    add_grid_arguments(ap)
    ap.add_argument("--generations", type=int, default=1, metavar="G",
                    help="synthetic sets evaluated per trained run (default 1: the run's own evaluation); the "
                         "paper's protocol at a feasible cost: --runs 1 --generations 5")
    ap.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                    help="rows by name or folder name (default: all): " + "; ".join(f"{v!r} ({_slug(v)})" for v in VARIANTS))
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for every cell, e.g. trainer.epochs=10 (shortened runs; they name the run folders)")
    args = ap.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    for d in datasets:
        if d not in PRESET_NAME:
            ap.error(f"--datasets: {d!r} is not one of {', '.join(PRESET_NAME)}")
    variants = None
    if args.rows:
        by_slug = {_slug(v): v for v in VARIANTS}
        variants = []
        for r in args.rows:
            if r not in VARIANTS and r not in by_slug:
                ap.error(f"--rows: {r!r} is not a row; rows (name or folder name): "
                         + "; ".join(f"{v!r} ({_slug(v)})" for v in VARIANTS))
            variants.append(r if r in VARIANTS else by_slug[r])
    for o in args.set:
        if "=" not in o:
            ap.error(f"--set: {o!r} is not KEY=VALUE (e.g. trainer.epochs=10)")
    if args.generations < 1:
        ap.error(f"--generations: {args.generations} is not 1 or more")
    rows = run_table(args.scale, datasets, args.runs, args.data_root, variants, args.set, args.reuse,
                     args.collect_only, args.seeds, args.generations)
    notes = [
        f"SCALE={args.scale}: {SCALES[args.scale]['overrides'] + list(args.set)} on top of the presets "
        "(conf/experiment/{swd,dpswd}_<dataset>[_b|_c].yaml: k=1000, Adam 1e-4, batch 100, 100 epochs, "
        "Table 3 generator, (10, 1e-5)).",
        *table_notes("dpswd_generation"),
        FIDELITY_NOTE,
        VERDICT_NOTE,
    ]
    name = "dpswd_table2_generation" + ("_" + _slug("_".join(args.set)) if args.set else "")  # one file per setting
    write_table(name, rows, COLUMNS,
                title=f"DP-SWD Table 2: downstream accuracy (%) and fidelity of synthetic data, SCALE={args.scale}", notes=notes)
    return rows


if __name__ == "__main__":
    main()
