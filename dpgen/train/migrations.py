"""The one map of dpgen's checkpoint and ledger-file formats: brings an older file to the current format.

A checkpoint (``checkpoints/last.pt``, :class:`dpgen.train.checkpoint.Checkpointer`) and a ledger file
(``checkpoints/ledger.json``, :class:`dpgen.train.publication.LedgerFile`) record the format that wrote them
(:data:`FORMAT_KEY`: :data:`FORMAT`). Loading either calls :func:`migrate`, which runs the :data:`STEPS` after the
file's format in order, so every reader (:mod:`dpgen.train.resume`, ``Ledger.load_state_dict``, the methods'
``load_state_dict``) reads the current format only. One number counts both kinds of file: they share the ledger
state and the privacy settings.

The rules every step keeps:

* a resume is never less strict than before: a privacy setting added later gets the value that reproduces what
  dpgen did before it (a file without it ran under that value; any other value now is a change that
  :func:`dpgen.train.resume.check_resume_settings` refuses by name);
* a file that cannot be brought over safely is refused, naming the file and the fix (:data:`REFUSED`);
* a file written before formats were recorded (before issue 85) has no :data:`FORMAT_KEY`: its format is read
  from its keys (:func:`format_of`) as the oldest that fits, and each step looks for its own change first, so a
  step run on a file that already has it changes nothing.

Not a step: your own data's held-out split changed in e145b20 (2026-12-05, issue 83) and cannot be brought over
(the records that trained differ); ``privacy_settings`` records it as ``dataset.held_out_by`` and a checkpoint of
the old split, without that key, is refused by ``check_resume_settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

#: the key under which a file records its format
FORMAT_KEY = "format"
#: the two kinds of file, as :func:`migrate` names them
CHECKPOINT, LEDGER_FILE = "checkpoint", "ledger file"


@dataclass(frozen=True)
class Step:
    """One change of format: ``to`` the format it brings a file to, ``since`` the commit (date, issue) that made
    the change, ``kinds`` the files it applies to; ``fn(doc, kind)`` changes the file in place and its one-line
    docstring says what changed."""

    to: int
    since: str
    kinds: tuple
    fn: Callable[[Dict[str, Any], str], None]

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def what(self) -> str:
        return (self.fn.__doc__ or "").strip()


#: the steps, in order (each registered by :func:`_step`)
STEPS: List[Step] = []


def _step(to: int, since: str, kinds: tuple = (CHECKPOINT, LEDGER_FILE)):
    def register(fn):
        if STEPS and to <= STEPS[-1].to:
            raise AssertionError(f"migration step {fn.__name__} to format {to} is out of order")
        STEPS.append(Step(to, since, tuple(kinds), fn))
        return fn

    return register


# ---- what each step reads --------------------------------------------------------------------------------
def _ledger(doc: Dict[str, Any], kind: str) -> Optional[Dict[str, Any]]:
    """The dict that holds the ledger (``accountant``, ``prefix_releases``): a checkpoint's method state, a ledger
    file's ``ledger``."""
    led = doc.get("method") if kind == CHECKPOINT else doc.get("ledger")
    return led if isinstance(led, dict) else None


def _is_dpmerf(doc: Dict[str, Any]) -> bool:
    return doc["privacy_settings"].get("method.name") == "dpmerf"


def _fill(settings: Dict[str, Any], added: Dict[str, Any]) -> None:
    for k, v in added.items():
        settings.setdefault(k, v)


# ---- the steps ---------------------------------------------------------------------------------------------
# format 0: no privacy settings (dpgen before 9f12c84, 2026-11-22): refused (REFUSED[0]).
# format 1 (9f12c84, 2026-11-22): privacy settings; the ledger {"accountant": <accountant state>}; a ledger file
# {"ledger", "steps", "privacy_settings"}. Its checkpoints kept the networks under each task's own keys
# ("generator", "model", "g"/"h"): refused (REFUSED[1]); its ledger files are brought over.
# format 2 (1c6e6ed, 2026-11-22): the one training loop, the networks under "models".

