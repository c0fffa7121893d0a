"""What a resumed run must keep: the settings its ledger was spent under (:func:`privacy_settings`: method,
privacy, batch size, data, the steps the noise was calibrated for), checked against the checkpoint's on a resume
(:func:`check_resume_settings`, which names any change) and the calibration it keeps (:func:`calibration_steps`);
:func:`carried_ledger` continues the ledger of an attempt that died before its first checkpoint. Every file read here
is of the current format: an older one was migrated (or refused) when it was loaded (:mod:`dpgen.train.migrations`)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from dpgen.train.publication import LedgerFile


# ---- the settings a ledger was spent under ---------------------------------------------------------------
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
    privacy = {k: v for k, v in (_plain(cfg.privacy) or {}).items() if k not in ("cross_check", "selected_on_private",
                                                                                     "selected_on", "selection_cost")}
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
    noise already released; a fresh run calibrates for the steps it asks. ``state``: a checkpoint or ledger file in
    the current format (an older one was migrated, or refused, when it was loaded: :mod:`dpgen.train.migrations`)."""
    if state is None:
        return int(requested)
    return int(state["privacy_settings"]["calibration_steps"])


def normalise_settings(flat: Dict[str, Any]) -> Dict[str, Any]:
    """Flat settings (``privacy_settings``, or a flattened config.yaml) with ``privacy.accountant`` as the ledger
    it stands for: ``auto`` resolved by the method's sampling (PLD for Poisson, autodp RDP without replacement,
    so a DP-SWD run made when ``rdp`` was the default is the same run), and dropped for a non-private method
    (it keeps no ledger). ``dataset.description`` (prose: it names no record) is left out, so that a reworded
    description resumes."""
    out = {k: v for k, v in flat.items() if k != "dataset.description"}
    name = out.get("privacy.accountant")
    if name is None:
        return out
    if out.get("method.private") is False:
        out.pop("privacy.accountant")
    elif name == "auto" and out.get("method.sampling") in ("poisson", "without_replacement"):
        from dpgen.privacy.accountants import resolve_accountant

        out["privacy.accountant"] = resolve_accountant(name, out["method.sampling"])
    return out


def check_resume_settings(saved: Dict[str, Any], current: Dict[str, Any]) -> None:
    """Refuse to continue a ledger under other privacy settings (it was spent under ``saved``, of the current
    format: a key added later was filled with the value that reproduces what dpgen did before it when the file
    was loaded, :mod:`dpgen.train.migrations`)."""
    saved, current = (normalise_settings(flat) for flat in (saved, current))
    changed = [k for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if changed:
        what = "; ".join(f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in changed)
        raise ValueError(
            f"resume=true with changed privacy settings ({what}). The checkpoint's ledger was spent under "
            "its settings and its noise level was released: resume with the same settings (trainer.steps / "
            "trainer.epochs may change; the noise stays and the budget still stops the run), or start a new "
            "run folder.")



def carried_ledger(cfg, output_dir) -> Optional[Dict[str, Any]]:
    """The ledger file of an earlier attempt that died before its first checkpoint, when a resumed run
    (``resume=true|auto``) finds no checkpoint: None when there is none, or when it holds only releases
    made before training (nothing is published before the first checkpoint, so such releases never left
    that attempt). Otherwise its steps may have been published (log lines, loggers): the new attempt
    continues that ledger, so they stay charged."""
    if not cfg.resume:
        return None
    saved = LedgerFile(output_dir).load()  # in the current format (an older file is migrated when loaded)
    if saved is None or int(saved["steps"]) <= 0:
        return None
    return saved if int(saved["private_steps"]) > 0 else None


def prepare_resume(state, requested_steps: int, cfg, **settings_kw):
    """(steps to calibrate the noise for, privacy settings of the run). A resumed run keeps its
    checkpoint's calibration (its noise was released) and refuses changed privacy settings."""
    steps = calibration_steps(state, requested_steps)
    settings = privacy_settings(cfg, calibration_steps=steps, **settings_kw)
    if state is not None:
        check_resume_settings(state["privacy_settings"], settings)
    return steps, settings


__all__ = ["OWN_SPLIT_KEY", "calibration_steps", "carried_ledger", "check_resume_settings",
           "normalise_settings", "prepare_resume", "privacy_settings"]
