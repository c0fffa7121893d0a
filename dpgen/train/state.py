"""What the one training loop (dpgen.train.loop) is built from: seeds, the mechanism's random generators, the
optimizer and the EMA of the trained networks, held together as the :class:`TrainingState` that every step changes
and every checkpoint saves (:func:`training_state` builds it), and the :class:`AttemptClock`. The run folder, its
checkpoints and resuming belong to :mod:`dpgen.train.run_folder`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import torch


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
    then holds only while the seed stays secret. ``privacy.secure_rng=true`` (which the config allows
    only with ``secret_randomness=true``) replaces both by :class:`dpgen.utils.noise.SecureGenerator`:
    every draw from the OS CSPRNG, with no state that could be predicted, saved or restored.
    """
    import secrets

    if cfg.privacy.secure_rng:
        from dpgen.utils.noise import SecureGenerator

        return SecureGenerator("cpu"), SecureGenerator(device)
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


def make_optimizer(t, params, capturable: bool = False) -> torch.optim.Optimizer:
    """The optimizer ``trainer.optimizer`` names (adam | sgd | rmsprop) with the trainer's settings; ``capturable``:
    Adam's step counter on the device, so that a CUDA graph can replay its step (trainer.cuda_graph)."""
    if t.optimizer == "adam":
        return torch.optim.Adam(params, lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay,
                                capturable=capturable)
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    if t.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    raise ValueError(f"trainer.optimizer={t.optimizer!r} is unknown: choose adam, sgd or rmsprop")


def training_state(t, models: Dict[str, torch.nn.Module], method, sampler_gen, noise_gen, device) -> "TrainingState":
    """The task's networks by name, their parameters and the method's own, the optimizer ``trainer.optimizer``
    names over them (capturable for a CUDA graph) and the EMA when ``trainer.ema`` is set."""
    nets = torch.nn.ModuleDict(models)
    params = list(nets.parameters()) + list(method.parameters())
    opt = make_optimizer(t, params, capturable=bool(t.cuda_graph) and device.type == "cuda")
    return TrainingState(nets, params, opt, EMA(nets, t.ema) if t.ema else None, sampler_gen, noise_gen)


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


__all__ = ["AttemptClock", "EMA", "TrainingError", "TrainingState", "make_optimizer", "mechanism_generators",
           "seed_everything", "training_state"]