@_step(3, "6243e0d, 2026-11-24, issue 24")
def releases_before_training_counted(doc: Dict[str, Any], kind: str) -> None:
    """The ledger counts its releases before training (``prefix_releases``); an older one's are inferred: at most
    one per declared release, from its full-batch entries only (every other entry stays a step)."""
    led = _ledger(doc, kind)
    if led is not None and "history" in led:  # a bare accountant state (Ledger.state_dict before 6243e0d)
        led = {"accountant": led}
        doc["method" if kind == CHECKPOINT else "ledger"] = led
    acc = (led or {}).get("accountant")
    if not isinstance(acc, dict) or "prefix_releases" in led:
        return
    settings = doc["privacy_settings"]
    # the releases before training dpgen made then: DP-SWD's DP mean (method.center=dp_mean), DP-MERF's one release
    declared = 1 if _is_dpmerf(doc) or settings.get("method.center") == "dp_mean" else 0
    full = sum(int(h["num_steps"]) for h in acc.get("history", ()) if float(h["sample_rate"]) >= 1.0)
    led["prefix_releases"] = min(declared, full)


@_step(4, "10f0a5a, 2026-11-28", kinds=(LEDGER_FILE,))
def ledger_file_says_its_private_steps(doc: Dict[str, Any], kind: str) -> None:
    """The ledger file says its per-step mechanism runs (``private_steps``); for an older one every entry below
    sample rate 1 is a step, and when all are at rate 1 every entry may be one."""
    if "private_steps" in doc:
        return
    hist = (((doc.get("ledger") or {}).get("accountant")) or {}).get("history") or []
    doc["private_steps"] = sum(int(h["num_steps"]) for h in hist if float(h["sample_rate"]) < 1) or int(doc["steps"])


@_step(5, "4fc6f88, 2026-11-28")
def dataset_n_train_counted(doc: Dict[str, Any], kind: str) -> None:
    """The privacy settings gain ``dataset.n_train_counted``: False, a declared n (dpgen counted no records before)."""
    _fill(doc["privacy_settings"], {"dataset.n_train_counted": False})


@_step(6, "6fb7b5a, 2026-11-29")
def dataset_validation(doc: Dict[str, Any], kind: str) -> None:
    """The privacy settings gain ``dataset.validation``: 0.0, no record held out for validation."""
    _fill(doc["privacy_settings"], {"dataset.validation": 0.0})


@_step(7, "30292bf, 2026-11-29")
def dpmerf_conv_features(doc: Dict[str, Any], kind: str) -> None:
    """DP-MERF gains random convolutional features: ``method.conv_channels`` 0 (off), ``conv_share`` 0.5 and
    ``conv_pool`` 4 (the defaults, unused when off); its checkpointed state gains ``conv_weights``/``conv_shape``."""
    if not _is_dpmerf(doc):
        return
    _fill(doc["privacy_settings"], {"method.conv_channels": 0, "method.conv_share": 0.5, "method.conv_pool": 4})
    if kind == CHECKPOINT:
        _fill(doc["method"], {"conv_weights": None, "conv_shape": None})


@_step(8, "2d541d4, 2026-12-05, issue 83")
def one_shot_ledger_under_pld(doc: Dict[str, Any], kind: str) -> None:
    """A one-shot release's ledger (DP-MERF's, the only one then) is kept by dp-accounting's PLD, not autodp's
    RDP: its history, a list of full-batch Gaussians, is the same under either and is charged its exact epsilon."""
    led = _ledger(doc, kind)
    acc = (led or {}).get("accountant")
    if not _is_dpmerf(doc) or not isinstance(acc, dict) or acc.get("name") == "pld":
        return
    # only a history of full-batch releases is renamed: any other entry would be a subsampled step, whose epsilon
    # depends on the accountant (the resume then refuses the name, as it did)
    if all(float(h["sample_rate"]) >= 1.0 for h in acc.get("history", ())):
        led["accountant"] = {"name": "pld", "history": acc["history"]}


