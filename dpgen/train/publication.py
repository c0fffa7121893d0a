"""What a training loop publishes, and the privacy ledger that must cover it.

The rule (README, "Privacy"; docs/PRIVACY.md): a run publishes only the mechanism's
released outputs, post-processing of them and of public data, and epsilon. Everything a loop
writes while it trains (``metrics.jsonl``, the csv / tensorboard / wandb loggers, checkpoints)
goes out after the ledger that covers it is on disk:

* :class:`Publisher` persists the method's ledger (``checkpoints/ledger.json``, written atomically)
  before it hands a record to ``metrics.jsonl`` or a logger. A run that crashes after publishing
  a step therefore resumes with a ledger that counts that step, even when the last checkpoint is
  older (the checkpoint's own ledger is replaced by the newer one, never the reverse).
* :func:`privacy_settings` is what the ledger was spent under (method, privacy, batch size, data,
  the steps the noise was calibrated for). A resumed run keeps the checkpoint's calibration steps
  (so the released noise level is the same) and refuses any other change with an error that names
  the setting (:func:`check_resume_settings`).
* :func:`stop_step` caps a run at the step where its ledger is full (the budget, or the steps asked).

Methods tell the loop what may be published through ``publishes_loss``: ``True`` when the loss is
computed from released values and public data only (DP-SWD: from the noisy projections;
entropic-LDP: from the locally privatised set; non-private methods), ``False`` when it is computed
from clean private records (DP-Sinkhorn and its variants, DP-SGD): then no loss leaves the run
and a non-finite step is detected on the released gradient instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from dpgen.utils.io import atomic_write_text

LEDGER_NAME = "ledger.json"
#: dataset keys that say where files are, not which records are used
_LOCATION_KEYS = ("data_root", "download")


def _plain(node) -> Any:
    import dataclasses

    from omegaconf import DictConfig, ListConfig, OmegaConf

    if dataclasses.is_dataclass(node) or isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(OmegaConf.structured(node), resolve=True)
    return node


def _flatten(d: Any, prefix: str = "") -> Dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: Dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def privacy_settings(cfg, *, n_private: int, calibration_steps: int, task_keys: Iterable[str] = ()
                     ) -> Dict[str, Any]:
    """The settings a run's ledger was spent under, as flat ``config.key -> value`` pairs.

    ``task_keys`` names the ``task.*`` fields that change the mechanism (domain adaptation:
    ``k``, ``target_grad``). ``calibration_steps`` is the length the noise was calibrated for.
    """
    dataset = {k: v for k, v in (_plain(cfg.dataset) or {}).items() if k not in _LOCATION_KEYS}
    privacy = {k: v for k, v in (_plain(cfg.privacy) or {}).items() if k not in ("cross_check", "selected_on_private")}
    task = _plain(cfg.task) or {}
    s = {"method": _plain(cfg.method), "privacy": privacy, "dataset": dataset,
         "trainer": {"batch_size": int(cfg.trainer.batch_size)},
         "task": {k: task.get(k) for k in task_keys}}
    flat = _flatten(s)
    flat["n_private"] = int(n_private)
    flat["calibration_steps"] = int(calibration_steps)
    if OWN_SPLIT_KEY[1] is not None and _held_out_of_own_data(cfg.dataset):
        # your own data without a test split: which records train is decided by the per-record hash since issue 83
        # (a permutation over n before); a checkpoint of the old split lacks the key and is refused on resume
        flat[OWN_SPLIT_KEY[0]] = OWN_SPLIT_KEY[1]
    return flat


#: the privacy setting that names how your own data's held-out test part is drawn (dpgen.data.holdout)
OWN_SPLIT_KEY = ("dataset.held_out_by", "per-record hash (dpgen.data.holdout.held_out_mask, salt dpgen-own-test-v1)")


def _held_out_of_own_data(dataset) -> bool:
    path = dataset.path
    if not path:
        return False
    from dpgen.data.own import has_test_split

    try:
        return not has_test_split(str(dataset.name), str(path))
    except (OSError, ValueError):
        return False


def calibration_steps(state: Optional[Dict[str, Any]], requested: int) -> int:
    """Steps to calibrate the noise for: a resumed run keeps its checkpoint's, so its noise is the
    noise already released; a fresh run calibrates for the steps it asks."""
    if state is None:
        return int(requested)
    saved = state.get("privacy_settings")
    if not saved:
        raise ValueError(
            "resume=true, but the checkpoint records no privacy settings (it was written by an older dpgen): "
            "its ledger cannot be continued safely. Start a new run (resume=false, or a new hydra.run.dir).")
    return int(saved["calibration_steps"])


def normalise_settings(flat: Dict[str, Any]) -> Dict[str, Any]:
    """Flat settings (``privacy_settings``, or a flattened config.yaml) with ``privacy.accountant`` as the ledger
    it stands for: ``auto`` resolved by the method's sampling (PLD for Poisson, autodp RDP without replacement,
    so a DP-SWD run made when ``rdp`` was the default is the same run), and dropped for a non-private method
    (it keeps no ledger)."""
    out = dict(flat)
    name = out.get("privacy.accountant")
    if name is None:
        return out
    if out.get("method.private") is False:
        out.pop("privacy.accountant")
    elif name == "auto" and out.get("method.sampling") in ("poisson", "without_replacement"):
        from dpgen.privacy.accountants import resolve_accountant

        out["privacy.accountant"] = resolve_accountant(name, out["method.sampling"])
    return out


#: settings keys added after checkpoints were written, with the value that reproduces what dpgen did before them:
#: a checkpoint that lacks the key ran under that value (a run folder from before the key resumes), any other
#: value is a change
ADDED_KEYS = {"dataset.n_train_counted": False, "dataset.validation": 0.0, "privacy.secure_rng": False}


def check_resume_settings(saved: Dict[str, Any], current: Dict[str, Any]) -> None:
    """Refuse to continue a ledger under other privacy settings (it was spent under ``saved``)."""
    saved, current = normalise_settings(saved), normalise_settings(current)
    saved.update({k: v for k, v in ADDED_KEYS.items() if k not in saved and k in current})
    changed = [k for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if changed:
        what = "; ".join(f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in changed)
        raise ValueError(
            f"resume=true with changed privacy settings ({what}). The checkpoint's ledger was spent under "
            "its settings and its noise level was released: resume with the same settings (trainer.steps / "
            "trainer.epochs may change; the noise stays and the budget still stops the run), or start a new "
            "run folder.")


def stop_step(method, step: int, requested: int, max_steps: Optional[int] = None) -> int:
    """The step at which the run stops: ``requested`` mechanism steps in all, or earlier where its
    ledger is full.

    A private run spends at most ``requested`` mechanism steps in all and never ends above its
    budget. Its ledger may hold more steps than ``step`` (steps published before a crash, then resumed
    from an older checkpoint; an earlier attempt's ledger carried over): they count, so the run takes
    fewer training steps instead of spending more. With a :class:`dpgen.privacy.ledger.Ledger` the
    steps left are computed from the ledger's whole history (``Ledger.steps_left``); a method outside
    dpgen with only an accountant falls back to ``max_steps`` (what its budget allows in all; None:
    no per-step limit).
    """
    if not method.private or not method.accounts_steps:
        return int(requested)
    spent = int(method.spent_steps())
    wanted = max(0, int(requested) - spent)
    ledger = method.ledger
    if ledger is not None and hasattr(ledger, "steps_left"):
        return int(step) + int(ledger.steps_left(wanted))
    cap = int(requested) if max_steps is None else min(int(requested), int(max_steps))
    return int(step) + max(0, cap - spent)


@dataclass(frozen=True)
class RunFile:
    """One thing a run folder holds: ``name`` (a file or folder under the run folder), what it is, and which
    state of the run it describes: ``"config"`` (written when the run starts, kept), ``"run"`` (the run's history,
    its ledger included: a fresh start removes it, so that nothing published outlives the ledger that charged it),
    ``"weights"`` (describes the generator of the checkpoint's step, or changes the privacy a release of it states:
    a resume that trains again removes it too, so no file describes other weights than the checkpoint's)."""

    name: str
    what: str
    describes: str
    states_privacy: bool = False


#: everything a run folder holds: the one list (``tests/privacy/test_private_boundary.py`` runs a run, a release and
#: a selection and finds no other name in the folder). A new file a run writes is added here first.
RUN_FILES = (
    RunFile("config.yaml", "the run's resolved settings", "config"),
    RunFile(".lock", "the run folder's lock (two runs never share a folder)", "config"),
    RunFile(".hydra", "Hydra's copy of the settings and overrides", "config"),
    RunFile("run.log", "Hydra's log of the job", "config"),
    RunFile("metrics.jsonl", "the published training records, one a log step", "run"),
    RunFile("metrics.csv", "the csv logger's records", "run"),
    RunFile("tensorboard", "the tensorboard logger's events", "run"),
    RunFile("wandb", "the wandb logger's files", "run"),
    RunFile("checkpoints", "last.pt (weights, optimizer, the ledger, the privacy record of its step) and ledger.json",
            "run", True),
    RunFile("privatised_data.pt", "entropic-LDP's locally privatised release", "run", True),
    RunFile("fid_partial", "the generated images' Inception features of an interrupted FID pass", "weights"),
    RunFile("metrics.json", "the evaluation of the last step's weights and their privacy report", "weights", True),
    RunFile("metrics_final.csv", "the csv logger's final metrics", "weights", True),
    RunFile("samples.png", "a grid of the last step's samples", "weights"),
    RunFile("table_result.json", "dpgen.tables.grid's row of this run", "weights", True),
    RunFile("table_generations", "dpgen.tables.grid's synthetic sets of this run", "weights"),
    RunFile("selection.json", "a setting chosen on the held-out validation part (scripts/select_on_validation.py) "
            "for the checkpoint's weights: it changes the privacy a release states", "weights", True),
    RunFile("release", "`dpgen sample`'s released set and its datasheet, of the checkpoint's weights", "weights", True),
)
#: what a run writes when it ends or later about the generator of its last step: a resumed run that trains again
#: removes them before its first step (dpgen.train.run_record)
FINAL_RESULTS = tuple(f.name for f in RUN_FILES if f.describes == "weights")
#: what an earlier run left in the folder: a fresh start removes it
RUN_ARTEFACTS = tuple(f.name for f in RUN_FILES if f.describes in ("run", "weights"))


def remove_run_artefacts(output_dir, names=RUN_ARTEFACTS) -> list:
    """Remove ``names`` from ``output_dir`` (default: what an earlier run published, :data:`RUN_ARTEFACTS`);
    returns the names removed."""
    import shutil

    removed = []
    for name in names:
        path = Path(output_dir) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed


def carried_ledger(cfg, output_dir) -> Optional[Dict[str, Any]]:
    """The ledger file of an earlier attempt that died before its first checkpoint, when a resumed run
    (``resume=true|auto``) finds no checkpoint: None when there is none, or when it holds only releases
    made before training (nothing is published before the first checkpoint, so such releases never left
    that attempt). Otherwise its steps may have been published (log lines, loggers): the new attempt
    continues that ledger, so they stay charged."""
    if not cfg.resume:
        return None
    saved = LedgerFile(output_dir).load()
    if not saved or not saved.get("privacy_settings") or int(saved.get("steps", 0)) <= 0:
        return None
    if "private_steps" in saved:
        steps = int(saved["private_steps"])
    else:  # written before the file said it: every entry below sample rate 1 is a step; all at rate 1, maybe steps
        hist = ((saved.get("ledger") or {}).get("accountant") or {}).get("history") or []
        steps = sum(int(h["num_steps"]) for h in hist if h["sample_rate"] < 1) or int(saved["steps"])
    return saved if steps > 0 else None


class LedgerFile:
    """``<run>/checkpoints/ledger.json``: the newest ledger of the run, written atomically."""

    def __init__(self, output_dir) -> None:
        self.path = Path(output_dir) / "checkpoints" / LEDGER_NAME

    def save(self, method, settings: Dict[str, Any]) -> None:
        atomic_write_text(self.path, json.dumps({"ledger": method.ledger_state(), "steps": method.ledger_steps(),
                                                 "private_steps": method.spent_steps(),
                                                 "privacy_settings": settings}))

    def load(self) -> Optional[Dict[str, Any]]:
        return json.loads(self.path.read_text()) if self.path.exists() else None

    def remove(self) -> None:
        if self.path.exists():
            self.path.unlink()

    def reconcile(self, method) -> None:
        """After a resume: continue from this file's ledger when it counts more steps than the
        checkpoint's (steps published after the last checkpoint, before a crash)."""
        saved = self.load()
        if saved is not None and int(saved["steps"]) > method.ledger_steps():
            method.load_ledger_state(saved["ledger"])
            print(f"[dpgen] the ledger counts {method.ledger_steps()} mechanism steps (some were published after "
                  "the last checkpoint): the budget is charged for them")


class Publisher:
    """The one way a training loop publishes while it trains: ledger first, then the record.

    ``publish(rec, step)`` persists the ledger, then appends ``rec`` to ``metrics.jsonl`` and
    hands it to the configured logger (csv, tensorboard, wandb). ``checkpoint(save)`` persists the
    ledger, then writes the checkpoint.
    """

    def __init__(self, cfg, output_dir, method, settings: Dict[str, Any]) -> None:
        out = Path(output_dir)
        self.cfg, self.out = cfg, out
        self.jsonl = out / "metrics.jsonl"
        self.ledger = LedgerFile(out)
        self.method = method
        self.settings = settings
        self._logger = None

    @property
    def logger(self):
        """The configured logger, opened at the first record (a finished run resumed without more steps opens
        none: no empty event file or wandb run)."""
        if self._logger is None:
            from dpgen.train.loggers import make_logger

            self._logger = make_logger(self.cfg, self.out, config_dict=_config_dict(self.cfg))
        return self._logger

    def persist(self) -> None:
        if self.method.private:
            self.ledger.save(self.method, self.settings)

    def publish(self, rec: Dict[str, Any], step: int) -> None:
        self.persist()
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")
        self.logger.log(rec, step)

    def checkpoint(self, save) -> None:
        self.persist()
        save()

    def finish(self, final: Optional[Dict[str, Any]] = None) -> None:
        """The run's final metrics (what metrics.json holds) and its sample grid, to the logger."""
        images = {"samples": Path(final["samples_png"])} if final and final.get("samples_png") else None
        self.logger.finish(final=final, images=images)


def _config_dict(cfg) -> Dict[str, Any]:
    """The run's settings as plain containers (the loggers' hyper-parameters)."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    except Exception:  # an outside method's settings object that OmegaConf cannot wrap
        return {}


__all__ = ["FINAL_RESULTS", "LEDGER_NAME", "LedgerFile", "Publisher", "RUN_ARTEFACTS", "RUN_FILES", "RunFile", "calibration_steps", "carried_ledger",
           "check_resume_settings", "privacy_settings", "remove_run_artefacts", "stop_step"]
