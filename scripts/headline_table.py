#!/usr/bin/env python
"""Issue 86's headline table: trained generators under both protocols, DPImageBench's reported rows beside them.

Reads the run folders under the given directories (a folder holding ``metrics.json``): generation runs (training:
epsilon, delta, steps, training time, their own LogReg / MLP / CNN under the papers' protocol; beside the ledger's
epsilon, the one a release states once the choice of its settings is counted, where larger: a selection among runs
on held-out records, or a preset's epsilon_with_settings_choice) and the
``task=evaluate`` runs made of them (``task.run=<training run>``), joined by the training run's path (a training
run evaluated with fewer classifiers takes LogReg / MLP / CNN from an evaluation that measured all three). An evaluation
with ``task.fid_samples`` set gives the papers' FID and precision / recall (generated vs the real test split); one
with ``task.protocol=dpimagebench`` gives DPImageBench's ResNet accuracy and FID / precision / recall against the
private training split, with its counts (below theirs on a CPU: the table says so in each row). An evaluation
through a public restorer (``task.restorer``) is its own row, marked "with public data", and so is one through a
contrast curve (``task.sharpen``) other than the one the training run's own evaluation used (its classifiers and FID
are of those samples, never mixed with the run's own).

    python scripts/headline_table.py <dir> [<dir> ...] [--out outputs/tables/headline]
        -> <out>.csv and <out>.md   (make table-headline RUNS="<dir> ...")

DPImageBench's reported numbers (Gong et al., CCS 2025, as quoted in issue 86: epsilon 10, delta
1 / (N ln N), no public data; FID of 60,000 synthetic vs the training set, ResNet accuracy) are printed beside ours:
they are not measured here.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: DPImageBench's reported (FID, accuracy %) at epsilon 10 without public data, MNIST and Fashion-MNIST
REPORTED = {"DP-MERF": {"mnist": (106.3, 81.3), "fashion_mnist": (106.4, 62.2)},
            "DP-NTK": {"mnist": (69.2, 91.3), "fashion_mnist": (120.5, 76.3)},
            "DP-Kernel": {"mnist": (38.9, 93.6), "fashion_mnist": (74.2, 70.0)},
            "GS-WGAN": {"mnist": (47.7, 75.3), "fashion_mnist": (97.2, 56.7)},
            "DP-GAN": {"mnist": (30.3, 92.7), "fashion_mnist": (76.9, 70.3)},
            "DPDM": {"mnist": (4.4, 97.7), "fashion_mnist": (17.1, 85.6)}}

COLUMNS = ["dataset", "row", "source", "public_data", "epsilon", "epsilon_with_choice", "delta", "steps", "train_minutes", "logreg", "mlp",
           "cnn", "class_mean", "fid_test", "fid_test_samples", "precision_test", "recall_test", "resnet_dib",
           "fid_train_dib", "precision_dib", "recall_dib", "dib_counts", "run"]


def _read(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _yaml_value(folder: Path, key: str) -> Optional[str]:
    """A top-level scalar of the run's config.yaml (no YAML parser needed for ``key: value`` lines)."""
    try:
        for line in (folder / "config.yaml").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def find_runs(dirs: List[Path], depth: int = 3) -> List[Path]:
    found = []
    for d in dirs:
        if not d.is_dir():
            raise SystemExit(f"{d} is not a directory: give folders that hold run folders (each with metrics.json)")
        for level in range(depth + 1):
            found += sorted(p.parent for p in d.glob("/".join(["*"] * level + ["metrics.json"])))
    return sorted(set(p.resolve() for p in found))


def _acc(downstream: Dict[str, Any], name: str) -> Optional[float]:
    v = downstream.get(name)
    return v.get("test_acc") if isinstance(v, dict) else v


def choice_epsilon(folder: Path, p: Dict[str, Any]) -> Optional[float]:
    """The epsilon a release of the run states once the choice of its settings is counted, where that is above the
    ledger's: a selection among several runs on held-out records (its selection.json's epsilon_total: the scored
    runs composed) or a preset whose settings were drawn on its records (epsilon_with_settings_choice)."""
    sel = _read(folder / "selection.json")
    vals = [v for v in (p.get("epsilon_with_settings_choice"), (sel or {}).get("epsilon_total"))
            if isinstance(v, (int, float))]
    spent = p.get("epsilon_spent")
    return max(vals) if vals and (not isinstance(spent, (int, float)) or max(vals) > spent) else None


