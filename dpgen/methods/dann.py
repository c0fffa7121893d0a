"""DANN (Ganin et al. 2016) for domain adaptation: a domain discriminator trained through a
gradient-reversal layer (non-private baseline of DP-SWD Table 1).

Per step: cross-entropy of h(g(x_s)) on the source + the discriminator's binary cross-entropy
(source = 0, target = 1) on g(x_s), g(x_t) behind a gradient reversal of weight
``task.adapt_weight`` x (Ganin's schedule 2 / (1 + exp(-10 p)) - 1 when ``method.grl_schedule``):
the discriminator learns to tell the domains apart, the feature extractor to confuse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import torch
import torch.nn.functional as F

from dpgen.methods.da_base import DAMethod, ganin_weight, grad_reverse
from dpgen.methods.registry import register
from dpgen.utils.settings import MethodConfig

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

@dataclass
class DANNConfig(MethodConfig):
    """DANN (Ganin et al. 2016): a domain discriminator trained through gradient reversal (non-private)."""

    name: str = "dann"
    private: bool = False
    #: Ganin et al.'s schedule 2 / (1 + exp(-10 p)) - 1 of the gradient reversal weight (false: constant 1)
    grl_schedule: bool = True


def domain_loss(disc, z: torch.Tensor, domain: float) -> torch.Tensor:
    out = disc(z).squeeze(-1)
    return F.binary_cross_entropy_with_logits(out, torch.full_like(out, float(domain)))


@register("dann", tasks=("domain_adaptation",))
class DANN(DAMethod):
    Settings = DANNConfig
    private = False

    def __init__(self, cfg, feat_dim, num_classes, n_target, steps, batch_size, disc=None, **kw):
        super().__init__(cfg, feat_dim, num_classes, n_target, steps, batch_size)
        if disc is None:
            raise ValueError("DANN needs a domain discriminator (make_da_nets builds it)")
        self.modules = {"discriminator": disc}
        self.schedule = bool(cfg.method.grl_schedule)

    def reversal_weight(self, progress: float) -> float:
        return self.adapt_weight * ganin_weight(progress, self.schedule)

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        g, h, disc = models["g"], models["h"], self.modules["discriminator"]
        lam = self.reversal_weight(batch.progress)
        zs, zt = g(batch.xs), g(batch.xt)
        lc = self.classification_loss(h, zs, batch.ys)
        ld = domain_loss(disc, grad_reverse(zs, lam), 0.0) + domain_loss(disc, grad_reverse(zt, lam), 1.0)
        loss = lc + ld
        loss.backward()
        return self.losses(loss, lc, ld)
