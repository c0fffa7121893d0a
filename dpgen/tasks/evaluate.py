"""``task=evaluate``: the papers' downstream protocol on a released synthetic set, or on G synthetic sets of a
finished run's generator (the papers' "5 runs of generation").

    python run.py task=evaluate task.synthetic=<run>/release/synthetic.npz dataset=mnist seed=0
    python run.py task=evaluate task.run=<finished generation run> task.generations=5

With ``task.run``, generation g is a synthetic set drawn from the run's evaluated weights (its checkpoint, read as
``dpgen sample`` reads it: post-processing, nothing charged) with seed ``seed + 1000 g``, evaluated by the run's own
protocol (its ``task.*``: classifiers, synthetic count, FID): generation 0 is the run's own evaluation again. The
metrics hold each generation's numbers, their mean and std, and the run's privacy. The tables' generation runs
(``dpgen.tables.grid.evaluate_run``) evaluate their generations through :class:`RunGenerations`.

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


class RunGenerations:
    """The synthetic sets of one finished run's generator: ``evaluate(g)`` draws generation g (seed + 1000 g) and
    evaluates it with ``cfg``'s protocol, in this process's share of the cores; the generator is loaded once, on the
    first call, from the run's files as a release reads them."""

    def __init__(self, cfg, run_dir, sharpen=None, restorer=None) -> None:
        self.cfg, self.run_dir, self.sharpen = cfg, Path(run_dir), sharpen  # sharpen: (slope, centre) or the run's
        self.restorer = restorer  # a restorer file learnt on public data (dpgen.models.restorer), in place of a curve
        self.restored: Dict[str, Any] = {}  # what that restorer learnt, once loaded
        self._loaded = None

    def _generator(self):
        if self._loaded is None:
            from dpgen.tasks.finished_run import load_generator
            from dpgen.utils.device import resolve_device

            device = resolve_device(self.cfg.trainer.device)
            from dpgen.models.restorer import NO_CURVE, restored

            # a restorer maps the band, never a curve's output
            sharpen = NO_CURVE if self.restorer else self.sharpen
            _, m, gen, shape, _, privacy = load_generator(self.run_dir, str(device), sharpen=sharpen)
            if self.restorer:
                gen, self.restored = restored(gen, self.restorer, str(self.cfg.dataset.name), self.cfg.model, shape,
                                              device)
            self._loaded = (gen, shape, device, int(m.get("n_private") or self.cfg.dataset.n_train), m, privacy)
        return self._loaded

    @property
    def run_metrics(self) -> Dict[str, Any]:
        return self._generator()[4]

    @property
    def privacy(self) -> Dict[str, Any]:
        return self._generator()[5]

    def evaluate(self, g: int) -> Dict[str, Any]:
        import dataclasses

        from dpgen.tasks.generation import evaluate_generator, fid_enabled, fid_of_generator
        from dpgen.utils.threads import ThreadShare

        gen, shape, device, n, _, _ = self._generator()
        c = dataclasses.replace(self.cfg, seed=self.cfg.seed + 1000 * g)
        # this process's share of the cores, as during training: without it two table drivers side by side
        # evaluate with torch's default threads each and oversubscribe
        with ThreadShare(self.cfg.trainer.threads):
            out = {"downstream": evaluate_generator(c, gen, shape, device, n_private=n)}
            if fid_enabled(self.cfg):
                # saved as computed: a paper-scale table's 60,000-image pass per generation survives a stop
                out.update(fid_of_generator(c, gen, shape, device, progress=bool(c.trainer.progress),
                                            resume_dir=self.run_dir / "fid_partial"))
            if self.cfg.task.protocol == "dpimagebench":  # FID / precision / recall vs the PRIVATE training split
                from dpgen.data import as_tensors, load_split
                from dpgen.eval import dpimagebench
                from dpgen.tasks.generation import synthetic_set

                test = as_tensors(load_split(self.cfg.dataset, "test"))
                out["dpimagebench"] = dpimagebench.evaluate(c, gen, shape, device, n, test, synthetic_set,
                                                            fid_enabled(self.cfg), progress=bool(c.trainer.progress))
        return out