def training_row(folder: Path, m: Dict[str, Any]) -> Dict[str, Any]:
    p = m.get("privacy") or {}
    ds = m.get("downstream") or {}
    own_full = (m.get("fid_samples") or 0) >= 10000
    name = _yaml_value(folder, "experiment_name") or m.get("method")
    return {"dataset": m.get("dataset"), "row": f"{name} (seed {m.get('seed')})",
            "source": "dpgen, measured", "public_data": "none", "epsilon": p.get("epsilon_spent"),
            "epsilon_with_choice": choice_epsilon(folder, p),
            "delta": p.get("delta"), "steps": m.get("steps"),
            "train_minutes": round(m["train_seconds"] / 60, 1) if m.get("train_seconds") else None,
            "logreg": _acc(ds, "logreg"), "mlp": _acc(ds, "mlp"), "cnn": _acc(ds, "cnn"),
            "class_mean": _acc(ds, "class_mean"),
            **({"fid_test": m.get("fid"), "fid_test_samples": m.get("fid_samples"),
                "precision_test": m.get("precision"), "recall_test": m.get("recall")} if own_full else {}),
            "run": str(folder)}


def evaluation_fields(folder: Path, m: Dict[str, Any]) -> Dict[str, Any]:
    s = {k: v.get("mean") for k, v in (m.get("summary") or {}).items() if isinstance(v, dict)}
    out: Dict[str, Any] = {}
    if ((m.get("fidelity_counts") or {}).get("fid_samples") or 0) >= 10000:
        out.update({"fid_test": s.get("fid"), "fid_test_samples": m["fidelity_counts"]["fid_samples"],
                    "precision_test": s.get("precision"), "recall_test": s.get("recall")})
        for k in ("logreg", "mlp", "cnn", "class_mean"):  # a restorer's row takes its classifiers from here
            if s.get(k) is not None:
                out[f"eval_{k}"] = s[k]
    if m.get("protocol") == "dpimagebench":
        out.update({"resnet_dib": s.get("dpimagebench_resnet"), "fid_train_dib": s.get("dpimagebench_fid"),
                    "precision_dib": s.get("dpimagebench_precision"), "recall_dib": s.get("dpimagebench_recall")})
        blocks = m.get("dpimagebench") or []
        if blocks and isinstance(blocks[0], dict):
            b = blocks[0]
            c = b.get("resnet") or {}  # the block's ResNet entry holds its depth and epochs
            out["dib_counts"] = (f"{b.get('n_synthetic')} synthetic, ResNet-{c.get('depth')} x {c.get('epochs')} ep, "
                                 f"FID vs {b.get('fid_real')} train")
        else:  # evaluations before the block was kept: the counts the evaluation was given
            cfg = (folder / "config.yaml").read_text() if (folder / "config.yaml").exists() else ""
            dib = cfg.split("dpimagebench:", 1)[1] if "dpimagebench:" in cfg else ""
            vals = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in dib.splitlines()[1:6]
                    if ":" in line}
            out["dib_counts"] = (f"{vals.get('n_synthetic')} synthetic, ResNet-{vals.get('depth')} x "
                                 f"{vals.get('epochs')} ep, FID vs {vals.get('fid_real')} train")
    return out


def build_rows(dirs: List[Path]) -> List[Dict[str, Any]]:
    trained: Dict[str, Dict[str, Any]] = {}
    curves: Dict[str, Any] = {}
    evaluations = []
    for folder in find_runs(dirs):
        m = _read(folder / "metrics.json")
        if not isinstance(m, dict):
            continue
        if m.get("task") == "generation":
            trained[str(folder)] = training_row(folder, m)
            curves[str(folder)] = m.get("sharpen")  # the curve its own evaluation drew through (None: none)
        elif m.get("task") == "evaluate" and m.get("run"):
            evaluations.append((folder, m))
    pristine = {k: dict(v) for k, v in trained.items()}  # a restorer's row starts from the training run alone
    restored: Dict[tuple, Dict[str, Any]] = {}
    for folder, m in evaluations:
        base = trained.get(str(Path(m["run"]).resolve()))
        if base is None:
            continue
        fields = evaluation_fields(folder, m)
        # the curve of its samples (evaluations written before they recorded it: the run's own)
        curve = m["sharpen"] if "sharpen" in m else curves.get(base["run"])
        if m.get("restorer") or curve != curves.get(base["run"]):
            # its own row: through a public restorer, or through a contrast curve (task.sharpen) other than the
            # one the training run was evaluated with; its classifiers are the evaluation's, never the run's own
            if m.get("restorer"):
                r = m["restorer"]
                key = (base["run"], "restorer", r.get("file"))
                label, public = (f"{base['row']} + restorer ({r.get('public_dataset')})",
                                 f"{r.get('public_dataset')} (train split, via the restorer)")
            else:
                key = (base["run"], "curve", json.dumps(curve, sort_keys=True))
                label = (f"{base['row']}, curve slope {curve['slope']:g} at {curve['at']:g}" if curve else
                         f"{base['row']}, no curve")
                public = pristine[base["run"]]["public_data"]
            row = restored.setdefault(key, {**pristine[base["run"]], "row": label, "public_data": public,
                                            **{k: None for k in ("fid_test", "fid_test_samples", "precision_test",
                                                                 "recall_test", "logreg", "mlp", "cnn",
                                                                 "class_mean")}})
            row.update({k.replace("eval_", ""): v for k, v in fields.items() if v is not None})
        else:  # the training run's own classifiers stand (the papers' protocol); the evaluation adds fidelity
            base.update({k: v for k, v in fields.items() if v is not None and not k.startswith("eval_")})
            # a training run evaluated with fewer classifiers (LogReg only, say) takes the evaluation's as one set:
            # the four cells of one row come from one draw of samples, never mixed between two
            own = [base.get(k) for k in ("logreg", "mlp", "cnn")]
            theirs = [fields.get(f"eval_{k}") for k in ("logreg", "mlp", "cnn")]
            if None in own and None not in theirs:
                base.update({k: fields.get(f"eval_{k}") for k in ("logreg", "mlp", "cnn", "class_mean")})
    rows = list(trained.values()) + list(restored.values())
    datasets = sorted({r["dataset"] for r in rows if r["dataset"]})
    for ds in datasets:
        for name, per in REPORTED.items():
            if ds in per:
                fid, acc = per[ds]
                rows.append({"dataset": ds, "row": name, "source": "DPImageBench, reported", "public_data": "none",
                             "epsilon": 10.0, "delta": "1/(N ln N)", "resnet_dib": acc, "fid_train_dib": fid,
                             "dib_counts": "60000 synthetic, ResNet (their classifiers, 50 ep), FID vs train"})
    return sorted(rows, key=lambda r: (r["dataset"] or "", r["source"] != "dpgen, measured", r["row"] or ""))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1 else (f"{v:.2f}" if abs(v) < 1000 else f"{v:,.0f}")
    return str(v)


