"""A run's folder and what it remembers: :class:`RunFolder` (the files, the checkpoint read on a resume, the ledger
carried from an attempt that died before its first checkpoint, the run id, the earlier attempts' clocks) and
:class:`TrainingState` (what every step changes and a checkpoint saves: the networks, their optimizer and EMA, the
mechanism's generators, the step) and :class:`AttemptClock` (this attempt's clocks beside the earlier ones').

The resume functions live here too: :func:`privacy_settings` is what a ledger was spent under (method, privacy,
batch size, data, the steps the noise was calibrated for); a resumed run keeps the checkpoint's calibration steps
and refuses any other change, naming it (:func:`check_resume_settings`); :func:`carried_ledger` continues the
ledger of an attempt that died before its first checkpoint; :func:`open_run` restores a checkpoint into a state (the
RNGs, the method and its ledger, ``metrics.jsonl`` cut back to the step); :func:`run_state` is what a checkpoint
holds.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from dpgen.train.checkpoint import Checkpointer, rng_state, set_rng_state
from dpgen.train.publication import Publisher, remove_run_artefacts
from dpgen.train.resume import carried_ledger, prepare_resume
from dpgen.utils.io import atomic_write_text


@dataclass
class TrainingState:
    """What each step changes and each checkpoint saves. ``nets`` holds the task's networks by name (what a
    method's ``step`` receives as its models); ``params`` are theirs and the method's own."""

    nets: torch.nn.ModuleDict
    params: List[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    ema: Optional[Any]
    sampler_gen: torch.Generator
    noise_gen: torch.Generator
    step: int = 0

    @property
    def evaluated(self) -> torch.nn.Module:
        """What is evaluated and released: the EMA (post-processing of the iterates, no privacy cost), else the
        trained networks."""
        return self.ema.model if self.ema is not None else self.nets


@dataclass
class AttemptClock:
    """This attempt's clocks beside the earlier attempts' (``before``: the checkpoint's ``elapsed``): a resumed run's
    metrics cover the whole run."""

    before: Dict[str, Any] = field(default_factory=dict)
    t_start: float = field(default_factory=time.time)
    loop_t0: Optional[float] = None
    step0: int = 0

    def start_loop(self, step: int) -> None:
        self.loop_t0, self.step0 = time.time(), int(step)

    def elapsed(self, step: int, last_logs: Dict[str, Any]) -> Dict[str, Any]:
        """This attempt's clocks added to the earlier attempts'."""
        before, now = self.before, time.time()
        loop_s = now - self.loop_t0 if self.loop_t0 is not None else 0.0
        return {"train_seconds": before.get("train_seconds", 0.0) + now - self.t_start,
                "loop_seconds": before.get("loop_seconds", 0.0) + loop_s,
                "loop_steps": before.get("loop_steps", 0) + step - self.step0,
                "last_logs": last_logs or before.get("last_logs", {}), "attempts": before.get("attempts", 0) + 1}

    def wall_seconds(self) -> float:
        return self.before.get("train_seconds", 0.0) + time.time() - self.t_start


class RunFolder:
    """The folder of one run: created with its ``config.yaml`` (its lock is held by ``fit``); :meth:`open` reads
    its checkpoint (a resume) or the ledger of an attempt that stopped before one, else clears what an earlier run
    left; :meth:`publish_with` opens the publisher that writes every record after the ledger."""

    def __init__(self, cfg, output_dir, task_name: str) -> None:
        from dpgen.utils.run_dir import start_run_dir

        self.out: Path = start_run_dir(cfg, output_dir, task_name)
        self.ckpt = Checkpointer(self.out / "checkpoints")
        self.saved: Optional[Dict[str, Any]] = None  # the checkpoint resumed from
        self.carried: Optional[Dict[str, Any]] = None
        self.run_id = ""
        self.settings: Dict[str, Any] = {}
        self.publisher: Optional[Publisher] = None

    def open(self, cfg, requested_steps: int, **settings_kw) -> int:
        """Read the checkpoint (``resume``) or carry a dead attempt's ledger, else start the folder over; fix the
        run id and the privacy settings; returns the steps the noise is calibrated for."""
        self.saved = load_checkpoint(cfg, self.ckpt)
        # no checkpoint: an earlier attempt's ledger that counts steps is continued, else the folder starts over
        self.carried = carried_ledger(cfg, self.out) if self.saved is None else None
        if self.saved is None and self.carried is None:
            fresh_folder(self.out)
        #: which run wrote the checkpoint: every file that describes its weights (selection.json, a release) names
        #: it, and a reader refuses a file of another run that used this folder before (dpgen.tasks.finished_run)
        self.run_id = str((self.saved or {}).get("run_id") or uuid.uuid4().hex)
        calib_steps, self.settings = prepare_resume(self.saved if self.saved is not None else self.carried,
                                                    requested_steps, cfg, **settings_kw)
        return calib_steps

    @property
    def earlier_clocks(self) -> Dict[str, Any]:
        """The earlier attempts' clocks and last published record (a checkpoint's ``elapsed``)."""
        return dict((self.saved or {}).get("elapsed") or {})

    def publish_with(self, cfg, method) -> Publisher:
        self.publisher = Publisher(cfg, self.out, method, self.settings)  # its logger opens at the first record
        return self.publisher


# ---- checkpoints and resuming -------------------------------------------------------------------------------
def load_checkpoint(cfg, ckpt):
    """The checkpoint's state when ``resume=true|auto`` and one exists, else None (a fresh start)."""
    if cfg.resume and ckpt.exists():
        return ckpt.load()
    # (resume=true without a checkpoint or a ledger file was refused before the folder was touched:
    # dpgen.train.loop.refuse_resume_without_checkpoint; resume=auto starts quietly)
    return None


