"""What a run folder says about its weights: the one way a release, a sweep row and a table cell read it.

The weights a release samples are ``checkpoints/last.pt``; the privacy they carry is the ledger record
written INTO that checkpoint (``privacy``: the run's full privacy report in the checkpoint of its last step and
in a checkpoint written on a signal; a periodic checkpoint records its step count only, ``partial``, and its
epsilon is computed from the ledger the checkpoint holds when it is asked for), never a
``metrics.json`` that may describe an earlier generator (a run resumed with more steps and interrupted
before it finished). ``metrics.json`` counts only when it describes the checkpoint's step.

:func:`read_run` returns a :class:`RunRecord` with a ``status``:

* ``finished``: ``metrics.json`` describes the checkpoint's weights (or the run keeps no checkpoint);
* ``stale``: ``metrics.json`` describes another step than the checkpoint (a resumed run that has not
  finished, left by a dpgen older than this module: a resume that trains now removes the old results
  before its first step); its accuracy and epsilon are NOT those of the weights;
* ``evaluating``: ``metrics.json`` describes the checkpoint's weights, but their evaluation was interrupted
  (``evaluation_complete`` false: the parts it finished are there; a resume evaluates again);
* ``interrupted``: a checkpoint (or a ledger file) and no ``metrics.json``;
* ``empty``: nothing to read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from dpgen.train.publication import FINAL_RESULTS, remove_run_artefacts


def load_checkpoint_file(path, materialise: bool = False) -> Dict[str, Any]:
    """A checkpoint's dict; ``materialise=False`` maps its tensors lazily (reading the step and the privacy
    record of a large checkpoint costs its small pickle only)."""
    import torch

    if materialise:
        return torch.load(path, map_location="cpu", weights_only=False)
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (RuntimeError, ValueError):  # an old (non-zip) serialisation cannot be mapped
        return torch.load(path, map_location="cpu", weights_only=False)


def _json(path: Path) -> Optional[Dict[str, Any]]:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, OSError):
        return None


@dataclass
class RunRecord:
    folder: Path
    #: ``metrics.json`` (or the task's result file), whatever step it describes
    result: Optional[Dict[str, Any]]
    #: the checkpoint's step (None: no checkpoint)
    checkpoint_step: Optional[int]
    #: the privacy report of the checkpoint's weights (its own record; for a checkpoint written before the
    #: record existed, the result's when that describes the same step); None when unknown
    privacy: Optional[Dict[str, Any]]
    #: mechanism steps in ``checkpoints/ledger.json`` (None: no file)
    ledger_steps: Optional[int]
    #: the checkpoint's ledger (its method's accountant state) and delta, for :meth:`epsilon` of a partial record
    ledger_state: Optional[Dict[str, Any]] = None
    delta: Optional[float] = None

    @property
    def status(self) -> str:
        if self.result is not None:
            if self.checkpoint_step is None or self.result.get("steps") is None:
                return "finished"  # a task without checkpoints (accounting, evaluate)
            if int(self.result["steps"]) != self.checkpoint_step:
                return "stale"
            return "evaluating" if self.result.get("evaluation_complete") is False else "finished"
        if self.checkpoint_step is not None or self.ledger_steps is not None:
            return "interrupted"
        return "empty"

    @property
    def metrics(self) -> Optional[Dict[str, Any]]:
        """The result file when it describes the checkpoint's weights, else None."""
        return self.result if self.status == "finished" else None

    def epsilon(self) -> Optional[float]:
        """Epsilon spent by the weights (the checkpoint's record, else its ledger), None when unknown."""
        eps = (self.privacy or {}).get("epsilon_spent")
        if isinstance(eps, (int, float)):
            return float(eps)
        return epsilon_of_ledger(self.ledger_state, self.delta)

    def stale_reason(self) -> str:
        return (f"{self.folder / 'metrics.json'} describes step {self.result.get('steps')}, but the checkpoint "
                f"({self.folder / 'checkpoints' / 'last.pt'}) holds the weights of step {self.checkpoint_step}: the run "
                "was resumed and has not finished, so that file's epsilon and accuracy are not those of the weights")


def epsilon_of_ledger(acc: Optional[Dict[str, Any]], delta: Optional[float]) -> Optional[float]:
    """Epsilon of a checkpoint's ledger (the accountant state of a method that keeps one Ledger), else None."""
    if not isinstance(acc, dict) or "history" not in acc or not acc.get("name") or delta is None:
        return None
    from dpgen.privacy.accountants import RDPAccountant, make_accountant

    try:
        a = (RDPAccountant(sampling=acc.get("sampling", "without_replacement")) if acc["name"] == "rdp"
             else make_accountant(acc["name"]))
        a.load_state_dict(acc)
        return float(a.get_epsilon(float(delta)))
    except (ValueError, TypeError, KeyError):
        return None


def read_run(folder, result: str = "metrics.json", state: Optional[Dict[str, Any]] = None) -> RunRecord:
    """The :class:`RunRecord` of ``folder``; ``state``: its checkpoint already loaded (read once by a caller that
    also uses the weights, so that the record and the weights come from one file)."""
    folder = Path(folder)
    res = _json(folder / result)
    ckpt = folder / "checkpoints" / "last.pt"
    if state is None and ckpt.exists():
        state = load_checkpoint_file(ckpt)
    step = int(state["step"]) if state is not None and "step" in state else None
    privacy = (state or {}).get("privacy")
    if privacy is not None and privacy.get("partial"):
        privacy = None  # a periodic checkpoint's record: its step count only
    if privacy is None and res is not None and step is not None and res.get("steps") == step:
        privacy = res.get("privacy")  # written by a dpgen whose checkpoints kept no record: the same step's
    ledger = _json(folder / "checkpoints" / "ledger.json")
    ledger_steps = int(ledger["steps"]) if ledger and "steps" in ledger else None
    acc = ((state or {}).get("method") or {}).get("accountant")
    delta = ((state or {}).get("privacy_settings") or {}).get("privacy.delta")
    return RunRecord(folder, res, step, privacy, ledger_steps, acc if isinstance(acc, dict) else None, delta)


def remove_final_results(folder) -> list:
    """Remove what an earlier sitting wrote when it ended (:data:`FINAL_RESULTS`): called before a resumed run
    trains again, so that no file describes weights other than the checkpoint's. Returns the names removed."""
    return remove_run_artefacts(folder, FINAL_RESULTS)


__all__ = ["FINAL_RESULTS", "RunRecord", "load_checkpoint_file", "read_run", "remove_final_results"]