def to_markdown(rows: List[Dict[str, Any]]) -> str:
    lines = ["# Headline generators under both protocols (issue 86)", "",
             "Papers' protocol: LogReg / MLP / CNN trained on synthetic samples, tested on the real test split; FID and "
             "precision / recall of generated images vs the real test images. DPImageBench's (`task.protocol="
             "dpimagebench`): their ResNet trained on synthetic images, its epoch chosen on synthetic validation; FID "
             "and precision / recall vs the PRIVATE training split (not covered by epsilon). Our DPImageBench cells "
             "use the counts in the last column (a CPU's, below theirs where it says so); theirs are reported, not "
             "measured here. Generated by `scripts/headline_table.py`.", ""]
    for ds in sorted({r["dataset"] for r in rows}):
        lines += [f"## {ds}", "",
                  "| row | source | public data | epsilon (delta) | steps | train min | LogReg | MLP | CNN | class mean "
                  "| FID vs test (n) | P / R vs test | ResNet (DIB) | FID vs train (DIB) | P / R (DIB) | DIB counts |",
                  "|" + "---|" * 16]
        for r in (r for r in rows if r["dataset"] == ds):
            e = r["epsilon"]  # a spent epsilon to 4 decimals (9.9974 is not 10)
            eps = f"{e:.4f} ({_fmt(r['delta'])})" if isinstance(e, float) and r["source"].startswith("dpgen") else \
                f"{_fmt(e)} ({_fmt(r['delta'])})"
            if isinstance(r.get("epsilon_with_choice"), (int, float)):  # the release's, its settings' choice counted
                eps += f"; {r['epsilon_with_choice']:.2f} with its settings' choice"
            fid = f"{_fmt(r.get('fid_test'))} ({_fmt(r.get('fid_test_samples'))})" if r.get("fid_test") else "-"
            lines.append("| " + " | ".join([
                _fmt(r["row"]), r["source"], _fmt(r["public_data"]), eps, _fmt(r.get("steps")),
                _fmt(r.get("train_minutes")), _fmt(r.get("logreg")), _fmt(r.get("mlp")), _fmt(r.get("cnn")),
                _fmt(r.get("class_mean")), fid,
                f"{_fmt(r.get('precision_test'))} / {_fmt(r.get('recall_test'))}", _fmt(r.get("resnet_dib")),
                _fmt(r.get("fid_train_dib")), f"{_fmt(r.get('precision_dib'))} / {_fmt(r.get('recall_dib'))}",
                _fmt(r.get("dib_counts"))]) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path, help="folders holding run folders (searched 3 levels down)")
    ap.add_argument("--out", default="outputs/tables/headline", help="output stem: <out>.csv and <out>.md")
    args = ap.parse_args(argv)
    from dpgen.utils.io import atomic_write_text

    rows = build_rows(args.dirs)
    if not any(r["source"] == "dpgen, measured" for r in rows):
        raise SystemExit(f"no generation run (a folder with metrics.json of task=generation) under "
                         f"{[str(d) for d in args.dirs]}: train one first, e.g. python run.py "
                         "experiment=dpkernel_mnist, and give the folder its runs are in")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    out = Path(args.out)
    atomic_write_text(out.with_suffix(".csv"), buf.getvalue())
    atomic_write_text(out.with_suffix(".md"), to_markdown(rows))
    print(f"wrote {out.with_suffix('.csv')} and .md ({sum(r['source'] == 'dpgen, measured' for r in rows)} "
          "measured rows)")


if __name__ == "__main__":
    main()
