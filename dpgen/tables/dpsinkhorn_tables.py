"""DP-Sinkhorn's Tables 1-5 (dp-sinkhorn.txt): ``make table-dpsinkhorn-{mnist,celeba,ablation}``.

* ``mnist`` — Table 1: rows Non-priv Sinkhorn, DP-Sinkhorn (param grad), DP-Sinkhorn on MNIST
  and FashionMNIST (``--datasets``; ``mnist10k`` = the 8,000 MNIST images of ../shared): FID,
  LogReg / MLP / CNN accuracy (%) of classifiers trained on synthetic samples and tested on the
  real test split, mean (and std) over generations of the synthetic set from one trained
  generator (5 at SCALE=paper). -> outputs/tables/dpsinkhorn_table1.csv
* ``celeba`` — Tables 2-3: gender-conditioned CelebA 32x32: Adversarial / Pixel Sinkhorn
  (non-private), Adversarial DP-Sinkhorn, Pixel DP-Sinkhorn (BigGAN), DCGAN + DP-Sinkhorn:
  FID, MLP, CNN. -> outputs/tables/dpsinkhorn_table2_3.csv
* ``ablation`` — Tables 4-5 on MNIST: optimizer x learning rate (batch 50, sigma 1.1), then
  batch size x noise scale (Adam 1e-5); every private run stops at epsilon = 10.
  -> outputs/tables/dpsinkhorn_table4_5.csv

Each run is an experiment preset (conf/experiment/dpsinkhorn_*.yaml) through the shared
trainer; ``SCALE`` shrinks the presets (smoke: a few steps, minutes on a CPU; cpu: ~1,000 steps
at lr 1e-3; paper: the presets as they are, 60k synthetic samples, 5 generations). A dataset
whose files are absent gives rows whose status says why. The paper's numbers
(../shared/paper-tables/dpsinkhorn_*.csv) are printed beside ours, and a PNG compares them.

    python -m dpgen.tables.dpsinkhorn_tables mnist --scale smoke [--datasets mnist,fashion_mnist]
        [--rows Non_priv_Sinkhorn DP_MERF_baseline] [--reuse false] [--collect-only]

A finished run (its ``table_result.json``) is read instead of trained again; an interrupted one resumes.
Each generation's evaluation is kept as it finishes (``<run>/table_generations/<g>.json``): an evaluation
interrupted at generation 3 of 5 resumes at generation 3, and ``--generations 5`` on a cell that holds fewer
evaluates only the missing ones (``--reuse false``: all again).
"""

from __future__ import annotations

import argparse
import re
from typing import Callable, Dict, List, Optional, Sequence

from dpgen.config import CONFIG_DIR, table_scales
from dpgen.tables import table_notes
from dpgen.tables.grid import (FIDELITY_NOTE, RESULT_FILE, Cell, add_grid_arguments, evaluate_run, generations_done,
                               run_cell)
from dpgen.utils.io import save_figure, write_table
from dpgen.utils.paper import VERDICT_NOTE, read_paper_table, verdict

SCALES = table_scales("dpsinkhorn_tables")  # conf/scale/{smoke,cpu,paper}.yaml

