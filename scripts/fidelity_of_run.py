#!/usr/bin/env python
"""Fidelity of finished generation runs, from their folders only (as ``dpgen sample`` reads them): the class-mean
baseline and intra-class spread ratio of the run's own evaluation set (its n_synthetic samples, seed + 2: the set
its classifiers were trained on) and FID with precision / recall / density / coverage of ``--fid-samples``
generated images against the whole real test split (dpgen.tasks.generation.fid_of_generator). Runs finished before
these numbers existed get them without training again; the classifiers' accuracies are read from metrics.json.
The generated images' features are saved under <run>/fid_partial/ as they are computed: a pass stopped part way
(60,000 images take about an hour on 2 CPU cores) continues there when the same command runs again.

    python scripts/fidelity_of_run.py <run folder> [<run folder> ...] [--fid-samples N] [--no-fid] [--out F.json]

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


def fidelity_of_run(run: Path, fid_samples=None, device: str = "cpu", progress: bool = True, fid: bool = True) -> dict:
    from omegaconf import open_dict

    from dpgen.data import as_tensors, load_split
    from dpgen.eval.fidelity import set_fidelity
    from dpgen.release import load_generator
    from dpgen.tasks.generation import fid_enabled, fid_of_generator, n_synthetic, synthetic_set

    t0 = time.time()
    cfg, metrics, gen, shape, classes, privacy = load_generator(run, device)
    with open_dict(cfg):
        cfg.task.fid_samples = fid_samples
        cfg.task.fid = "auto"
    ds = metrics.get("downstream") or {}
    out = {"run": str(run), "method": metrics.get("method"), "dataset": metrics.get("dataset"),
           "epsilon_spent": privacy.get("epsilon_spent") if privacy.get("private") else "inf",
           **{f"{k}_acc": ds[k]["test_acc"] for k in ("logreg", "mlp", "cnn") if isinstance(ds.get(k), dict)}}
    x_test, y_test = as_tensors(load_split(cfg.dataset, "test"))
    n_syn = int(ds.get("n_synthetic") or n_synthetic(cfg.task, int(cfg.dataset.n_train)))
    x_syn, y_syn = synthetic_set(gen, n_syn, int(cfg.seed) + 2, device)
    fid = set_fidelity(x_syn, y_syn, x_test, y_test, seed=int(cfg.seed))
    out.update(class_mean=fid["class_mean"]["test_acc"], spread_ratio=fid["spread_ratio"], spread=fid["spread"],
               n_synthetic=n_syn)
    if fid and fid_enabled(cfg):
        out.update(fid_of_generator(cfg, gen, shape, device, progress=progress, resume_dir=run / "fid_partial"))
    else:
        out["fid"] = ("n/a: --no-fid" if not fid else
                      "n/a: the FID Inception weights are not installed (make fid-weights)")
    out["seconds"] = round(time.time() - t0, 1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--fid-samples", type=int, default=None,
                    help="generated images for FID (default: the run's task.fid_samples rule, min(10000, 5 x test))")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-fid", action="store_true", help="the class-mean baseline and spread only (seconds)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from dpgen.utils.io import atomic_write_text
    from dpgen.utils.threads import ThreadShare

    results = []
    with ThreadShare("auto"):
        for run in args.runs:
            r = fidelity_of_run(run, args.fid_samples, args.device, fid=not args.no_fid)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k not in ("spread",)}, default=str), flush=True)
            if args.out:
                atomic_write_text(args.out, json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
