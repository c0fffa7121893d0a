#!/usr/bin/env python
"""Fidelity of finished generation runs, from their folders only (as ``dpgen sample`` reads them): the class-mean
baseline and intra-class spread ratio of the run's own evaluation set (its n_synthetic samples, seed + 2: the set
its classifiers were trained on) and FID with precision / recall / density / coverage of ``--fid-samples``
generated images against the whole real test split (dpgen.tasks.generation.fid_of_generator). Runs finished before
these numbers existed get them without training again; the classifiers' accuracies are read from metrics.json.
The generated images' features are saved under <run>/fid_partial/ as they are computed: a pass stopped part way
(60,000 images take about an hour on 2 CPU cores) continues there when the same command runs again.

    python scripts/fidelity_of_run.py <run folder> [<run folder> ...] [--fid-samples N] [--no-fid] [--out F.json]
        [--sharpen K [--sharpen-at T]] [--eval-models logreg,mlp,cnn] [--data-root DIR] [--device auto|cpu|cuda]

``--sharpen K`` measures the run's samples through model.sharpen's contrast curve of slope K (0: none) in place of
the run's own setting (the curve its selection.json chose on held-out records, else its model.sharpen); the accuracies in metrics.json are then not of these images and are left out, unless
``--eval-models`` trains those classifiers again on the run's evaluation set (as the run did: its n_synthetic
samples, seed + 2, tested on the real test split).

Prints one line per run and writes a JSON list (``--out``, atomically).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def fidelity_of_run(run: Path, fid_samples=None, device=None, progress: bool = True, fid: bool = True,
                    sharpen=None, eval_models=None, data_root=None) -> dict:
    """``device`` None / "auto": the run's own (where its evaluation drew its set) when this machine has it, else
    the CPU. Drawn on another device type than the run's, the set is not the run's own (CUDA and CPU generators
    draw differently): metrics.json's accuracies are then left out, as with another curve."""
    import torch
    from omegaconf import open_dict

    from dpgen.data import as_tensors, load_split
    from dpgen.eval.fidelity import set_fidelity
    from dpgen.release import load_generator, sampling_device
    from dpgen.tasks.generation import evaluate_generator, fid_enabled, fid_of_generator, n_synthetic, synthetic_set

    from dpgen.tasks.finished_run import run_curve

    t0 = time.time()
    run = Path(run)
    mf = run / "metrics.json"
    own_device = (json.loads(mf.read_text()).get("device") or "cpu") if mf.exists() else "cpu"
    if device in (None, "auto"):
        device = sampling_device({"device": own_device})
    own_set = torch.device(device).type == torch.device(own_device).type
    sharpen, selection = run_curve(run, sharpen)  # the curve chosen on held-out records, as released, unless given
    cfg, metrics, gen, shape, classes, privacy = load_generator(run, device, sharpen=sharpen, data_root=data_root)
    with open_dict(cfg):
        cfg.task.fid_samples = fid_samples
        cfg.task.fid = "auto"
    ds = metrics.get("downstream") or {}
    out = {"run": str(run), "method": metrics.get("method"), "dataset": metrics.get("dataset"),
           "epsilon_spent": privacy.get("epsilon_spent") if privacy.get("private") else "inf",
           "sharpen": [cfg.model.get("sharpen"), cfg.model.get("sharpen_at", 0.5)] if cfg.model.get("sharpen") else None,
           **({"sharpen_from": "selection.json (chosen on held-out records at epsilon "
                               f"{selection['epsilon']:g})"} if selection else {}),
           "evaluation_set": ("the run's own (n_synthetic, seed + 2, " + torch.device(device).type + ")" if own_set
                              else f"drawn on {torch.device(device).type}, not the run's own (it evaluated on "
                                   f"{own_device}): its accuracies are left out unless --eval-models"),
           **{f"{k}_acc": ds[k]["test_acc"] for k in ("logreg", "mlp", "cnn")
              if isinstance(ds.get(k), dict) and sharpen is None and not eval_models and own_set}}
    if eval_models:  # the classifiers again, on this run's evaluation set as drawn now
        with open_dict(cfg):
            cfg.task.eval_models = list(eval_models)
            cfg.trainer.progress = bool(progress)
        acc = evaluate_generator(cfg, gen, shape, device, n_private=int(metrics.get("n_private")
                                                                          or cfg.dataset.n_train))
        out.update({f"{k}_acc": acc[k]["test_acc"] for k in eval_models if isinstance(acc.get(k), dict)})
    x_test, y_test = as_tensors(load_split(cfg.dataset, "test"))
    # the set the accuracies above come from: with --eval-models, the one just drawn (task.n_synthetic), not the
    # run's own evaluation set (2,000 samples when it trained no classifier)
    n_syn = int((None if eval_models else ds.get("n_synthetic")) or n_synthetic(cfg.task, int(cfg.dataset.n_train)))
    x_syn, y_syn = synthetic_set(gen, n_syn, int(cfg.seed) + 2, device)
    sf = set_fidelity(x_syn, y_syn, x_test, y_test, seed=int(cfg.seed))
    out.update(class_mean=sf["class_mean"]["test_acc"], spread_ratio=sf["spread_ratio"], spread=sf["spread"],
               n_synthetic=n_syn)
    if fid and fid_enabled(cfg):
        out.update(fid_of_generator(cfg, gen, shape, device, progress=progress, resume_dir=run / "fid_partial"))
    else:
        out["fid"] = ("n/a: --no-fid" if not fid else
                      "n/a: the FID Inception weights are not installed (make fid-weights)")
    out["seconds"] = round(time.time() - t0, 1)
    return out


def main(argv=None):
    from dpgen.tasks.finished_run import add_data_root_argument, add_sharpen_arguments, sharpen_from_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--fid-samples", type=int, default=None,
                    help="generated images for FID (default: the run's task.fid_samples rule, min(10000, 5 x test))")
    ap.add_argument("--device", default="auto", help="auto (default): the run's own device where this machine has "
                    "it (its evaluation set is then the one drawn again), else cpu")
    ap.add_argument("--no-fid", action="store_true", help="the class-mean baseline and spread only (seconds)")
    add_sharpen_arguments(ap)
    add_data_root_argument(ap)
    ap.add_argument("--eval-models", default=None, help="comma-separated, e.g. cnn or logreg,mlp,cnn: train "
                    "these classifiers again on the run's evaluation set (needed for accuracies with --sharpen)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    models = [m for m in (args.eval_models or "").split(",") if m]
    bad = [m for m in models if m not in ("logreg", "mlp", "cnn")]
    if bad:
        ap.error(f"--eval-models {args.eval_models}: unknown {bad}; choose from logreg, mlp, cnn")
    sharpen = sharpen_from_args(ap, args)
    from dpgen.utils.io import atomic_write_text
    from dpgen.utils.threads import ThreadShare

    results = []
    with ThreadShare("auto"):
        for run in args.runs:
            r = fidelity_of_run(run, args.fid_samples, args.device, fid=not args.no_fid, sharpen=sharpen,
                                eval_models=models, data_root=args.data_root)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k not in ("spread",)}, default=str), flush=True)
            if args.out:
                atomic_write_text(args.out, json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