def dpimagebench_row(b) -> Dict[str, float]:
    """A generation's DPImageBench numbers as flat keys (``dpimagebench_fid``, ``_precision``, ``_recall``,
    ``_resnet``); empty when that protocol did not run."""
    if not isinstance(b, dict):
        return {}
    row = {f"dpimagebench_{k}": b[k] for k in ("fid", "precision", "recall") if isinstance(b.get(k), (int, float))}
    acc = (b.get("resnet") or {}).get("test_acc")
    return {**row, **({"dpimagebench_resnet": acc} if isinstance(acc, (int, float)) else {})}


def _run_config(run: Path):
    """The finished run's own validated config (its ``config.yaml``): its dataset, seed and evaluation protocol."""
    from omegaconf import OmegaConf, open_dict

    from dpgen.config import compose_raw, validate

    f = Path(run) / "config.yaml"
    if not f.exists():
        raise FileNotFoundError(f"task.run={run}: {f} is missing: give the folder of a finished generation run")
    saved = OmegaConf.load(f)
    # the schemas its method, dataset and task choose, with the run's own values on top
    base = compose_raw([f"method={saved.method.name}", f"dataset={saved.dataset.name}", f"task={saved.task.name}"])
    # the loader's free options the run added with + (+dataset.options.resize=20): a typed free dict, which the
    # composed tree's struct flag would refuse; every other key still has to be declared
    with open_dict(base.dataset.options):
        merged = OmegaConf.merge(base, saved)
    return validate(merged)


def evaluation_folder(cfg, output_dir) -> Path:
    """task=evaluate's folder, created with its config.yaml; refused when it holds another task's results (a
    training run's checkpoints or metrics.json: e.g. hydra.run.dir set to the evaluated run's own folder), which
    this evaluation's config.yaml and metrics.json would overwrite."""
    import json

    from dpgen.utils.run_dir import run_folder, start_run_dir

    folder = run_folder(output_dir, "evaluate")
    task = None
    if (folder / "metrics.json").exists():
        try:
            task = json.loads((folder / "metrics.json").read_text()).get("task")
        except (OSError, ValueError):
            task = "unknown"
    held = "checkpoints/" if (folder / "checkpoints").exists() else f"metrics.json of a task={task} run"
    if (folder / "checkpoints").exists() or task not in (None, "evaluate"):
        raise ValueError(f"hydra.run.dir={folder} holds another run's results ({held}): task=evaluate would "
                         "overwrite its config.yaml and metrics.json. Give the evaluation its own folder (another "
                         "hydra.run.dir, or none)")
    return start_run_dir(cfg, output_dir, "evaluate")


def _sharpen_of(rcfg, override):
    """The contrast curve the evaluated samples went through (model.sharpen), or None."""
    k, at = override if override is not None else (rcfg.model.sharpen, rcfg.model.sharpen_at)
    return {"slope": float(k), "at": float(at)} if k else None


def say_generations_estimate(rcfg, generations: int) -> None:
    """Before evaluating ``generations`` synthetic sets for more than a minute on a CPU: what, and about how long
    (the run's own protocol, as its training-time evaluation estimated it; the declared sizes only)."""
    from dpgen.tasks.generation import EVAL_NOTICE_S, GenerationTask, _duration

    task = GenerationTask()
    task.n_private, task.shape = int(rcfg.dataset.n_train), tuple(int(s) for s in rcfg.dataset.shape or ())
    secs, what = task.evaluation_estimate(rcfg, evaluating=True)  # its hints name task=evaluate's overrides
    if secs * generations > EVAL_NOTICE_S and what:
        print(f"[dpgen] evaluation: {generations} synthetic set(s), each {what}: about "
              f"{_duration(secs * generations)} on this CPU", flush=True)