DATASET_PRESET = {"mnist": "mnist", "fashion_mnist": "fmnist", "mnist10k": "mnist10k"}
PAPER_PREFIX = {"mnist": "MNIST", "fashion_mnist": "FMNIST", "mnist10k": "MNIST"}
TABLE1_ROWS = {  # row name -> (preset pattern, extra overrides, the paper's row)
    "Non-priv Sinkhorn": ("dpsinkhorn_nonpriv_{ds}", [], "Non-priv Sinkhorn"),
    # per-sample clipping (DP-SGD) of the record-separable Sinkhorn dual bound: the preset's default
    "DP-Sinkhorn (param grad)": ("dpsinkhorn_param_{ds}", [], "DP-Sinkhorn (param grad)"),
    # the batch's grad_theta S clipped as one vector (appendix B's description), the paper's loss
    "DP-Sinkhorn (param grad, batch clip)": ("dpsinkhorn_param_{ds}", ["+variant=dpsinkhorn_batch_clip"],
                                             "DP-Sinkhorn (param grad)"),
    "DP-Sinkhorn": ("dpsinkhorn_{ds}", [], "DP-Sinkhorn"),
    # dpgen's recipe (not the paper's): the same mechanism released at 100 DCT coefficients per image
    # dpgen's rows at epsilon 10 compare with the paper's DP-Sinkhorn row (the same mechanism and epsilon)
    "DP-Sinkhorn (dpgen: DCT barrier)": ("dpsinkhorn_{ds}", ["+variant=dpsinkhorn_dct"], "DP-Sinkhorn"),
    # sigma 7.55 keeps mnist10k's 59,976 steps at epsilon 1 (sigma 1.1 would allow 2)
    "DP-Sinkhorn (dpgen: DCT barrier), eps 1": ("dpsinkhorn_{ds}", ["+variant=dpsinkhorn_dct", "privacy.epsilon=1",
                                                                   "method.noise_multiplier=7.55"], None),
    # dpgen's recipe retuned for 60,000 records (experiment=dpsinkhorn_dct_<ds>: 60,000 steps, sigma 0.5135; the
    # presets exist for mnist and fashion_mnist only), with the batch clip and with the per-record image gradient
    "DP-Sinkhorn (dpgen: DCT barrier, 60k steps)": ("dpsinkhorn_dct_{ds}", [], "DP-Sinkhorn"),
    "DP-Sinkhorn (dpgen: DCT barrier, 60k steps, per-record clip)": (
        "dpsinkhorn_dct_{ds}", ["method.clip_mode=per_sample"], "DP-Sinkhorn"),
    # the per-record row with Adam 3e-4 instead of 1e-4, chosen on USPS (public proxy, 3 seeds; README)
    "DP-Sinkhorn (dpgen: DCT barrier, 60k steps, per-record clip, Adam 3e-4)": (
        "dpsinkhorn_dct_{ds}", ["method.clip_mode=per_sample", "trainer.lr=3e-4"], "DP-Sinkhorn"),
    # the same with Poisson batches of 200 (60,000 steps = 200 epochs; sigma 0.7751 calibrated to epsilon 10 at q =
    # 200 / 60,000), chosen on USPS at the noise level of these 60,000-record runs (public proxy, 3 seeds; README)
    "DP-Sinkhorn (dpgen: DCT barrier, 60k steps, per-record clip, Adam 3e-4, batch 200)": (
        "dpsinkhorn_dct_{ds}", ["method.clip_mode=per_sample", "trainer.lr=3e-4", "trainer.batch_size=200",
                                "method.noise_multiplier=0.7751"], "DP-Sinkhorn"),
    # the paper's param-grad mechanism (DP-SGD on the parameter gradient, C 1) in the DCT recipe's 60,000 steps at
    # sigma 0.5135 (experiment=dpsinkhorn_param_dct_<ds>): the paper's 3.4M param-grad steps are out of a CPU's reach
    "DP-Sinkhorn (param grad, dpgen: DCT barrier, 60k steps)": ("dpsinkhorn_param_dct_{ds}", [],
                                                               "DP-Sinkhorn (param grad)"),
    # the reference baseline users compare with (the paper quotes its numbers): one release, then post-processing
    "DP-MERF (baseline)": ("dpmerf_{ds}", [], "DP-MERF"),
    "DP-MERF (baseline), eps 1": ("dpmerf_{ds}", ["privacy.epsilon=1"], None),
}
#: run-folder suffix of the rows whose overrides change the preset
ROW_TAGS = {"+variant=dpsinkhorn_batch_clip": "_batchclip", "+variant=dpsinkhorn_dct": "_dct",
            "privacy.epsilon=1": "_eps1", "method.noise_multiplier=7.55": "", "method.clip_mode=per_sample": "_perrecord",
            "trainer.lr=3e-4": "_lr3e-4", "trainer.batch_size=200": "_b200", "method.noise_multiplier=0.7751": ""}
CELEBA_ROWS = {
    "Adversarial Sinkhorn (non-priv)": "dpsinkhorn_nonpriv_adv_celeba32",
    "Pixel Sinkhorn (non-priv)": "dpsinkhorn_nonpriv_celeba32",
    "Adversarial DP-Sinkhorn": "dpsinkhorn_adv_celeba32",
    "Pixel DP-Sinkhorn (BigGAN)": "dpsinkhorn_celeba32",
    "DCGAN+DP-Sinkhorn": "dpsinkhorn_celeba32_dcgan",
}
OPTIMIZER_NAME = {"Adam": "adam", "SGD": "sgd", "RMSProp": "rmsprop"}

def _f(v) -> Optional[float]:
    try:
        return float(str(v).split("/")[0])
    except (TypeError, ValueError):
        return None


