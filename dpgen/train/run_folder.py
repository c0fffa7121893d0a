"""A run's folder and what it remembers: :class:`RunFolder` is entered three times by a run. :meth:`RunFolder.open`
creates the folder with its ``config.yaml`` (its lock is held by ``fit``) and reads the checkpoint of a resumed run,
or the ledger of an attempt that died before its first checkpoint (:func:`dpgen.train.resume.carried_ledger`), else
clears what an earlier run left; it fixes the run id and the privacy settings the ledger is spent under
(:mod:`dpgen.train.resume`). :meth:`RunFolder.restore` opens the publisher and restores a checkpoint into the
training state (networks, optimizer, EMA, RNGs, the method and its ledger, ``metrics.jsonl`` cut back to the step).
:meth:`RunFolder.save` writes a checkpoint after the ledger.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch

from dpgen.train.checkpoint import Checkpointer, rng_state, set_rng_state
from dpgen.train.publication import Publisher, remove_run_artefacts
from dpgen.train.resume import carried_ledger, prepare_resume
from dpgen.utils.io import atomic_write_text


class RunFolder:
    """The folder of one run (``out``), its checkpointer (``ckpt``), the checkpoint resumed from (``saved``) or the
    ledger carried from a dead attempt (``carried``), the run id, the privacy settings, the steps the noise is
    calibrated for and, once :meth:`restore` has run, the publisher that writes every record after the ledger."""

    def __init__(self, out: Path, saved: Optional[Dict[str, Any]], carried: Optional[Dict[str, Any]],
                 settings: Dict[str, Any], calibration_steps: int) -> None:
        self.out, self.saved, self.carried = out, saved, carried
        self.ckpt = Checkpointer(out / "checkpoints")
        self.settings, self.calibration_steps = settings, int(calibration_steps)
        #: which run wrote the checkpoint: every file that describes its weights (selection.json, a release) names
        #: it, and a reader refuses a file of another run that used this folder before (dpgen.tasks.finished_run)
        self.run_id = str((saved or {}).get("run_id") or uuid.uuid4().hex)
        self.publisher: Optional[Publisher] = None

    @classmethod
    def open(cls, cfg, output_dir, task, requested_steps: int) -> "RunFolder":
        """Create the folder with ``config.yaml``; read its checkpoint (``resume=true|auto``) or carry a dead
        attempt's ledger, else remove what an earlier run published there with its ledger (before any logger
        opens its files, so that nothing in the folder outlives the ledger that charged it); fix the privacy
        settings. A resumed run keeps its checkpoint's calibration (its noise was released) and refuses changed
        privacy settings."""
        from dpgen.utils.run_dir import start_run_dir

        out = start_run_dir(cfg, output_dir, task.name)
        ckpt = Checkpointer(out / "checkpoints")
        # (resume=true without a checkpoint or a ledger file was refused before the folder was touched:
        # dpgen.train.loop.refuse_resume_without_checkpoint; resume=auto starts quietly)
        saved = ckpt.load() if cfg.resume and ckpt.exists() else None
        carried = carried_ledger(cfg, out) if saved is None else None
        if saved is None and carried is None:
            removed = remove_run_artefacts(out)
            if removed:
                print(f"[dpgen] a fresh start in {out}: removed the earlier run's {', '.join(removed)}")
        steps, settings = prepare_resume(saved if saved is not None else carried, requested_steps, cfg,
                                         n_private=task.n_private, task_keys=task.task_keys)
        return cls(out, saved, carried, settings, steps)

    @property
    def earlier_clocks(self) -> Dict[str, Any]:
        """The earlier attempts' clocks and last published record (a checkpoint's ``elapsed``)."""
        return dict((self.saved or {}).get("elapsed") or {})

    def restore(self, cfg, method, state) -> int:
        """Open the publisher; start or continue the run and return its step. With a checkpoint: the networks,
        optimizer and EMA loaded, the mechanism's RNG restored (when not secret), ``metrics.jsonl`` cut back to the
        checkpoint's step, the run's RNG restored, the method's state loaded and its ledger brought up to the newest
        one on disk (steps published after the checkpoint count). Without a checkpoint but with a carried ledger
        (:func:`dpgen.train.resume.carried_ledger`): training starts at step 0 and the ledger continues from it, so
        what that attempt published stays charged. Otherwise a fresh start."""
        self.publisher = publisher = Publisher(cfg, self.out, method, self.settings)  # its logger opens later
        saved = self.saved
        if saved is None:
            if self.carried is not None:
                method.load_ledger_state(self.carried["ledger"])
                print(f"[dpgen] {publisher.ledger.path} holds {method.spent_steps()} mechanism steps of an attempt "
                      "that stopped before its first checkpoint: training starts over and the ledger continues "
                      f"from them (epsilon spent so far {method.epsilon():.4f})")
            return 0
        step = int(saved["step"])
        state.nets.load_state_dict(saved["models"])
        state.opt.load_state_dict(saved["optimizer"])
        if state.ema is not None and saved.get("ema") is not None:
            state.ema.model.load_state_dict(saved["ema"])
        if not cfg.privacy.secret_randomness and "mechanism_rng" in saved:
            state.sampler_gen.set_state(saved["mechanism_rng"]["sampler"])
            if not restore_noise_stream(state.noise_gen, saved["mechanism_rng"]["noise"], cfg.seed, step):
                print(f"[dpgen] the checkpoint's mechanism noise was drawn on another kind of device than this run's "
                      f"{state.noise_gen.device.type} (a run moved between a GPU and a CPU): its generator state "
                      "cannot continue here, so the noise continues from a new stream seeded from the seed and the "
                      "step (no earlier draw is replayed); the run is not bit-identical to an uninterrupted one")
        _truncate_jsonl(publisher.jsonl, step)
        set_rng_state(saved["rng"])
        method.load_state_dict(saved["method"])
        publisher.ledger.reconcile(method)
        print(f"[dpgen] resumed from {self.ckpt.path} at step {step} (epsilon spent so far {method.epsilon():.4f})")
        return step

    def save(self, cfg, state, method, record: Dict[str, Any], elapsed: Callable[[], Dict[str, Any]]) -> None:
        """The ledger, then ``checkpoints/last.pt``: the state dicts, the privacy settings the ledger was spent
        under and ``record`` (the privacy of its weights), the run's RNG state and step, and the mechanism's RNG
        only when it is not secret (reproducible runs)."""
        def save() -> None:
            self.ckpt.save({
                "models": state.nets.state_dict(), "optimizer": state.opt.state_dict(),
                "method": method.state_dict(), "ema": state.ema.model.state_dict() if state.ema is not None else None,
                "elapsed": elapsed(), "privacy": record, "run_id": self.run_id,
                "rng": rng_state(), "step": state.step, "privacy_settings": self.settings,
                **({} if cfg.privacy.secret_randomness else
                   {"mechanism_rng": {"sampler": state.sampler_gen.get_state(),
                                      "noise": state.noise_gen.get_state()}})})

        self.publisher.checkpoint(save)


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


__all__ = ["RunFolder", "restore_noise_stream"]