def asked_protocol(cfg, rcfg):
    """The finished run's config ``rcfg`` with its evaluation settings replaced by what this ``task=evaluate``
    (``cfg``) asks for: other classifiers, a FID count (the full protocol against the whole test split, computed
    even where the run's own evaluation had FID off, task.fid=false), another protocol and its counts. The CPU
    threads are this evaluation's (trainer.threads, auto by default), never the run's: a run trained on one thread
    beside another was evaluated later on one thread of idle cores."""
    import dataclasses

    t = rcfg.task
    if cfg.task.eval_models is not None:  # other classifiers than the run's own protocol trained
        t = dataclasses.replace(t, eval_models=list(cfg.task.eval_models))
    if cfg.task.fid_samples is not None:
        t = dataclasses.replace(t, fid_samples=int(cfg.task.fid_samples), fidelity="full", fid_real=None, fid=True)
    if cfg.task.protocol is not None:  # the protocol (and DPImageBench's counts) asked for here
        t = dataclasses.replace(t, protocol=cfg.task.protocol, dpimagebench=cfg.task.dpimagebench)
    return dataclasses.replace(rcfg, task=t, trainer=dataclasses.replace(rcfg.trainer, threads=cfg.trainer.threads))


def evaluate_generations(cfg, output_dir=None) -> Dict[str, Any]:
    """``task.run`` with ``task.generations``: G synthetic sets of the run's generator, each evaluated as the run's
    own evaluation was; metrics.json holds every generation's numbers, their mean / std and the run's privacy."""
    import statistics

    from dpgen.tasks.finished_run import run_curve
    from dpgen.utils.io import write_json

    t0 = time.time()
    run = Path(cfg.task.run)
    rcfg = asked_protocol(cfg, _run_config(run))
    # task.sharpen replaces the run's own curve (0: off); the composed model group is the default data set's (its
    # tuned file may set a curve), never the run's, so it is not read
    sharpen = (cfg.task.sharpen, cfg.task.sharpen_at) if cfg.task.sharpen is not None else None
    # without an override, a curve chosen on the run's held-out records (selection.json) is the run's curve, as
    # its release draws it; its own epsilon is stated beside the weights'
    sharpen, selection = run_curve(run, sharpen)
    if cfg.task.restorer and selection:
        from dpgen.models.restorer import beside_selection

        raise ValueError("task." + beside_selection(cfg.task.restorer, run))
    gens = RunGenerations(rcfg, run, sharpen, restorer=cfg.task.restorer)
    out = evaluation_folder(cfg, output_dir)
    say_generations_estimate(rcfg, int(cfg.task.generations))
    per_gen, blocks = [], []
    for g in range(int(cfg.task.generations)):
        print(f"[dpgen] generation {g + 1} of {cfg.task.generations}: sampling and evaluating", flush=True)
        m = gens.evaluate(g)
        if isinstance(m.get("dpimagebench"), dict):  # its counts, epochs kept and what is below theirs, per generation
            blocks.append(m["dpimagebench"])
        ds = m["downstream"]
        per_gen.append({**{k: ds[k]["test_acc"] for k in ("logreg", "mlp", "cnn", "class_mean")
                           if isinstance(ds.get(k), dict)},
                        **({"spread_ratio": ds["spread_ratio"]} if "spread_ratio" in ds else {}),
                        **{k: m[k] for k in ("fid", "precision", "recall", "density", "coverage")
                           if isinstance(m.get(k), (int, float))},
                        **dpimagebench_row(m.get("dpimagebench"))})
    keys = list(dict.fromkeys(k for r in per_gen for k in r))
    summary = {k: {"mean": round(statistics.mean([r[k] for r in per_gen]), 4),
                   "std": round(statistics.stdev([r[k] for r in per_gen]), 4) if len(per_gen) > 1 else 0.0}
               for k in keys}
    privacy, restored = gens.privacy, {}
    if gens.restorer:
        from dpgen.models.restorer import public_data_statement

        restored = {"restorer": gens.restored, "public_data": public_data_statement(gens.restored)}
    if rcfg.task.protocol == "dpimagebench":  # its FID / precision / recall read the private training records
        from dpgen.privacy.report import train_split_not_covered

        privacy = train_split_not_covered(dict(privacy), "dpimagebench")
    metrics = {"task": "evaluate", "run": str(run), "dataset": rcfg.dataset.name, "seed": rcfg.seed,
               "generations": len(per_gen), "eval_models": list(rcfg.task.eval_models), "per_generation": per_gen,
               "sharpen": None if gens.restorer else _sharpen_of(rcfg, sharpen), "summary": summary,
               "protocol": rcfg.task.protocol, "fidelity_counts": {"fid_samples": rcfg.task.fid_samples,
                                                                 "fidelity": rcfg.task.fidelity},
               **restored,
               **({"dpimagebench": blocks} if blocks else {}),
               "privacy": privacy, "wall_seconds": round(time.time() - t0, 2),
               **({"selection": {k: selection.get(k) for k in ("chosen", "epsilon", "delta", "epsilon_total",
                                                               "composition", "runs") if k in selection}}
           if selection else {})}
    write_json(out / "metrics.json", metrics)
    print(f"\nevaluate {run}: {len(per_gen)} synthetic sets of its generator (seed {rcfg.seed} + 1000 g), the run's "
          "own protocol; post-processing of its released weights, nothing charged:")
    for k, v in summary.items():
        print(f"  {k}: {v['mean']:.4g} +- {v['std']:.3g}")
    p = gens.privacy
    if gens.restorer:
        print(f"  through the restorer {gens.restorer}, learnt on the public set {gens.restored.get('public_dataset')}: "
              "results 'with public data'")
    if blocks:
        from dpgen.eval.dpimagebench import summary_lines

        for line in summary_lines(blocks[0]):  # generation 1's counts (every generation's: metrics.json)
            print(line)
        print("  DPImageBench's FID, precision and recall (dpimagebench_*) are computed from the private training "
              "records: epsilon does not cover them (metrics.json's privacy.not_covered)")
    if p.get("private"):
        print(f"  the weights' privacy: epsilon {float(p['epsilon_spent']):.4f} at delta {p.get('delta')}")
        if selection:
            c = selection["chosen"]
            how = (f"{len(selection['runs'])} scored runs composed, parallel with the selection"
                   if "runs" in selection else "parallel composition")
            if "carried" in selection:  # the runs' settings were chosen earlier on these records
                how = (f"{len(selection.get('runs', [None]))} scored run(s), the earlier choices their settings carry "
                       "and every selection, composed sequentially")
            print(f"  the curve (slope {c['sharpen']:g} at {c['sharpen_at']:g}) was chosen on the run's held-out "
                  f"records at epsilon {selection['epsilon']:g} (selection.json); the release's epsilon: "
                  f"{selection['epsilon_total']:.4f} ({how})")
    print(f"  files: {out / 'metrics.json'}")
    return metrics