def _run_rows(specs: List[Dict], scale: str, sub: str, data_root: Optional[str], generations: Optional[int],
              extra_overrides: Sequence[str] = (), reuse: bool = True, collect_only: bool = False) -> List[Dict]:
    sc = SCALES[scale]
    gens = generations or sc["generations"]
    shortened = ", ".join([f"SCALE={scale}"] * (scale != "paper") + list(extra_overrides))
    rows = []
    for spec in specs:
        row = dict(spec["row"])
        cell = Cell(spec["run_name"], spec["preset"], f"{sub}/{spec['run_name']}",
                    [*spec.get("overrides", []), *extra_overrides], seed_folders=False, set_seed=False)
        # a finished result with fewer generations than asked for is extended (its generations are read back)
        res = run_cell(cell, common=sc["overrides"], data_root=data_root, reuse=reuse, collect_only=collect_only,
                       runner=lambda cfg, out: evaluate_run(cfg, out, gens, reuse=reuse), result_file=RESULT_FILE,
                       complete=generations_done(gens))
        if res.last:
            row.update(res.last)
        for k in ("logreg", "mlp", "cnn"):
            ours = row.get(k) if isinstance(row.get(k), (int, float)) else None
            row[f"{k}_verdict"] = verdict(ours, _f(row.get(f"{k}_paper")), row.get(f"{k}_std"),
                                          runs=row.get("generations"), shortened=shortened)
        row["status"] = res.status
        rows.append(row)
        print(f"[dpgen] {spec['run_name']}: {row['status']} FID {row.get('fid')} (paper {row.get('fid_paper')}), "
              f"MLP {row.get('mlp')} (paper {row.get('mlp_paper')}), CNN {row.get('cnn')} "
              f"(paper {row.get('cnn_paper')}), eps {row.get('epsilon_spent')}", flush=True)
    return rows


def _figure(rows: List[Dict], name: str, label: Callable[[Dict], str], metrics=("mlp", "cnn"), title: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ok = [r for r in rows if r.get("status") == "ok"] or rows
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 0.5 * len(ok) + 2), squeeze=False)
    for ax, met in zip(axes[0], metrics):
        y = np.arange(len(ok))
        ours = [r.get(met) if isinstance(r.get(met), (int, float)) else 0.0 for r in ok]
        paper = [_f(r.get(f"{met}_paper")) or 0.0 for r in ok]
        ax.barh(y - 0.2, ours, 0.4, label="dpgen")
        ax.barh(y + 0.2, paper, 0.4, label="paper")
        ax.set_yticks(y, [label(r) for r in ok], fontsize=7)
        ax.set_xlabel(f"{met.upper()} accuracy (%)" if met != "fid" else "FID")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, name)
    plt.close(fig)


# ---- Table 1 ------------------------------------------------------------------------------------
TABLE1_COLUMNS = ["dataset", "method", "eps", "fid", "fid_std", "fid_paper", "precision", "recall", "density",
                  "coverage", "class_mean", "spread_ratio", "logreg", "logreg_std", "logreg_paper",
                  "logreg_verdict", "mlp", "mlp_std", "mlp_paper", "mlp_verdict", "cnn", "cnn_std", "cnn_paper",
                  "cnn_verdict", "epsilon_spent", "steps", "steps_per_s", "fid_protocol",
                  "generations", "wall_s", "status"]


def row_names(names: Optional[Sequence[str]]) -> List[str]:
    """Table 1's rows by name or by folder-safe name (``Non_priv_Sinkhorn``); all when ``names`` is empty."""
    if not names:
        return list(TABLE1_ROWS)
    by_slug = {_slug(r): r for r in TABLE1_ROWS}
    out = []
    for n in names:
        if n not in TABLE1_ROWS and n not in by_slug:
            raise ValueError(f"--rows: {n!r} is not a row of Table 1; rows (name or folder-safe name): "
                             + "; ".join(f"{r!r} ({_slug(r)})" for r in TABLE1_ROWS))
        out.append(n if n in TABLE1_ROWS else by_slug[n])
    return out


