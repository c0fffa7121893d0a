"""DP-DANN: DANN whose target-dependent gradients are clipped per sample and noised (DP-SGD),
the gradient-sanitisation baseline of DP-SWD Table 1 (Wang et al. 2020 style).

Only the target is private. Per step the target batch is a Poisson sample (each record with
probability q = B / N); for each sampled record i the gradient of its domain loss
l_i = BCE(D(g(x_i)), 1) with respect to *all* trained parameters it touches (feature extractor g
and discriminator D) is clipped to l2 norm ``method.clip`` = C and the clipped gradients are summed
(by default through opacus' ghost clipping, which gets the per-sample norms without materialising the
per-sample gradients; torch.func vmap + grad and opacus' GradSampleModule are kept and checked against
it); then N(0, (z C)^2) noise is added to every coordinate; the sum is divided
by the expected batch size B. The discriminator receives +G_D, the feature extractor -lambda G_g
(the gradient reversal, applied after the noise: post-processing). The source terms (classifier
loss, source domain loss) are public and back-propagate normally; they never see the target.

Accounting: the privacy core's ledger for the Poisson-subsampled Gaussian under privacy.accountant (default
``auto``: dp-accounting's PLD, the tightest valid accountant here), noise multiplier z calibrated for the run's
steps, cross-checked with autodp's and opacus' RDP accountants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from dpgen.methods.base import ledger_for, poisson_gaussian
from dpgen.methods.da_base import grad_reverse
from dpgen.methods.dann import DANN, DANNConfig, domain_loss
from dpgen.methods.registry import DataInfo, register
from dpgen.privacy import clipping
from dpgen.privacy.mechanisms import SubsampledGaussian
from dpgen.privacy.validation import check_positive
from dpgen.utils.noise import gaussian

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

@dataclass
class DPDANNConfig(DANNConfig):
    """DP-DANN: DANN whose target-dependent gradients are clipped per sample at C and noised (DP-SGD)."""

    name: str = "dpdann"
    private: bool = True
    sampling: str = "poisson"
    #: per-sample clipping bound C of the target term's gradient
    clip: float = 1.0
    #: null: calibrated to privacy.(epsilon, delta) for the run's steps; a number fixes it
    noise_multiplier: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.clip, "method.clip", "the per-sample gradient clipping bound C")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")


def per_sample_grads(g, disc, xt: torch.Tensor) -> Tuple[List[str], List[torch.Tensor]]:
    """Per-sample gradients of BCE(D(g(x_i)), 1) w.r.t. the parameters of g and D: (names, [n, *shape])."""
    from torch.func import functional_call, grad, vmap

    pg = {k: v.detach() for k, v in g.named_parameters()}
    pd = {k: v.detach() for k, v in disc.named_parameters()}

    def loss_one(pg_, pd_, x):
        z = functional_call(g, pg_, (x.unsqueeze(0),))
        out = functional_call(disc, pd_, (z,)).reshape(-1)
        return F.binary_cross_entropy_with_logits(out, torch.ones_like(out))

    gg, gd = vmap(grad(loss_one, argnums=(0, 1)), in_dims=(None, None, 0))(pg, pd, xt)
    names = [f"g.{k}" for k in pg] + [f"d.{k}" for k in pd]
    return names, [gg[k] for k in pg] + [gd[k] for k in pd]


class OpacusPerSample:
    """Per-sample gradients of BCE(D(g(x_i)), 1) through opacus' GradSampleModule
    (:class:`dpgen.privacy.per_sample.PerSampleGrads`); the same quantity as :func:`per_sample_grads`
    (a test checks it; half as fast)."""

    def __init__(self, g, disc):
        from dpgen.privacy.per_sample import PerSampleGrads

        self.names = [f"g.{k}" for k, _ in g.named_parameters()] + [f"d.{k}" for k, _ in disc.named_parameters()]
        self.grads = PerSampleGrads([g, disc], _bce_ones)

    def __call__(self, xt: torch.Tensor) -> Tuple[List[str], List[torch.Tensor]]:
        return self.names, self.grads(xt)


def _bce_ones(out: torch.Tensor) -> torch.Tensor:
    out = out.reshape(-1)
    return F.binary_cross_entropy_with_logits(out, torch.ones_like(out), reduction="none")


class OpacusGhostClip:
    """The clipped per-sample sum of the target term's gradients w.r.t. (g, D), by the privacy library's
    :class:`dpgen.privacy.per_sample.GhostClippedSum` (opacus' fast gradient clipping; a non-finite record
    contributes exactly 0; the sums in float64). About 1.7x as fast as :func:`per_sample_grads` +
    :func:`dpgen.privacy.clipping.clipped_sum` on the digits networks (B = 128, one thread: 0.15 s against 0.26 s,
    issue 83; ``scripts/bench_da.py``); a test checks both give the same sum and norms."""

    def __init__(self, g, disc, clip: float):
        from dpgen.privacy.per_sample import GhostClippedSum

        self.clip = float(clip)
        self.names = [f"g.{k}" for k, _ in g.named_parameters()] + [f"d.{k}" for k, _ in disc.named_parameters()]
        self.ghost = GhostClippedSum([g, disc], _bce_ones, self.clip)

    def __call__(self, xt: torch.Tensor) -> Tuple[List[str], List[torch.Tensor], torch.Tensor]:
        """(names, clipped sums, per-sample gradient norms before clipping)."""
        sums, norms, _ = self.ghost(xt)
        return self.names, sums, norms


@register("dpdann", tasks=("domain_adaptation",))
class DPDANN(DANN):
    Settings = DPDANNConfig
    private = True
    sampling = "poisson"



    @classmethod
    def declare(cls, cfg, info, steps: int) -> SubsampledGaussian:
        """Poisson batches of the private target, per-sample clipping of the target term (sensitivity C)."""
        return poisson_gaussian(cfg, info, cfg.method.clip, "DP-DANN (target term)")

    def __init__(self, cfg, feat_dim, num_classes, n_target, steps, batch_size, disc=None, **kw):
        super().__init__(cfg, feat_dim, num_classes, n_target, steps, batch_size, disc=disc)
        m, p = cfg.method, cfg.privacy
        if batch_size > n_target:
            raise ValueError(f"trainer.batch_size={batch_size} is larger than the private target "
                             f"({n_target} records): lower trainer.batch_size.")
        self.clip = float(m.clip)
        self.sample_rate = batch_size / n_target
        self.delta = float(p.delta)
        self.epsilon_budget = float(p.epsilon)
        # the declared release (task=accounting accounts the same value): q = B / n_target
        self.ledger = ledger_for(self.declare(cfg, DataInfo(n_target), steps), p, steps)
        self.noise_multiplier = self.ledger.noise_multiplier
        self.max_steps = self.ledger.max_steps()
        self.last_norms = None
        #: how the clipped per-sample sum is computed: "ghost" (default; opacus' fast gradient clipping,
        #: 0.15 s for B = 128 digits on one thread beside other jobs, its float64 pass 2 included; 0.09 s before
        #: it), "func" (torch.func vmap + grad, per-sample gradients materialised, 0.26 s) or "opacus" (opacus'
        #: GradSampleModule, materialised)
        self.per_sample = "ghost"
        self._opacus = None
        self._ghost = None

    def private_target_grads(self, g, xt: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The noised, clipped sum of the target's per-sample gradients / B (the DP release)."""
        disc = self.modules["discriminator"]
        named = [(f"g.{k}", v) for k, v in g.named_parameters()] + \
                [(f"d.{k}", v) for k, v in disc.named_parameters()]
        if xt.shape[0] > 0 and self.per_sample == "ghost":
            if self._ghost is None:
                self._ghost = OpacusGhostClip(g, disc, self.clip)
            names, clipped_sums, self.last_norms = self._ghost(xt)
            sums = dict(zip(names, clipped_sums))
        elif xt.shape[0] > 0:
            if self.per_sample == "opacus":
                if self._opacus is None:
                    self._opacus = OpacusPerSample(g, disc)
                names, grads = self._opacus(xt)
            else:
                names, grads = per_sample_grads(g, disc, xt)
            clipped, self.last_norms = clipping.clipped_sum(grads, self.clip)  # float64 sums
            sums = dict(zip(names, clipped))
        else:  # an empty Poisson batch: noise only
            sums = {nm: torch.zeros_like(v, dtype=torch.float64) for nm, v in named}
        std = self.noise_multiplier * self.clip
        out = {}
        for nm, v in named:
            noise = gaussian(v.shape, generator=self.rng, device=v.device, dtype=v.dtype)
            # the noise added to the float64 sum, then rounded to the parameter's dtype (dpgen.privacy.clipping)
            out[nm] = clipping.release_sum(sums[nm], noise, std, v.dtype) / self.batch_size
        return out

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        g, h, disc = models["g"], models["h"], self.modules["discriminator"]
        lam = self.reversal_weight(batch.progress)
        zs = g(batch.xs)
        lc = self.classification_loss(h, zs, batch.ys)
        ls = domain_loss(disc, grad_reverse(zs, lam), 0.0)
        (lc + ls).backward()  # public: the source only
        priv = self.private_target_grads(g, batch.xt)
        for k, v in g.named_parameters():
            v.grad = (v.grad if v.grad is not None else torch.zeros_like(v)) - lam * priv[f"g.{k}"]
        for k, v in disc.named_parameters():
            v.grad = (v.grad if v.grad is not None else torch.zeros_like(v)) + priv[f"d.{k}"]
        return self.losses(lc + ls, lc, ls)

    def privacy_report(self) -> Dict[str, Any]:
        return {
            "private": True,
            "protected_data": "the target domain only (the source, its labels and the networks are public)",
            "mechanism": "DP-SGD on the target term: per-sample gradients of the target domain loss w.r.t. "
                         "the feature extractor and the discriminator clipped to C, summed, Gaussian noise z C",
            **self.ledger.report(),
            "delta": self.delta,
            "clip": self.clip,
            "sensitivity": self.clip,  # add/remove one target record moves the clipped sum by <= C
            "noise_std": self.noise_multiplier * self.clip,
            "bound": f"per-sample clipping at C = {self.clip}",
            "per_sample_impl": {"ghost": "opacus fast gradient clipping (ghost norms)",
                                "func": "torch.func vmap + grad", "opacus": "opacus GradSampleModule"}[self.per_sample],
            "max_steps_in_budget": self.max_steps,
            "row_bound": "not applicable: gradients are clipped per target sample",
            "not_covered": ("the target accuracy in metrics (computed on the private target labels: the paper's "
                            "transductive protocol, kept for reproduction; it is NOT private), task.eval_every's "
                            "target_acc log lines (same)"),
            "guarantee_holds": True,
        }
