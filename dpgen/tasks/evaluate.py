"""``task=evaluate``: the papers' downstream protocol on a released synthetic set.

    python run.py task=evaluate task.synthetic=<run>/release/synthetic.npz dataset=mnist seed=0

LogReg / MLP / CNN (``task.eval_models``) are trained on the synthetic set (``x``, ``y`` of the ``.npz``
that ``dpgen sample`` writes, or any set in that format) and tested on the real test split of
``dataset``, exactly as a generation run evaluates its generator (``dpgen.eval.evaluate_downstream``, the
same seed), so a set released with the run's own ``n`` and ``seed`` gives the run's training-time
accuracy again. It reads the public test split only, never a training split: DPImageBench-style
comparisons of released sets. Writes ``metrics.json`` in the run folder, with the set's ``privacy``: the
datasheet beside it (``datasheet.json``, written by ``dpgen sample`` from the privacy recorded in the
checkpoint it sampled) when that datasheet names this very file (its SHA-256), else "unknown".
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from dpgen.tasks.registry import TASKS


def load_synthetic(path) -> tuple:
    """(x float32, y int64) of a released set, or a ValueError naming the file and what it lacks."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"task.synthetic={path}: no such file (dpgen sample <run folder> writes "
                                "<run>/release/synthetic.npz)")
    try:
        with np.load(path) as f:
            if "x" not in f or "y" not in f:
                raise ValueError(f"task.synthetic={path} holds {sorted(f.files)}: it needs arrays x (samples) and y "
                                 "(integer labels)")
            x, y = torch.from_numpy(f["x"].astype(np.float32)), torch.from_numpy(f["y"].astype(np.int64))
    except (OSError, EOFError, ValueError) as e:
        if isinstance(e, ValueError) and "task.synthetic" in str(e):
            raise
        raise ValueError(f"task.synthetic={path} cannot be read as .npz ({type(e).__name__}: {e}): write it again "
                         "with dpgen sample") from None
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"task.synthetic={path}: {len(x)} samples and {len(y)} labels")
    return x, y


def released_privacy(path) -> Dict[str, Any]:
    """The privacy of a released set: its datasheet's (``datasheet.json`` in the same folder) when the datasheet
    describes this very file (the same SHA-256), else a statement that it is unknown."""
    import hashlib
    import json

    path = Path(path)
    sheet_path = path.parent / "datasheet.json"
    if not sheet_path.exists():
        return {"known": False, "why": f"no datasheet.json beside {path.name} (dpgen sample writes one)"}
    try:
        sheet = json.loads(sheet_path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"known": False, "why": f"{sheet_path} cannot be read"}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if sheet.get("synthetic_sha256") != digest:
        return {"known": False, "why": f"{sheet_path} does not describe this file (another SHA-256, or written by an "
                                       "older dpgen sample)"}
    keys = ("private", "epsilon_spent", "delta", "epsilon_budget", "accountant", "neighbouring_relation",
            "guarantee_holds", "not_covered", "training_steps", "method", "dataset", "checkpoint_sha256")
    return {"known": True, "datasheet": str(sheet_path), **{k: sheet.get(k) for k in keys}}


@TASKS.register("evaluate")
def run_evaluate(cfg, output_dir=None) -> Dict[str, Any]:
    from dpgen.data import as_tensors, load_split
    from dpgen.eval import evaluate_downstream
    from dpgen.utils.device import resolve_device
    from dpgen.utils.io import write_json
    from dpgen.utils.run_dir import start_run_dir
    from dpgen.utils.threads import ThreadShare

    t0 = time.time()
    task = cfg.task
    x, y = load_synthetic(task.synthetic)
    test = load_split(cfg.dataset, "test")  # the public test split only
    X_test, Y_test = as_tensors(test)
    shape = tuple(x.shape[1:])
    if tuple(X_test.shape[1:]) != shape:
        raise ValueError(f"task.synthetic={task.synthetic} holds samples of shape {shape}; dataset={cfg.dataset.name}'s "
                         f"test split has {tuple(X_test.shape[1:])}: evaluate it on the dataset it was trained for")
    out = start_run_dir(cfg, output_dir, "evaluate")
    device = str(resolve_device(cfg.trainer.device))
    # this process's share of the cores (trainer.threads), as a training run's evaluation has: with torch's default
    # of every core, an MLP beside another job took 1,191 s against 10.9 s inside a training run (issue 55)
    with ThreadShare(cfg.trainer.threads):
        res = evaluate_downstream(x, y, X_test, Y_test, models=tuple(task.eval_models),
                                  image_shape=shape if len(shape) == 3 else None, max_epochs=task.eval_max_epochs,
                                  seed=cfg.seed, device=device, progress=bool(cfg.trainer.progress),
                                  logreg_solver=task.logreg_solver)
        if res.get("n_classes"):  # the class-mean baseline and intra-class spread of the released set
            from dpgen.eval.fidelity import set_fidelity

            res.update(set_fidelity(x, y, X_test, Y_test, seed=cfg.seed))
    privacy = released_privacy(task.synthetic)
    metrics = {"task": "evaluate", "synthetic": str(task.synthetic), "dataset": cfg.dataset.name, "seed": cfg.seed,
               "n_synthetic": int(len(x)), "n_test": int(X_test.shape[0]), "privacy": privacy, "downstream": res,
               "wall_seconds": round(time.time() - t0, 2)}
    write_json(out / "metrics.json", metrics)
    print(f"\nevaluate {task.synthetic} on {cfg.dataset.name}'s test split ({metrics['n_test']:,} images), "
          f"{metrics['n_synthetic']:,} synthetic samples:")
    for name, r in res.items():
        if isinstance(r, dict) and "test_acc" in r:
            print(f"  {name}: {r['test_acc']:.2f}%" + (" (nearest synthetic class mean: the baseline)"
                                                      if name == "class_mean" else ""))
    if "spread_ratio" in res:
        print(f"  intra-class spread, synthetic / real test: {res['spread_ratio']:.3f}")
    if privacy["known"] and not privacy.get("private"):
        print("  the set's privacy (its datasheet): NOT PRIVATE (trained without a privacy mechanism)")
    elif privacy["known"] and isinstance(privacy.get("epsilon_spent"), (int, float)):
        print(f"  the set's privacy (its datasheet): epsilon {privacy['epsilon_spent']:.4f} at delta {privacy['delta']} "
              f"after {privacy['training_steps']} steps ({privacy['method']} on {privacy['dataset']})")
    else:
        print(f"  the set's privacy: unknown ({privacy['why']})")
    print(f"  files: {out / 'metrics.json'}")
    return metrics


__all__ = ["load_synthetic", "run_evaluate"]