@_step(9, "8db6e1a, 2026-12-05")
def privacy_secure_rng(doc: Dict[str, Any], kind: str) -> None:
    """The privacy settings gain ``privacy.secure_rng``: False, torch's generators drew the mechanism's noise."""
    _fill(doc["privacy_settings"], {"privacy.secure_rng": False})


@_step(10, "issue 85", kinds=(CHECKPOINT,))
def dpmerf_release_names_its_conv_settings(doc: Dict[str, Any], kind: str) -> None:
    """DP-MERF's release settings name its convolutional features even when off (they were absent then), read
    from the checkpoint's own privacy settings; files record their format (:data:`FORMAT_KEY`)."""
    release = (doc.get("method") or {}).get("settings")
    if not _is_dpmerf(doc) or not isinstance(release, dict) or "conv_channels" in release:
        return
    s = doc["privacy_settings"]
    release.update(conv_channels=int(s["method.conv_channels"]), conv_share=float(s["method.conv_share"]),
                   conv_pool=int(s["method.conv_pool"]))


#: the current format: what :meth:`Checkpointer.save` and :meth:`LedgerFile.save` write
FORMAT = STEPS[-1].to

#: formats that are refused, with why and the fix ({file} is the file's path)
REFUSED = {
    0: ("{kind} {file} records no privacy settings (it was written by an older dpgen, before 9f12c84 of "
        "2026-11-22): its ledger cannot be continued safely. Start a new run (resume=false, or a new "
        "hydra.run.dir)."),
    1: ("checkpoint {file} was written by the dpgen of 2026-11-22 before the one training loop (1c6e6ed): it keeps "
        "its networks under each task's own keys and its optimizer in that task's parameter order, which this "
        "dpgen cannot map safely. Start a new run (resume=false, or a new hydra.run.dir)."),
}


def format_of(doc: Dict[str, Any], kind: str) -> int:
    """The format of a loaded file: the one it records, else (written before formats were recorded) the oldest its
    keys fit: 0 without privacy settings, 1 for a checkpoint without ``models``, else 2."""
    if FORMAT_KEY in doc:
        return int(doc[FORMAT_KEY])
    if not doc.get("privacy_settings"):
        return 0
    if kind == CHECKPOINT and "models" not in doc:
        return 1
    return 2


def migrate(doc: Dict[str, Any], kind: str, path: Any = "") -> Dict[str, Any]:
    """Bring a loaded checkpoint or ledger file (``kind``: :data:`CHECKPOINT` or :data:`LEDGER_FILE`) to
    :data:`FORMAT`, in place, and return it; a format in :data:`REFUSED` raises ValueError naming ``path``."""
    found = format_of(doc, kind)
    if found > FORMAT:
        raise ValueError(f"{kind} {path} has format {found}, newer than this dpgen's {FORMAT}: resume it with the "
                         "dpgen that wrote it (or a newer one)")
    why = REFUSED.get(found)
    if why is not None and (found == 0 or kind == CHECKPOINT):
        raise ValueError(why.format(kind=kind, file=path))
    for step in STEPS:
        if step.to > found and kind in step.kinds:
            step.fn(doc, kind)
    doc[FORMAT_KEY] = FORMAT
    return doc


def stamped(doc: Dict[str, Any]) -> Dict[str, Any]:
    """``doc`` with the current format recorded (what a save writes)."""
    return {**doc, FORMAT_KEY: FORMAT}


__all__ = ["CHECKPOINT", "FORMAT", "FORMAT_KEY", "LEDGER_FILE", "REFUSED", "STEPS", "Step", "format_of", "migrate",
           "stamped"]
