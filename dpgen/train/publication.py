"""What a training loop publishes, and the privacy ledger that must cover it.

The rule (README, "Privacy is this project's security"): a run publishes only the mechanism's
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
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

import torch

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
    privacy = {k: v for k, v in (_plain(cfg.privacy) or {}).items() if k != "cross_check"}
    s = {"method": _plain(cfg.method), "privacy": privacy, "dataset": dataset,
         "trainer": {"batch_size": int(cfg.trainer.batch_size)},
         "task": {k: _plain(getattr(cfg.task, k, None)) for k in task_keys}}
    flat = _flatten(s)
    flat["n_private"] = int(n_private)
    flat["calibration_steps"] = int(calibration_steps)
    return flat


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


def check_resume_settings(saved: Dict[str, Any], current: Dict[str, Any]) -> None:
    """Refuse to continue a ledger under other privacy settings (it was spent under ``saved``)."""
    changed = [k for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if changed:
        what = "; ".join(f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in changed)
        raise ValueError(
            f"resume=true with changed privacy settings ({what}). The checkpoint's ledger was spent under "
            "its settings and its noise level was released: resume with the same settings (trainer.steps / "
            "trainer.epochs may change; the noise stays and the budget still stops the run), or start a new "
            "run folder.")


def stop_step(method, step: int, requested: int, max_steps: Optional[int]) -> int:
    """The step at which the run stops: ``requested``, or earlier where its ledger is full.

    A private run spends at most min(``requested``, ``max_steps``) mechanism steps in all
    (``max_steps``: what the budget allows; None: no per-step limit), so a resumed run ends with
    the ledger of the uninterrupted run. Its ledger may hold more steps than ``step`` (steps
    published before a crash, then resumed from an older checkpoint): they count, so the run
    takes fewer training steps instead of spending more.
    """
    if not method.private or not method.accounts_steps:
        return int(requested)
    ledger = getattr(method, "ledger", None)
    if max_steps is None and ledger is not None:
        # "None" meant: the steps the method was built for fit the budget. A resumed run may ask for
        # more, so ask the ledger about the steps asked now (None again: they fit too)
        max_steps = ledger.max_steps(int(requested))
    cap = int(requested) if max_steps is None else min(int(requested), int(max_steps))
    return int(step) + max(0, cap - int(method.spent_steps()))


def finite_gradients(params: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """Whether every gradient is finite (the check a private run makes on its released gradient), as a
    0-dim bool tensor on the gradients' device: ``bool()`` of it is the one host sync."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(True)
    return torch.isfinite(torch.nn.utils.get_total_norm(grads))


class LedgerFile:
    """``<run>/checkpoints/ledger.json``: the newest ledger of the run, written atomically."""

    def __init__(self, output_dir) -> None:
        self.path = Path(output_dir) / "checkpoints" / LEDGER_NAME

    def save(self, method, settings: Dict[str, Any]) -> None:
        atomic_write_text(self.path, json.dumps({"ledger": method.ledger_state(), "steps": method.ledger_steps(),
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
        from dpgen.train.loggers import make_logger

        out = Path(output_dir)
        self.jsonl = out / "metrics.jsonl"
        self.ledger = LedgerFile(out)
        self.method = method
        self.settings = settings
        self.logger = make_logger(cfg, out)

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

    def finish(self) -> None:
        self.logger.finish()


__all__ = ["LEDGER_NAME", "LedgerFile", "Publisher", "calibration_steps", "check_resume_settings",
           "finite_gradients", "privacy_settings", "stop_step"]
