"""A finished generation run read back from its files: its config, metrics, evaluated generator and the privacy
of those weights (``task=evaluate`` draws more synthetic sets from it; ``dpgen release`` publishes them)."""

from __future__ import annotations

from pathlib import Path


class ReleaseError(ValueError):
    """The run cannot be released (the message names the file or value and the fix)."""


def schema_defaults(schema):
    """The fields of a config dataclass that have a default, at that default (an untyped node: merged under a
    saved config, it fills in only what the saved one lacks)."""
    import dataclasses

    from omegaconf import MISSING, OmegaConf

    out = {}
    for f in dataclasses.fields(schema):
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value is not dataclasses.MISSING and value != MISSING:
            out[f.name] = value
    return OmegaConf.create(out)


def load_generator(run: Path, device: str = "cpu", sharpen=None, data_root=None):
    """(config, metrics, the evaluated generator, shape, classes, the weights' privacy) of a finished run, from
    its files only. The metrics and the privacy describe the checkpoint whose weights are loaded (one read of
    ``last.pt``): a folder whose ``metrics.json`` describes another step is refused. The generator draws as the
    run's ``model.sharpen`` says; ``sharpen`` = (slope, centre) replaces it (slope 0: off), and the returned
    config says so (post-processing: the weights' privacy is unchanged). ``data_root``: where the run's data set
    is on this machine, in place of the ``dataset.data_root`` its config names (a folder moved from another
    machine); it changes where the files are read, nothing about the weights."""
    from omegaconf import OmegaConf, open_dict

    from dpgen.config import DatasetConfig, ModelConfig, register_configs
    from dpgen.models import generator_from_config, released_generator
    from dpgen.train.run_record import load_checkpoint_file, read_run

    run = Path(run)
    for name in ("config.yaml", "checkpoints/last.pt", "metrics.json"):
        if not (run / name).exists():
            raise ReleaseError(f"{run / name} is missing: give the folder of a finished generation run (resume it "
                               f"with resume=auto hydra.run.dir={run} to finish it)")
    register_configs()
    cfg = OmegaConf.load(run / "config.yaml")
    with open_dict(cfg):
        # the one place an older run's config is read without validation: every model.* and dataset.* field it
        # lacks (model.upsample, init, sharpen; dataset.path, validation) is given its default, which it ran with
        cfg.model = OmegaConf.merge(schema_defaults(ModelConfig), cfg.model)
        cfg.dataset = OmegaConf.merge(schema_defaults(DatasetConfig), cfg.dataset)
        if data_root is not None:
            cfg.dataset.data_root = str(data_root)
    state = load_checkpoint_file(run / "checkpoints" / "last.pt", materialise=True)
    record = read_run(run, state=state)
    if record.status == "stale":
        raise ReleaseError(f"{record.stale_reason()}. Finish it (python run.py <its overrides> resume=auto "
                           f"hydra.run.dir={run}) and sample again.")
    metrics = record.result  # finished, or trained with its evaluation interrupted: the weights are final
    if metrics.get("task") != "generation":
        raise ReleaseError(f"{run} is a task={metrics.get('task')} run: only a generation run has a generator to sample")
    if record.privacy is None:
        raise ReleaseError(f"{run / 'checkpoints' / 'last.pt'} records no privacy report for its weights: release "
                           "a run trained by this dpgen")
    shape = tuple(int(s) for s in (cfg.dataset.shape or ()))
    if not shape:
        raise ReleaseError(f"{run / 'config.yaml'} declares no dataset.shape: the generator's output shape is unknown")
    k = int(cfg.dataset.num_classes or 0)
    gen = generator_from_config(cfg.model, shape, k)
    weights = state.get("ema") or state["models"]  # the evaluated model: the EMA when the run kept one
    gen.load_state_dict({key.split(".", 1)[1]: v for key, v in weights.items() if key.startswith("generator.")})
    gen.to(device).eval()
    if sharpen is not None:
        with open_dict(cfg):
            cfg.model.sharpen, cfg.model.sharpen_at = float(sharpen[0]) or None, float(sharpen[1])
    gen = released_generator(gen, cfg.model)
    return cfg, metrics, gen, shape, k, {**record.privacy, "checkpoint_step": record.checkpoint_step,
                                         "run_id": state.get("run_id")}


def add_sharpen_arguments(parser) -> None:
    """``--sharpen K --sharpen-at T`` on a script's argparse parser: measure a finished run through another
    contrast curve (``load_generator``'s ``sharpen``; read back with ``sharpen_from_args``)."""
    parser.add_argument("--sharpen", type=float, default=None,
                        help="the slope of model.sharpen's contrast curve, in place of the run's own (0: none)")
    parser.add_argument("--sharpen-at", type=float, default=0.5, help="its centre (default 0.5)")


def add_data_root_argument(parser) -> None:
    """``--data-root DIR`` on a script that reads a finished run's data set: where its files are on this machine
    (``load_generator``'s ``data_root``), for a run folder whose config names a folder absent here."""
    parser.add_argument("--data-root", type=Path, default=None,
                        help="where the run's data set is on this machine (default: the dataset.data_root its "
                             "config.yaml names, else $DPGEN_DATA_ROOT)")


def sharpen_from_args(parser, args):
    """(slope, centre) from ``add_sharpen_arguments``' options, None without ``--sharpen``; a bad value is the
    parser's error, naming both."""
    from dpgen.config import curve_problem

    if args.sharpen is None:
        return None
    if curve_problem(args.sharpen, args.sharpen_at):
        parser.error(f"--sharpen {args.sharpen} --sharpen-at {args.sharpen_at}: "
                     f"{curve_problem(args.sharpen, args.sharpen_at)}")
    return (args.sharpen, args.sharpen_at)


