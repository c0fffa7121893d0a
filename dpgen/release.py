"""``dpgen sample <run folder> n=60000``: release a synthetic data set from a trained private generator.

Sampling is post-processing of the generator, which the run's ledger accounts: this reads the run's
``config.yaml``, ``metrics.json`` and ``checkpoints/last.pt`` only, never the private data (the record
shape and class count come from the config's declared ``dataset.shape`` / ``dataset.num_classes``).
The epsilon, steps and privacy report stated are those recorded IN the checkpoint whose weights are
sampled (dpgen.train.run_record), and the training-time accuracy is quoted only when ``metrics.json``
describes that same step: a folder whose ``metrics.json`` describes other weights (a resumed run that has
not finished) is refused. It writes into ``<run>/release/`` (or ``out=DIR``), atomically:

* ``synthetic.npz``: ``x`` (float32, n x C x H x W in [0, 1]) and ``y`` (int64 class labels);
* ``samples.png``: a grid, one row per class, each row labelled with its class;
* ``DATASHEET.md`` and ``datasheet.json``: method, dataset, epsilon and delta spent, accountant,
  neighbouring relation, what the guarantee does not cover, the checkpoint's SHA-256, dpgen's version and
  commit, the downstream accuracy measured at training time, and how to evaluate the set again.

With the default ``seed`` (the run's ``seed + 2``) and ``n`` equal to the run's ``task.n_synthetic``, the
released set is the one the run's own evaluation trained its classifiers on, so ``python run.py
task=evaluate task.synthetic=<run>/release/synthetic.npz dataset=<the run's dataset> seed=<the run's seed>``
gives the training-time accuracy again. The samples depend on the device's random generator, so the
release samples on the device the run trained on (``metrics.json``'s ``device``) when this machine has it,
else on the CPU, and the datasheet says whether the set is the training-time one. A run whose guarantee
does not hold (a non-private method, ``guarantee_holds: false``) is refused unless ``allow_non_private=true``.
``restorer=<file.pt>``: the samples pass through a restorer learnt on a public set (dpgen.models.restorer) in place
of the curve; the datasheet names that set ("with public data").
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from dpgen.tasks.finished_run import ReleaseError, load_generator, read_selection, run_curve  # noqa: F401  (the release's API)

USAGE = ("usage: dpgen sample <run folder> [n=<samples>] [seed=<int>] [out=<folder>] [device=cpu|cuda] "
         "[allow_non_private=true] [restorer=<file.pt>]")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _commit() -> Optional[str]:
    import subprocess

    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip() or None if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("dpgen")
    except Exception:  # a checkout that is not installed
        return "unknown (not installed)"


def draw(gen, n: int, seed: int, device: str = "cpu"):
    """``n`` samples in chunks of 1,000 from a generator seeded ``seed``: the procedure (and, on the same
    device, the samples) of the run's own downstream evaluation (``tasks.generation.synthetic_set``)."""
    from dpgen.tasks.generation import synthetic_set

    return synthetic_set(gen, n, seed, torch.device(device))