def _eps(paper_value, default):
    """The row's epsilon as a number: the paper's cell ('10', 'inf': text in its CSV) or ``default``."""
    v = _f(paper_value)
    if v is None:
        return default
    return int(v) if v.is_integer() else v


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def table1(scale: str = "smoke", datasets: Sequence[str] = ("mnist", "fashion_mnist"), data_root=None,
           generations=None, extra_overrides: Sequence[str] = (), rows: Optional[Sequence[str]] = None,
           **grid) -> List[Dict]:
    paper = {r["method"]: r for r in read_paper_table("dpsinkhorn_table1_mnist_fmnist")}
    wanted = row_names(rows)
    specs = []
    for ds in datasets:
        if ds not in DATASET_PRESET:
            raise ValueError(f"--datasets: {ds!r} is not one of {', '.join(DATASET_PRESET)}")
        p = PAPER_PREFIX[ds]
        for method in wanted:
            pattern, row_ov, paper_row = TABLE1_ROWS[method]
            if not (CONFIG_DIR / "experiment" / f"{pattern.format(ds=DATASET_PRESET[ds])}.yaml").exists():
                continue  # a row whose preset this dataset has not (the 60,000-record recipe on mnist10k)
            pr = paper.get(paper_row, {})
            tag = "".join(ROW_TAGS[o] for o in row_ov)
            specs.append({"preset": pattern.format(ds=DATASET_PRESET[ds]), "overrides": row_ov,
                          "run_name": f"{ds}/{pattern.format(ds='')}{tag}",
                          "row": {"dataset": ds, "method": method,
                                  "eps": _eps(pr.get("eps"), 1 if "privacy.epsilon=1" in row_ov else 10),
                                  **{f"{k}_paper": pr.get(f"{p}_{col}") for k, col in
                                     (("fid", "FID"), ("logreg", "LogReg"), ("mlp", "MLP"), ("cnn", "CNN"))}}})
    rows = _run_rows(specs, scale, "dpsinkhorn_table1", data_root, generations, extra_overrides, **grid)
    notes = [
        f"SCALE={scale}: {SCALES[scale]['overrides'] or 'the presets unchanged'} on top of "
        "conf/experiment/dpsinkhorn_{,param_,nonpriv_}<dataset>.yaml (DCGAN latent 12 + embedding 4, Adam 1e-5, "
        "betas (0.9, 0.999), weight decay 2e-5, entropy 0.05, alpha_c 15; private: Poisson batches of 50, "
        "sigma 1.1, C 0.5 (image) / 1 (param), run until epsilon = 10 at delta 1e-5; non-private: batch 500).",
        *table_notes("dpsinkhorn_tables", "table1"),
        FIDELITY_NOTE,
        VERDICT_NOTE,
    ]
    write_table("dpsinkhorn_table1", rows, TABLE1_COLUMNS,
                title=f"DP-Sinkhorn Table 1 (MNIST / FashionMNIST), SCALE={scale}", notes=notes)
    _figure(rows, "dpsinkhorn_table1", lambda r: f"{r['dataset']} {r['method']}", ("logreg", "mlp", "cnn"),
            f"DP-Sinkhorn Table 1, SCALE={scale}: dpgen vs paper")
    return rows


# ---- Tables 2-3 -----------------------------------------------------------------------------------
CELEBA_COLUMNS = ["method", "eps", "fid", "fid_std", "fid_paper", "precision", "recall", "density", "coverage",
                  "class_mean", "spread_ratio", "fid_protocol", "mlp", "mlp_std", "mlp_paper", "cnn", "cnn_std", "cnn_paper",
                  "epsilon_spent", "steps", "steps_per_s", "generations", "wall_s", "status"]


def table_celeba(scale: str = "smoke", data_root=None, generations=None,
                 extra_overrides: Sequence[str] = (), **grid) -> List[Dict]:
    paper = {r["method"]: r for r in read_paper_table("dpsinkhorn_table2_3_celeba")}
    specs = []
    for method, preset in CELEBA_ROWS.items():
        pr = paper.get(method, {})
        specs.append({"preset": preset, "run_name": preset,
                      "row": {"method": method, "eps": pr.get("eps"), "fid_paper": pr.get("FID"),
                              "mlp_paper": pr.get("MLP"), "cnn_paper": pr.get("CNN")}})
    rows = _run_rows(specs, scale, "dpsinkhorn_table2_3", data_root, generations, extra_overrides, **grid)
    notes = [
        f"SCALE={scale}: {SCALES[scale]['overrides'] or 'the presets unchanged'} on top of "
        "conf/experiment/dpsinkhorn_*celeba32*.yaml (entropy 5, sigma 0.8, batch 200, (10, 1e-6); "
        "BigGAN-style generator latent 32, or DCGAN latent 32 + embedding 4).",
        *table_notes("dpsinkhorn_tables", "celeba"),
        FIDELITY_NOTE,
    ]
    write_table("dpsinkhorn_table2_3", rows, CELEBA_COLUMNS,
                title=f"DP-Sinkhorn Tables 2-3 (CelebA 32x32, gender), SCALE={scale}", notes=notes)
    _figure(rows, "dpsinkhorn_table2_3", lambda r: r["method"], ("mlp", "cnn"),
            f"DP-Sinkhorn Tables 2-3, SCALE={scale}: dpgen vs paper")
    return rows


