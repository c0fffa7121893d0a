"""What a training loop publishes, and the privacy ledger that must cover it.

The rule (README, "Privacy"; docs/PRIVACY.md): a run publishes only the mechanism's
released outputs, post-processing of them and of public data, and epsilon. Everything a loop
writes while it trains (``metrics.jsonl``, the csv / tensorboard / wandb loggers, checkpoints)
goes out after the ledger that covers it is on disk:

* :class:`Publisher` persists the method's ledger (``checkpoints/ledger.json``, written atomically)
  before it hands a record to ``metrics.jsonl`` or a logger. A run that crashes after publishing
  a step therefore resumes with a ledger that counts that step, even when the last checkpoint is
  older (the checkpoint's own ledger is replaced by the newer one, never the reverse).
* the settings the ledger was spent under and the resume checks on them live with the run folder
  (:mod:`dpgen.train.resume`: ``privacy_settings``, ``check_resume_settings``, ``carried_ledger``).
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
from typing import Any, Dict, Optional

from dpgen.train import migrations
from dpgen.utils.io import atomic_write_text

LEDGER_NAME = "ledger.json"
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
    RunFile("checkpoints", "last.pt (weights, optimizer, the ledger, the privacy record of its step), ledger.json and "
            "held_out_spent.json (a selection spent the held-out part: kept by a resume)", "run", True),
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


class LedgerFile:
    """``<run>/checkpoints/ledger.json``: the newest ledger of the run, written atomically with its format; an older
    file is brought to the current format when it is loaded (:mod:`dpgen.train.migrations`)."""

    def __init__(self, output_dir) -> None:
        self.path = Path(output_dir) / "checkpoints" / LEDGER_NAME

    def save(self, method, settings: Dict[str, Any]) -> None:
        atomic_write_text(self.path, json.dumps(migrations.stamped({
            "ledger": method.ledger_state(), "steps": method.ledger_steps(), "private_steps": method.spent_steps(),
            "privacy_settings": settings})))

    def load(self) -> Optional[Dict[str, Any]]:
        """The file in the current format (None when there is none; refused when it cannot be migrated)."""
        if not self.path.exists():
            return None
        return migrations.migrate(json.loads(self.path.read_text()), migrations.LEDGER_FILE, self.path)

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


__all__ = ["FINAL_RESULTS", "LEDGER_NAME", "LedgerFile", "Publisher", "RUN_ARTEFACTS", "RUN_FILES", "RunFile",
           "remove_run_artefacts", "stop_step"]