@TASKS.register("evaluate")
def run_evaluate(cfg, output_dir=None) -> Dict[str, Any]:
    from dpgen.data import as_tensors, load_split
    from dpgen.eval import evaluate_downstream
    from dpgen.utils.device import resolve_device
    from dpgen.utils.io import write_json
    from dpgen.utils.threads import ThreadShare

    if cfg.task.run:
        return evaluate_generations(cfg, output_dir)
    t0 = time.time()
    task = cfg.task
    x, y = load_synthetic(task.synthetic)
    test = load_split(cfg.dataset, "test")  # the public test split only
    X_test, Y_test = as_tensors(test)
    shape = tuple(x.shape[1:])
    if tuple(X_test.shape[1:]) != shape:
        raise ValueError(f"task.synthetic={task.synthetic} holds samples of shape {shape}; dataset={cfg.dataset.name}'s "
                         f"test split has {tuple(X_test.shape[1:])}: evaluate it on the dataset it was trained for")
    out = evaluation_folder(cfg, output_dir)
    device = str(resolve_device(cfg.trainer.device))
    # this process's share of the cores (trainer.threads), as a training run's evaluation has: with torch's default
    # of every core, an MLP beside another job took 1,191 s against 10.9 s inside a training run (issue 55)
    with ThreadShare(cfg.trainer.threads):
        res = evaluate_downstream(x, y, X_test, Y_test, models=tuple(task.eval_models or ("logreg", "mlp")),
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


__all__ = ["RunGenerations", "asked_protocol", "evaluate_generations", "load_synthetic", "run_evaluate"]