def labelled_grid(x: torch.Tensor, y: torch.Tensor, num_classes: int, per_class: int = 10, scale: int = 3) -> bytes:
    """PNG bytes: one row per class (its first ``per_class`` samples), the class written left of the row."""
    from PIL import Image, ImageDraw
    from torchvision.utils import make_grid

    rows, names = [], []
    classes = range(num_classes) if num_classes else [None]
    for c in classes:
        sel = x[y == c][:per_class] if c is not None else x[:per_class]
        if len(sel) < per_class:  # pad with blanks
            sel = torch.cat([sel, torch.ones(per_class - len(sel), *x.shape[1:])])
        rows.append(sel)
        names.append("" if c is None else str(c))
    grid = make_grid(torch.cat(rows).clamp(0, 1), nrow=per_class, padding=1, pad_value=1.0)
    arr = (grid * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    img = Image.fromarray(arr[..., 0] if x.shape[1] == 1 else arr).convert("RGB")
    img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    margin = 28
    canvas = Image.new("RGB", (img.width + margin, img.height), "white")
    canvas.paste(img, (margin, 0))
    d = ImageDraw.Draw(canvas)
    row_h = img.height / len(rows)
    for i, name in enumerate(names):
        d.text((6, int(i * row_h + row_h / 2 - 5)), name, fill="black")
    buf = io.BytesIO()
    canvas.save(buf, format="png")
    return buf.getvalue()


def datasheet(cfg, metrics: Dict[str, Any], run: Path, n: int, seed: int, device: str, files: Dict[str, str],
              privacy: Dict[str, Any]) -> Dict:
    """``privacy``: the report recorded in the checkpoint whose weights were sampled (with its ``checkpoint_step``),
    read through :class:`dpgen.privacy.report.PrivacyReport` (a private record without its epsilon or delta is
    refused; a noise fact it does not state is null, never 0)."""
    from dpgen.privacy.report import PrivacyReport

    p = privacy
    rep = PrivacyReport.of(p, metrics.get("method"))
    ds = metrics.get("downstream") or {}
    acc = {k: v.get("test_acc") for k, v in ds.items() if isinstance(v, dict) and "test_acc" in v and k != "class_mean"}
    fidelity = {k: metrics.get(k) for k in ("fid", "precision", "recall", "density", "coverage", "fid_protocol")
                if metrics.get(k) is not None}
    fidelity.update({k: (ds[k]["test_acc"] if k == "class_mean" else ds[k]) for k in ("class_mean", "spread_ratio")
                     if k in ds})
    # the same n, seed and device type draw the same samples (a CUDA and a CPU generator differ)
    same = (n == ds.get("n_synthetic") and seed == int(cfg.seed) + 2
            and torch.device(device).type == torch.device(metrics.get("device") or "cpu").type)
    return {
        "what": "a synthetic data set sampled from a generator trained with dpgen; sampling is post-processing of "
                "the generator, so the set carries the run's privacy guarantee and no more",
        "method": metrics.get("method"), "dataset": metrics.get("dataset"),
        "private": rep.private,
        "epsilon_spent": rep.epsilon if rep.private else "inf (not private)", "delta": rep.delta,
        "epsilon_budget": rep.epsilon_budget,
        # the run with the DP mechanisms that chose its preset's settings (privacy.selection_cost), where stated
        "epsilon_with_settings_choice": p.get("epsilon_with_settings_choice"),
        # a preset whose settings were chosen on another data set's records (privacy.selected_on): nothing carried
        "settings_chosen_on_other_records": p.get("settings_chosen_on_other_records"),
        "accountant": rep.accountant,
        "neighbouring_relation": rep.relation,
        # z (the Gaussian's std over the release's sensitivity) and that std in the released quantity's units
        "noise_multiplier": rep.noise_multiplier, "noise_std": rep.noise_std,
        "guarantee_holds": rep.guarantee_holds,
        "not_covered": list(rep.not_covered),
        "privacy_source": (f"the privacy report recorded in the checkpoint whose weights were sampled (step "
                           f"{p.get('checkpoint_step')}), not a file beside it"),
        "training_steps": p.get("checkpoint_step"),
        "n": n, "seed": seed, "device": device,
        "shape": list(cfg.dataset.shape), "num_classes": int(cfg.dataset.num_classes or 0),
        "labels": "drawn uniformly by the generator (never the private labels)",
        "post_processing": (f"model.sharpen: a contrast curve of slope {cfg.model.get('sharpen')} centred at "
                            f"{cfg.model.get('sharpen_at', 0.5)} on every sample, as the run evaluated them"
                            if cfg.model.get("sharpen") else None),
        "checkpoint": str(run / "checkpoints" / "last.pt"),
        "checkpoint_sha256": _sha256(run / "checkpoints" / "last.pt"),
        "run_folder": str(run),
        "dpgen_version": _version(), "dpgen_commit": _commit(),
        "downstream_at_training_time": {"test_acc": acc, "n_synthetic": ds.get("n_synthetic"),
                                        "seed": int(cfg.seed), "models": list(acc)},
        "fidelity_at_training_time": fidelity,
        "is_the_training_time_evaluation_set": same,
        "evaluate_again": evaluate_again(cfg, metrics, files["npz"]),
        "files": files,
    }


def evaluate_again(cfg, metrics: Dict[str, Any], npz: str) -> str:
    """The command that evaluates the released set with the papers' protocol: the run's dataset with what it needs
    to find its test split again (your own data: its path, its options, the declared class count and n; issue 84:
    the command left out dataset.path and failed with exit 2)."""
    import shlex

    parts = ["python run.py", "task=evaluate", f"task.synthetic={shlex.quote(str(npz))}",
             f"dataset={metrics.get('dataset')}"]
    ds = cfg.dataset
    if ds.path:  # your own data (a run's config, older ones filled by dpgen.tasks.finished_run.load_generator)
        parts += [f"dataset.path={shlex.quote(str(ds.path))}", f"dataset.num_classes={int(ds.num_classes)}",
                  f"dataset.n_train={int(ds.n_train)}"]
        parts += [f"+dataset.options.{k}={v}" for k, v in dict(ds.options or {}).items() if v is not None]
    return " ".join(parts + [f"seed={int(cfg.seed)}"])


def with_selection(sheet: Dict[str, Any], sel: Dict[str, Any]) -> Dict[str, Any]:
    """The datasheet of a release whose contrast curve (and, among several runs, whose run) was chosen on held-out
    records: the curve, that choice's own mechanism and epsilon, and the release's epsilon as ``epsilon_spent``:
    the larger of training and selection (parallel composition), the scored runs composed for the training part."""
    c = sel["chosen"]
    sheet = dict(sheet)
    sheet["epsilon_of_training"] = sheet.get("epsilon_spent")
    # the selection's own record of the release's epsilon: the larger of training and selection (one run), or the
    # scored runs composed (several runs beside one held-out part: the draw depends on each generator)
    spent = [v for v in (sheet.get("epsilon_spent"), sel["epsilon"], sel["epsilon_total"])
             if isinstance(v, (int, float))]
    sheet["epsilon_spent"] = max(spent) if spent else sheet.get("epsilon_spent")
    how = (f"the candidates were {len(sel['runs'])} runs times the curves, and this run was drawn: its training "
           "records' epsilon composes every scored run, the held-out records' is the selection's, and the epsilon "
           "stated is the larger of the two") if "runs" in sel else \
        "it composes with training in parallel, so the epsilon stated is the larger of the two"
    if "carried" in sel:  # the runs' settings were chosen by earlier mechanisms on these records: all sequential
        how = ("this run's settings were chosen by earlier mechanisms on these records (selection.json's 'carried': "
               "privacy.selection_cost), so the epsilon stated composes them with the scored run"
               f"{'s' if 'runs' in sel else ''} and this draw, sequentially, for every record")
    sheet["post_processing"] = (
        f"model.sharpen: a contrast curve of slope {c['sharpen']:g} centred at {c['sharpen_at']:g} on every sample"
        if c["sharpen"] else "none") + (
        f", chosen among {len(sel['candidates'])} candidates on the records held out from training "
        f"({sel.get('held_out', 'dataset.validation')}) by the exponential mechanism at epsilon {sel['epsilon']:g} "
        f"(scripts/select_on_validation.py, selection.json); {how}")
    sheet["selection"] = {k: sel.get(k) for k in ("candidates", "chosen", "epsilon", "delta", "mechanism", "score",
                                                  "neighbouring_relation", "composition", "epsilon_total", "runs",
                                                  "carried")
                        if k in sel or k not in ("runs", "carried")}
    return sheet


def with_restorer(sheet: Dict[str, Any], restored: Dict[str, Any]) -> Dict[str, Any]:
    """The datasheet of a release drawn through a restorer learnt on public data: the set is "with public data"."""
    from dpgen.models.restorer import public_data_statement

    sheet = dict(sheet)
    sheet["post_processing"] = (
        f"a restorer learnt on the public set {restored['public_dataset']} (band {restored['band']} -> image, input "
        f"blur up to {restored['blur']:g} px"
        f"{', given the label of each sample' if restored.get('num_classes') else ''}; {restored['file']}, "
        f"SHA-256 {restored['sha256']}) on every sample, in "
        "place of the run's contrast curve: post-processing of the generator and of public data, so the privacy "
        "stated is the run's")
    sheet["public_data"] = public_data_statement(restored)
    sheet["restorer"] = restored
    sheet["is_the_training_time_evaluation_set"] = False
    sheet["training_time_numbers_describe"] = ("the run's own samples (through its contrast curve), not this restored "
                                               "set: evaluate it again")
    return sheet


def _markdown(sheet: Dict[str, Any]) -> str:
    acc = sheet["downstream_at_training_time"]["test_acc"]
    eps = sheet["epsilon_spent"]
    other = sheet.get("training_time_numbers_describe")
    of_other = f" (of {other})" if other else ""
    lines = [f"# Datasheet: synthetic {sheet['dataset']} from {sheet['method']}", "",
             sheet["what"] + ".", ""]
    if not sheet["private"]:
        lines += ["**NOT PRIVATE: the generator was trained without a privacy mechanism.**", ""]
    elif not sheet["guarantee_holds"]:
        lines += ["**The run's (epsilon, delta) guarantee does NOT hold (see its privacy report): this set is not "
                  "differentially private.**", ""]
    rows = [
        ("method", sheet["method"]), ("private dataset", sheet["dataset"]),
        ("epsilon spent", f"{eps:.4f}" if isinstance(eps, (int, float)) else eps),
        ("delta", sheet["delta"]), ("budget", sheet["epsilon_budget"]),
        *([("epsilon with the choice of the settings", f"{sheet['epsilon_with_settings_choice']:.4f} (this run and "
            "the mechanisms that chose its preset's settings on these records: not covered, below)")]
          if isinstance(sheet.get("epsilon_with_settings_choice"), (int, float)) else []),
        *([("settings chosen on other records", sheet["settings_chosen_on_other_records"])]
          if sheet.get("settings_chosen_on_other_records") else []),
        ("accountant", sheet["accountant"]),
        ("noise multiplier / noise std", " / ".join("n/a" if sheet.get(k) is None else f"{sheet[k]:.4g}"
                                                    for k in ("noise_multiplier", "noise_std"))),
        ("neighbouring relation", sheet["neighbouring_relation"]),
        ("guarantee holds", sheet["guarantee_holds"]),
        ("not covered", "; ".join(sheet["not_covered"]) if isinstance(sheet["not_covered"], list)
         else sheet["not_covered"]),
        ("training steps", sheet["training_steps"]),
        ("samples", f"{sheet['n']:,} of shape {tuple(sheet['shape'])}, {sheet['num_classes']} classes ({sheet['labels']})"),
        ("sampling seed / device", f"{sheet['seed']} / {sheet['device']}"),
        ("post-processing", sheet.get("post_processing") or "none"),
        ("public data", sheet.get("public_data") or "none"),
        ("checkpoint", sheet["checkpoint"]), ("checkpoint SHA-256", sheet["checkpoint_sha256"]),
        ("dpgen that sampled the set", f"{sheet['dpgen_version']}, commit {sheet['dpgen_commit']}"),
        ("downstream accuracy at training time (real test split)",
         (", ".join(f"{k} {v:.2f} %" for k, v in acc.items()) or "not measured") + of_other),
        ("fidelity at training time (real test split)",
         (", ".join(f"{k} {v:.4g}" for k, v in sheet.get("fidelity_at_training_time", {}).items()
                    if isinstance(v, (int, float))) or "not measured") + of_other),
        ("the training-time evaluation set", "yes (the same n, seed and device as the run's evaluation)"
         if sheet["is_the_training_time_evaluation_set"] else "no (another n, seed or device)"),
    ]
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "Evaluate the set with the papers' protocol (classifiers trained on it, tested on the real test "
              "split):", "", f"    {sheet['evaluate_again']}", "",
              "Files: " + ", ".join(f"`{v}`" for v in sheet["files"].values()) + "."]
    return "\n".join(lines) + "\n"


