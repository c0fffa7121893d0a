"""What the domain-adaptation loop (dpgen/tasks/domain_adaptation.py) needs from a method.

A DA method owns its adaptation term, its privacy mechanism on the private target and its
ledger. It implements the one method contract (``dpgen.methods.base.Method``): per step the task
draws a public source batch (any way it likes: the source is public) and asks the method which
target records this step sees (``sample_batch``: the sampling scheme its accountant assumes);
``step({"g": g, "h": h}, batch)`` with ``batch`` a :class:`DABatch` sets ``.grad`` of every
trained parameter (classifier loss on the source + the adaptation term); the loop steps the
optimizer and calls ``account()``.

Only the target is private: the source, its labels and the networks are public, and the DP
guarantee covers the target records only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from dpgen.methods.base import Method


@dataclass
class DABatch:
    """One step's data: a public source batch (xs, ys), the private target batch xt, and the
    training progress in [0, 1] (schedules such as DANN's reversal weight)."""

    xs: torch.Tensor
    ys: torch.Tensor
    xt: torch.Tensor
    progress: float


class DAMethod(Method):

    def __init__(self, cfg, feat_dim: int, num_classes: int, n_target: int, steps: int, batch_size: int,
                 disc: Optional[nn.Module] = None):
        self.cfg = cfg
        self.feat_dim = int(feat_dim)
        self.num_classes = int(num_classes)
        self.n_target = int(n_target)
        self.steps = int(steps)
        self.batch_size = int(batch_size)
        self.adapt_weight = float(cfg.task.adapt_weight)
        self.accountant = None
        self.max_steps: Optional[int] = None
        #: generator of the mechanism's randomness (directions, noise); set by the loop
        self.rng: Optional[torch.Generator] = None
        #: extra trained modules (the domain discriminator of DANN)
        self.modules: Dict[str, nn.Module] = {}

    @classmethod
    def from_config(cls, cfg, info, steps: int, disc: Optional[nn.Module] = None, **extra):
        """``info.n_private``: the private target's size; ``info.feat_dim``: the features' size; ``disc``:
        the domain discriminator of the task's networks (DANN and DP-DANN train it)."""
        return cls(cfg, info.feat_dim, info.num_classes, info.n_private, steps, cfg.trainer.batch_size,
                   disc=disc, **extra)

    def parameters(self) -> List[nn.Parameter]:
        return [p for m in self.modules.values() for p in m.parameters()]

    @staticmethod
    def classification_loss(h, feats, ys):
        return F.cross_entropy(h(feats), ys)

    @staticmethod
    def losses(loss, lc, la) -> Dict[str, torch.Tensor]:
        """What a DA step publishes: its losses, detached (read at log time only)."""
        return {"loss": loss.detach(), "loss_cls": lc.detach(), "loss_adapt": la.detach()}

    # ---- privacy ---------------------------------------------------------------------------
    def privacy_report(self) -> Dict[str, Any]:
        return {"private": False, "epsilon_spent": 0.0,
                "guarantee": "none: non-private baseline (the target data are used without protection)"}

    def state_dict(self) -> Dict[str, Any]:
        return {**self.ledger_state(), "modules": {k: m.state_dict() for k, m in self.modules.items()}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.load_ledger_state(state)
        for k, s in (state.get("modules") or {}).items():
            self.modules[k].load_state_dict(s)


class GradReverse(torch.autograd.Function):
    """Identity forward; multiplies the gradient by -coef backward (Ganin et al. 2016)."""

    @staticmethod
    def forward(ctx, x, coef: float):
        ctx.coef = coef
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.coef * grad, None


def grad_reverse(x: torch.Tensor, coef: float = 1.0) -> torch.Tensor:
    return GradReverse.apply(x, coef)


def ganin_weight(progress: float, enabled: bool = True) -> float:
    """2 / (1 + exp(-10 p)) - 1 for training progress p in [0, 1] (1 when disabled)."""
    import math

    return 2.0 / (1.0 + math.exp(-10.0 * progress)) - 1.0 if enabled else 1.0