def read_selection(run: Path):
    """``<run>/selection.json`` (scripts/select_on_validation.py), None when absent; a file that does not name a
    valid choice is refused (the release would not know which curve its epsilon covers)."""
    import json

    path = Path(run) / "selection.json"
    if not path.exists():
        return None
    try:
        sel = json.loads(path.read_text())
        chosen = sel["chosen"]
        float(chosen["sharpen"]), float(chosen["sharpen_at"]), float(sel["epsilon"]), float(sel["epsilon_total"])
    except (ValueError, KeyError, TypeError):
        raise ReleaseError(f"{path} is not a selection written by scripts/select_on_validation.py (it must name "
                           "'chosen', 'epsilon' and 'epsilon_total'): restore it, or move it away to release the run "
                           "with its own settings") from None
    if chosen not in sel.get("candidates", []):
        raise ReleaseError(f"{path}: its chosen curve is not one of its candidates; the file was edited")
    check_describes_checkpoint(run, sel, path)
    floor = selection_floor(run, sel)
    if floor is None or float(sel["epsilon_total"]) < floor - 1e-9:
        raise ReleaseError(f"{path}: its epsilon_total does not compose "
                           + ("what the release discloses (the file lacks the scored runs' trainings)" if floor is None
                              else "the scored runs and the earlier choices its runs' settings carry "
                              f"(privacy.selection_cost): at least {floor:.4f}, not {float(sel['epsilon_total']):.4f}")
                           + "; the file was edited, or written by an older dpgen. Restate it: python "
                           f"scripts/select_on_validation.py --restate {run} (no new draw), or move it away")
    if "runs" in sel and chosen.get("run_id") != sel.get("run_id"):  # scored beside other runs, and not drawn
        raise ReleaseError(f"{path}: this run was scored beside {len(sel['runs'])} runs on one held-out part, and the "
                           f"selection drew another: {chosen.get('run')} (run {chosen.get('run_id')}). Release that "
                           "run; this one's held-out part is spent, and its own release is not what the selection "
                           "stated")
    return sel


def selection_floor(run: Path, sel: dict):
    """The least epsilon ``sel`` (a run's selection.json) may state for the release, recomputed from what it lists
    and from the run's own settings, never from the figure it states: the scored runs' trainings composed (several
    runs) and, where the run's settings were chosen by earlier mechanisms on these records
    (``privacy.selection_cost`` in its config.yaml), those composed sequentially with the runs and the draw
    (dpgen.privacy.selection.scored_runs_epsilon). None when it cannot be recomputed (a file with neither the runs
    nor the run's composition it needs); a file of one run with no earlier choice: its ``epsilon`` (the parallel
    case, trusted as before). A file that lists a larger earlier cost of its own (``carried``: the data set's register
    of earlier draws composed in) is held to that too."""
    from omegaconf import OmegaConf

    from dpgen.privacy.selection import scored_runs_epsilon, selection_cost_groups

    cfg_path = Path(run) / "config.yaml"
    saved = OmegaConf.load(cfg_path) if cfg_path.exists() else None
    earlier, pure = selection_cost_groups(saved.privacy, saved.get("dataset")) if saved is not None else ((), 0.0)
    listed = sel.get("carried") or {}
    costs = [(earlier, pure)]
    if listed.get("trainings") or listed.get("pure_epsilon"):  # what the file itself says it composed (e.g. the
        costs.append((tuple(tuple(t) for t in listed.get("trainings", ())),  # earlier draws of the data set's register)
                      float(listed.get("pure_epsilon", 0.0))))
    try:
        if "runs" in sel:
            groups = [r["composition"] for r in sel["runs"]]
        elif any(t or p for t, p in costs):
            groups = [sel["run_composition"]]
        else:
            return float(sel["epsilon"])
        return max(scored_runs_epsilon(groups, float(sel["epsilon"]), float(sel["run_delta"]), t, p) for t, p in costs)
    except (KeyError, TypeError, ValueError):
        return None


def check_describes_checkpoint(run: Path, written: dict, path: Path) -> None:
    """Refuse a file that states or changes a release's privacy (``written``: selection.json, a datasheet) when it
    was made for other weights than the checkpoint's: another run that used this folder before (its run id), or
    another step of this one. A fresh start and a resume that trains remove such files
    (dpgen.train.publication.RUN_FILES); this catches one that was copied back or left by an older dpgen."""
    from dpgen.train.run_record import load_checkpoint_file

    ckpt = Path(run) / "checkpoints" / "last.pt"
    state = load_checkpoint_file(ckpt) if ckpt.exists() else {}
    now = (state.get("run_id"), state.get("step"))
    then = (written.get("run_id"), written.get("checkpoint_step"))
    if then != now:
        raise ReleaseError(f"{path} was made for other weights (run {then[0]}, step {then[1]}) than the checkpoint's "
                           f"({ckpt}: run {now[0]}, step {now[1]}): it belongs to an earlier run in this folder, and "
                           "the privacy it states is not this generator's. Remove it (and select again on a run "
                           "trained with dataset.validation > 0, if you need a selection).")


def run_curve(run: Path, override=None):
    """(the curve to draw through, the run's selection or None): ``override`` (slope, centre) when given, else the
    curve the run's ``selection.json`` chose on its held-out records (as its release draws), else None (the run's
    own model.sharpen). The one place every reader of a finished run decides this."""
    if override is not None:
        return override, None
    sel = read_selection(run)
    return ((sel["chosen"]["sharpen"], sel["chosen"]["sharpen_at"]) if sel else None), sel


__all__ = ["ReleaseError", "add_sharpen_arguments", "load_generator", "read_selection", "run_curve",
           "selection_floor", "sharpen_from_args"]