# ---- Tables 4-5 -----------------------------------------------------------------------------------
ABLATION_COLUMNS = ["table", "optimizer", "lr", "batch_size", "noise_scale", "fid", "fid_paper", "precision",
                    "recall", "class_mean", "spread_ratio", "logreg",
                    "logreg_paper", "mlp", "mlp_paper", "cnn", "cnn_paper", "epsilon_spent", "steps", "steps_per_s",
                    "wall_s", "status"]


def table_ablation(scale: str = "smoke", dataset: str = "mnist", data_root=None, generations=None,
                   extra_overrides: Sequence[str] = (), tables: Sequence[str] = ("4", "5"), **grid) -> List[Dict]:
    if dataset not in DATASET_PRESET:
        raise ValueError(f"--dataset: {dataset!r} is not one of {', '.join(DATASET_PRESET)}")
    specs = []
    for r in read_paper_table("dpsinkhorn_table4_5_ablations"):
        if r["table"] not in tables:
            continue
        opt = OPTIMIZER_NAME[r["optimizer"]]
        ov = [f"trainer.optimizer={opt}", f"trainer.batch_size={r['batch_size']}",
              f"method.noise_multiplier={r['noise_scale']}"]
        # the smoke/cpu scales fix their own lr except where the row varies it (Table 4)
        ov_lr = [f"trainer.lr={r['lr']}"]
        name = f"t{r['table']}_{opt}_lr{r['lr']}_b{r['batch_size']}_s{r['noise_scale']}"
        specs.append({"preset": f"dpsinkhorn_{DATASET_PRESET[dataset]}", "run_name": f"{dataset}/{name}",
                      "overrides": ov + ov_lr,
                      "row": {"table": r["table"], "optimizer": r["optimizer"], "lr": r["lr"],
                              "batch_size": int(r["batch_size"]), "noise_scale": float(r["noise_scale"]),
                              "fid_paper": r["FID"], "logreg_paper": r["LogReg"], "mlp_paper": r["MLP"],
                              "cnn_paper": r["CNN"]}})
    rows = _run_rows(specs, scale, "dpsinkhorn_table4_5", data_root, generations, extra_overrides, **grid)
    notes = [
        f"SCALE={scale}: {SCALES[scale]['overrides'] or 'the presets unchanged'} on top of "
        f"conf/experiment/dpsinkhorn_{DATASET_PRESET[dataset]}.yaml with each row's optimizer, lr, batch size and "
        "noise scale (the row's lr wins over the scale's). Every private run stops at epsilon = 10.",
        *table_notes("dpsinkhorn_tables", "ablation"),
        FIDELITY_NOTE,
    ]
    write_table("dpsinkhorn_table4_5", rows, ABLATION_COLUMNS,
                title=f"DP-Sinkhorn Tables 4-5 (ablations on {dataset}), SCALE={scale}", notes=notes)
    _figure(rows, "dpsinkhorn_table4_5",
            lambda r: f"T{r['table']} {r['optimizer']} lr {r['lr']} b {r['batch_size']} s {r['noise_scale']}",
            ("logreg", "mlp", "cnn"), f"DP-Sinkhorn Tables 4-5, SCALE={scale}: dpgen vs paper")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=["mnist", "celeba", "ablation"])
    ap.add_argument("--scale", choices=list(SCALES), default="smoke")
    ap.add_argument("--datasets", default="mnist,fashion_mnist", help="Table 1 datasets (mnist, fashion_mnist, "
                    "mnist10k); the ablation uses the first")
    ap.add_argument("--generations", type=int, default=None)
    ap.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                    help="Table 1's rows by name or folder-safe name (default: all): "
                         + "; ".join(f"{r!r} ({_slug(r)})" for r in TABLE1_ROWS))
    add_grid_arguments(ap, runs=False)
    args = ap.parse_args(argv)
    grid = {"reuse": args.reuse, "collect_only": args.collect_only}
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    for d in datasets:
        if d not in DATASET_PRESET:
            ap.error(f"--datasets: {d!r} is not one of {', '.join(DATASET_PRESET)}")
    if args.table == "mnist":
        try:
            wanted = row_names(args.rows)
        except ValueError as e:
            ap.error(str(e))
        return table1(args.scale, datasets, args.data_root, args.generations, rows=wanted, **grid)
    if args.table == "celeba":
        return table_celeba(args.scale, args.data_root, args.generations, **grid)
    return table_ablation(args.scale, datasets[0], args.data_root, args.generations, **grid)


if __name__ == "__main__":
    main()
