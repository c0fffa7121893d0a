"""What the one training loop (dpgen.train.loop) is built from: seeds, the mechanism's random generators, the
optimizer and the EMA of the trained networks. Checkpoints and resuming belong to the run (dpgen.train.run).
"""

from __future__ import annotations

import random

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