def restore_noise_stream(noise_gen: torch.Generator, saved: torch.Tensor, seed: int, step: int) -> bool:
    """Continue a seeded run's noise stream from a checkpoint's generator state ``saved``; True when it
    did. A state saved on another kind of device (a CUDA generator's 16-byte Philox seed and offset
    against a CPU generator's Mersenne Twister state, or the reverse) cannot be set: the stream then
    restarts from a seed derived from the run's seed and ``step`` (False). A restart from the run's own
    seed would be the wrong choice: on the same device it replays the noise of the first steps, and
    noise used twice cancels in the difference of the two releases."""
    if saved.numel() == noise_gen.get_state().numel():
        noise_gen.set_state(saved)
        return True
    import hashlib

    digest = hashlib.sha256(f"dpgen noise stream, seed {int(seed)}, resumed at step {int(step)}".encode()).digest()
    noise_gen.manual_seed(int.from_bytes(digest[:8], "little") & (2 ** 63 - 1))
    return False


def open_run(cfg, state, publisher, method, sampler_gen, noise_gen, carried=None) -> int:
    """Start or continue a run; returns its step. With a checkpoint ``state`` (the caller has loaded
    its modules): the run's RNG (and, when not secret, the mechanism's) restored, ``metrics.jsonl``
    cut back to its step, the method's state loaded and its ledger brought up to the newest one on
    disk (steps published after the checkpoint count). Without a checkpoint but with ``carried``, the
    ledger file of an attempt that died before its first checkpoint
    (:func:`carried_ledger`): training starts at step 0 and the ledger
    continues from it, so what that attempt published stays charged. Otherwise a fresh start (the
    caller has removed what an earlier run left in the folder: :func:`fresh_folder`)."""
    if state is None:
        if carried is not None:
            method.load_ledger_state(carried["ledger"])
            print(f"[dpgen] {publisher.ledger.path} holds {method.spent_steps()} mechanism steps of an attempt that "
                  "stopped before its first checkpoint: training starts over and the ledger continues from them "
                  f"(epsilon spent so far {method.epsilon():.4f})")
        return 0
    set_rng_state(state["rng"])
    if not cfg.privacy.secret_randomness and "mechanism_rng" in state:
        sampler_gen.set_state(state["mechanism_rng"]["sampler"])
        if not restore_noise_stream(noise_gen, state["mechanism_rng"]["noise"], cfg.seed, int(state["step"])):
            print(f"[dpgen] the checkpoint's mechanism noise was drawn on another kind of device than this run's "
                  f"{noise_gen.device.type} (a run moved between a GPU and a CPU): its generator state cannot "
                  "continue here, so the noise continues from a new stream seeded from the seed and the step (no "
                  "earlier draw is replayed); the run is not bit-identical to an uninterrupted one")
    _truncate_jsonl(publisher.jsonl, int(state["step"]))
    method.load_state_dict(state["method"])
    publisher.ledger.reconcile(method)
    return int(state["step"])


def fresh_folder(output_dir) -> None:
    """A fresh start: remove what an earlier run published in ``output_dir`` together with its ledger
    (:func:`dpgen.train.publication.remove_run_artefacts`), before any logger opens its files, so that
    nothing in the folder outlives the ledger that charged it."""
    removed = remove_run_artefacts(output_dir)
    if removed:
        print(f"[dpgen] a fresh start in {output_dir}: removed the earlier run's {', '.join(removed)}")


def run_state(cfg, step: int, sampler_gen, noise_gen, settings, **parts) -> dict:
    """A checkpoint: ``parts`` (state dicts), the privacy settings its ledger was spent under, the
    run's RNG state and step, and the mechanism's RNG only when it is not secret (reproducible runs)."""

    return {**parts, "rng": rng_state(), "step": step, "privacy_settings": settings,
            **({} if cfg.privacy.secret_randomness else
               {"mechanism_rng": {"sampler": sampler_gen.get_state(), "noise": noise_gen.get_state()}})}


def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                keep.append(line)
        except json.JSONDecodeError:
            break  # a torn last line from a kill: drop it and what follows
    atomic_write_text(path, "".join(l + "\n" for l in keep))


__all__ = ["AttemptClock", "RunFolder", "TrainingState", "fresh_folder", "load_checkpoint", "open_run",
           "restore_noise_stream", "run_state"]
