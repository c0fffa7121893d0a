"""What the one training loop (dpgen.train.loop) is built from: devices and seeds, the
mechanism's random generators, the optimizer, the EMA of the trained networks, and the
checkpoint/resume helpers (the state a checkpoint holds, the privacy settings a resume keeps).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch

from dpgen.train.checkpoint import rng_state, set_rng_state
from dpgen.utils.io import atomic_write_text


class TrainingError(RuntimeError):
    """Training cannot continue (NaN loss, ...); the message says where and what was kept."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def mechanism_generators(cfg, device):
    """Random generators of the privacy mechanism: which records a batch holds, the directions and
    the noise. Subsampling amplification and the Gaussian mechanism both assume this randomness is
    unknown to an adversary, so by default (``privacy.secret_randomness=true``) it is seeded from
    the operating system's entropy, never from the public ``seed``, and never written to a
    checkpoint. ``false`` seeds it from ``seed`` for bit-reproducible experiments: the guarantee
    then holds only while the seed stays secret.
    """
    import secrets

    if cfg.privacy.secret_randomness:
        s1, s2 = secrets.randbits(63), secrets.randbits(63)
    else:
        s1, s2 = cfg.seed + 1_000_003, cfg.seed + 2_000_003
    return torch.Generator().manual_seed(s1), torch.Generator(device=device).manual_seed(s2)


class EMA:
    """Exponential moving average of a model's parameters and buffers (``trainer.ema`` = decay).

    DP training takes many small noisy steps; averaging the iterates cancels much of the noise.
    The average is a function of the released iterates only, so it costs no privacy.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        import copy

        self.decay = float(decay)
        self.model = copy.deepcopy(model)
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        for a, b in zip(self.model.parameters(), model.parameters()):
            a.lerp_(b, 1.0 - self.decay)
        for a, b in zip(self.model.buffers(), model.buffers()):
            if a.dtype.is_floating_point:
                a.lerp_(b, 1.0 - self.decay)
            else:
                a.copy_(b)


def make_optimizer(t, params) -> torch.optim.Optimizer:
    """The optimizer ``trainer.optimizer`` names (adam | sgd | rmsprop) with the trainer's settings."""
    if t.optimizer == "adam":
        return torch.optim.Adam(params, lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    if t.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    raise ValueError(f"trainer.optimizer={t.optimizer!r} is unknown: choose adam, sgd or rmsprop")


def load_checkpoint(cfg, ckpt):
    """The checkpoint's state when ``resume=true|auto`` and one exists, else None (a fresh start)."""
    if cfg.resume and ckpt.exists():
        return ckpt.load()
    # (resume=true without a checkpoint or a ledger file was refused before the folder was touched:
    # dpgen.train.loop.refuse_resume_without_checkpoint; resume=auto starts quietly)
    return None


def prepare_resume(state, requested_steps: int, cfg, **settings_kw):
    """(steps to calibrate the noise for, privacy settings of the run). A resumed run keeps its
    checkpoint's calibration (its noise was released) and refuses changed privacy settings."""
    from dpgen.train.publication import calibration_steps, check_resume_settings, privacy_settings

    steps = calibration_steps(state, requested_steps)
    settings = privacy_settings(cfg, calibration_steps=steps, **settings_kw)
    if state is not None:
        check_resume_settings(state["privacy_settings"], settings)
    return steps, settings


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
    (:func:`dpgen.train.publication.carried_ledger`): training starts at step 0 and the ledger
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
    from dpgen.train.publication import remove_run_artefacts

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