def sampling_device(metrics: Dict[str, Any]) -> str:
    """The device a release samples on by default: the run's own (its evaluation drew its set there) when
    this machine has it, else the CPU."""
    trained = torch.device(metrics.get("device") or "cpu")
    return "cuda" if trained.type == "cuda" and torch.cuda.is_available() else "cpu"


def release(run, n: Optional[int] = None, seed: Optional[int] = None, out=None, device: Optional[str] = None,
            allow_non_private: bool = False, restorer=None) -> Dict[str, Any]:
    """Write the release of ``run`` (see the module doc); returns the datasheet. ``device=None``: the
    run's own device where available (:func:`sampling_device`). ``restorer``: a restorer file learnt on a public
    set (:mod:`dpgen.models.restorer`) through which the samples pass in place of the run's contrast curve."""
    from dpgen.utils.io import atomic_write_bytes, atomic_write_text

    run = Path(run)
    if device is None:
        mf = run / "metrics.json"
        device = sampling_device(json.loads(mf.read_text())) if mf.exists() else "cpu"
    curve, selection = run_curve(run)
    if restorer is not None:
        from dpgen.models.restorer import NO_CURVE, beside_selection, restored

        if selection:
            raise ReleaseError(beside_selection(restorer, run))
        curve = NO_CURVE  # the band as the generator draws it: the restorer learnt band -> image
    cfg, metrics, gen, shape, k, p = load_generator(run, device, sharpen=curve)
    learnt = None
    if restorer is not None:
        try:
            gen, learnt = restored(gen, restorer, str(cfg.dataset.name), cfg.model, shape, device)
        except ValueError as e:
            raise ReleaseError(str(e)) from None
    covered = bool(p.get("private")) and p.get("guarantee_holds", True) is not False
    if not covered and not allow_non_private:
        why = "a non-private method" if not p.get("private") else "its privacy report says guarantee_holds: false"
        raise ReleaseError(f"{run} was trained by {metrics.get('method')} ({why}): its samples are not differentially "
                           "private. Pass allow_non_private=true to release them anyway (the datasheet says so).")
    ds = metrics.get("downstream") or {}
    n = int(n if n is not None else ds.get("n_synthetic") or 60000)
    if n <= 0:
        raise ReleaseError(f"n={n}: give a positive number of samples")
    seed = int(seed if seed is not None else int(cfg.seed) + 2)
    x, y = draw(gen, n, seed, device)
    out = Path(out) if out is not None else run / "release"
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez_compressed(buf, x=x.numpy().astype(np.float32), y=y.numpy().astype(np.int64))
    files = {"npz": str(out / "synthetic.npz"), "png": str(out / "samples.png"),
             "datasheet_md": str(out / "DATASHEET.md"), "datasheet_json": str(out / "datasheet.json")}
    atomic_write_bytes(out / "synthetic.npz", buf.getvalue())
    if len(shape) == 3:
        atomic_write_bytes(out / "samples.png", labelled_grid(x, y, k))
    else:
        files.pop("png")
    sheet = datasheet(cfg, metrics, run, n, seed, device, files, p)
    sheet["run_id"] = p.get("run_id")  # the run whose checkpoint was sampled (dpgen.train.publication.RUN_FILES)
    if selection:  # the curve was chosen on held-out private records: that mechanism's epsilon is stated too
        sheet = with_selection(sheet, selection)
    if learnt:
        sheet = with_restorer(sheet, learnt)
    # task=evaluate states the privacy of a set it evaluates from the datasheet that describes that very file
    sheet["synthetic_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    atomic_write_text(out / "datasheet.json", json.dumps(sheet, indent=2, default=str))
    atomic_write_text(out / "DATASHEET.md", _markdown(sheet))
    return sheet


def main(argv: Sequence[str]) -> int:
    """``dpgen sample <run folder> key=value ...``; exit 2 with ``dpgen: error:`` on bad input."""
    args: List[str] = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + __doc__)
        return 0 if args else 2
    run, opts = args[0], {}
    for a in args[1:]:
        key, sep, value = a.partition("=")
        if not sep or key not in ("n", "seed", "out", "device", "allow_non_private", "restorer"):
            print(f"dpgen: error: {a!r} is not an option of dpgen sample\n{USAGE}", file=sys.stderr)
            return 2
        opts[key] = value
    try:
        sheet = release(run, n=int(opts["n"]) if "n" in opts else None,
                        seed=int(opts["seed"]) if "seed" in opts else None, out=opts.get("out"),
                        device=opts.get("device"),
                        allow_non_private=opts.get("allow_non_private", "false").lower() in ("1", "true", "yes"),
                        restorer=opts.get("restorer"))
    except (ReleaseError, ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"dpgen: error: {e}", file=sys.stderr)
        return 2
    acc = sheet["downstream_at_training_time"]["test_acc"]
    eps = sheet["epsilon_spent"]
    eps = f"{eps:.4f}" if isinstance(eps, (int, float)) else eps
    print(f"[dpgen] released {sheet['n']:,} samples of {sheet['method']} on {sheet['dataset']} "
          f"(epsilon {eps}, delta {sheet['delta']}): {sheet['files']['npz']}")
    print(f"[dpgen] datasheet: {sheet['files']['datasheet_md']}; training-time accuracy "
          + (", ".join(f"{k} {v:.2f}%" for k, v in acc.items()) or "not measured")
          + (f" (of {sheet['training_time_numbers_describe']})" if sheet.get("training_time_numbers_describe") else ""))
    if sheet.get("public_data"):
        print(f"[dpgen] public data: {sheet['public_data']}")
    print(f"[dpgen] evaluate it again: {sheet['evaluate_again']}")
    return 0


__all__ = ["ReleaseError", "draw", "load_generator", "release"]
