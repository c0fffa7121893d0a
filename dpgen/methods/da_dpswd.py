"""DP-SWD and SWD for domain adaptation (dp-swd.txt section 4, Algorithm 2).

Loss per step: cross-entropy of h(g(x_s)) on a public source batch + ``task.adapt_weight`` x the
(DP_sigma-)SWD between the source and target representations g(x_s), g(x_t). Only the adaptation
term touches the private target; the classifier loss never sees it.

Row bound (``method.row_bound``). Lemma 2 needs neighbouring target batches to differ in one row by
at most 1 in l2 norm. ``clip`` (default) rescales each representation row to norm <= 1/2 on its
own (min(1, 0.5 / ||z||) z), so one person's row never changes another row: covered by the
analysis. ``batch_max`` is Algorithm 2 lines 10-11 (each batch divided by twice its largest row
norm): one person's row then rescales every other row of the batch, which Lemma 2 does not cover
(reproduction only; the run's metrics say so). ``none``: no bound (not private either).

Target gradient (``method.target_grad``). ``mechanism`` (default): the released quantity is the
Gaussian mechanism M = Z_t U + V on the bounded target rows Z_t (Algorithm 1); it is detached, and
the gradient of the distance flows through the source rows only, so every update is a
post-processing of M and public data. ``through`` also back-propagates through g(x_t), as
Algorithm 2 line 13 publishes grad_theta_g DP-SWD: that gradient contains the Jacobian of g at each
private x_t, which the noise does not cover (reproduction only; said in the metrics).

Privacy. sigma = noise_multiplier * sqrt(w(k, d, delta_bound)) with d the latent dimension and w the
Bernstein bound of Lemma 2 (``method.bound``), calibrated by the privacy core
(:func:`dpgen.privacy.projection.calibrate_dpswd_sigma`) for the run's steps at q = B / N_target, target
batches drawn uniformly without replacement (the amplification autodp's accountant analyses).
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from dpgen.losses.sliced import random_projections, sliced_from_projections
from dpgen.methods.da_base import DAMethod
from dpgen.methods.dpswd import DPSWDMethod, SWDConfig, bound_rows
from dpgen.methods.registry import register
from dpgen.utils.noise import gaussian

ROW_BOUNDS = ("clip", "batch_max", "none")


def bound_representation(z: torch.Tensor, how: str) -> torch.Tensor:
    """Rows of z bounded as ``method.row_bound`` says (see module doc)."""
    if how == "clip":
        return bound_rows(z, "clip")
    if how == "batch_max":  # Algorithm 2 lines 10-11: the batch's own largest norm (not covered by Lemma 2)
        return z / (2.0 * z.norm(dim=1).max().clamp_min(1e-12))
    if how == "none":
        return z
    raise ValueError(f"method.row_bound={how!r} is invalid for domain adaptation: choose one of "
                     f"{', '.join(ROW_BOUNDS)} (representations have no data-independent norm bound, so "
                     "'scale' is not available)")


@register("swd", tasks=("domain_adaptation",))
class DASWD(DAMethod):
    """Non-private sliced Wasserstein alignment of source and target representations."""

    Settings = SWDConfig

    private = False

    def __init__(self, cfg, feat_dim, num_classes, n_target, steps, batch_size, **kw):
        super().__init__(cfg, feat_dim, num_classes, n_target, steps, batch_size)
        m = cfg.method
        self.k = int(cfg.task.k if cfg.task.k is not None else m.k)
        self.order = int(m.order)
        self.row_bound = m.row_bound
        bound_representation(torch.zeros(1, 1), self.row_bound)  # validate the choice now
        self.target_grad = cfg.method.target_grad
        self.sigma = 0.0
        #: bound=frame: directions drawn as stacked orthonormal blocks (its exact sensitivity needs them)
        self.frame = self.private and m.bound == "frame"
        self.directions = m.directions if self.frame else "structured"  # a DP-SWD setting (SWD has none)
        #: SWD_2^2 x d (method.sliced_scale=dim): the distance in the rows' own units (post-processing)
        self.scale = float(self.feat_dim) if cfg.method.sliced_scale == "dim" else 1.0

    def release_target(self, zt: torch.Tensor, U: torch.Tensor, noise: torch.Tensor = None) -> torch.Tensor:
        """The target side of the distance: bounded rows projected on U, plus N(0, sigma^2) noise."""
        rt = bound_representation(zt, self.row_bound)
        if self.private and self.target_grad == "mechanism":
            rt = rt.detach()
        pt = rt @ U
        if self.sigma > 0:
            if noise is None:
                noise = gaussian(pt.shape, generator=self.rng, device=pt.device, dtype=pt.dtype)
            pt = pt + self.sigma * noise
        return pt

    def adaptation_loss(self, zs: torch.Tensor, zt: torch.Tensor, U: torch.Tensor = None,
                        noise_s: torch.Tensor = None, noise_t: torch.Tensor = None) -> torch.Tensor:
        if U is None:
            if self.frame:
                from dpgen.privacy.projection import frame_directions

                U = frame_directions(zs.shape[1], self.k, self.rng, kind=self.directions, dtype=zs.dtype,
                                     device=zs.device)
                if not isinstance(U, torch.Tensor):  # a structured frame: dense here (the features' d is small)
                    U = U.matrix(zs.dtype)
            else:
                U = random_projections(zs.shape[1], self.k, self.rng, zs.device, zs.dtype)
        ps = bound_representation(zs, self.row_bound) @ U
        if self.sigma > 0:  # Algorithm 1 noises both sides
            if noise_s is None:
                noise_s = gaussian(ps.shape, generator=self.rng, device=ps.device, dtype=ps.dtype)
            ps = ps + self.sigma * noise_s
        return self.scale * sliced_from_projections(ps, self.release_target(zt, U, noise_t), self.order)

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        g, h = models["g"], models["h"]
        zs = g(batch.xs)
        lc = self.classification_loss(h, zs, batch.ys)
        la = self.adaptation_loss(zs, g(batch.xt))
        loss = lc + self.adapt_weight * la
        loss.backward()
        return self.losses(loss, lc, la)


@register("dpswd", tasks=("domain_adaptation",))
class DADPSWD(DPSWDMethod, DASWD):
    def __init__(self, cfg, feat_dim, num_classes, n_target, steps, batch_size, **kw):
        super().__init__(cfg, feat_dim, num_classes, n_target, steps, batch_size)
        self._setup_ledger(cfg.method, cfg.privacy, self.feat_dim, n_target, batch_size, steps)

    def caveats(self) -> list:
        out = [] if self.row_bound == "clip" else [f"method.row_bound={self.row_bound}: Lemma 2 does not cover it"]
        if self.target_grad != "mechanism":
            out.append("method.target_grad=through: the update holds the Jacobian of g at private records")
        return out + self.bound_caveats()

    def guarantee_holds(self) -> bool:
        return not self.caveats()

    def privacy_report(self) -> Dict[str, Any]:
        rows = {
            "clip": "clip: each target representation row rescaled on its own to l2 norm <= 1/2, so "
                    "neighbouring batches differ in one row by <= 1 (Lemma 2)",
            "batch_max": "batch_max (Algorithm 2 lines 10-11): each batch divided by twice its largest row "
                         "norm; one person's row rescales every other row, which Lemma 2 does NOT cover",
            "none": "none: rows are NOT bounded; the sensitivity analysis does not apply",
        }[self.row_bound]
        grad = ("mechanism: the target enters the update only through the released noisy projections "
                "M = Z_t U + V (detached); the gradient flows through the public source side"
                if self.target_grad == "mechanism" else
                "through: the gradient also flows through g(x_t) (Algorithm 2 line 13); that gradient holds "
                "the Jacobian of g at each private x_t, which the noise does NOT cover")
        return {
            "private": True,
            "protected_data": "the target domain only (the source, its labels and the networks are public)",
            "mechanism": "Gaussian noise on k random projections of each bounded target representation "
                         "(DP-SWD Algorithm 1 inside Algorithm 2)",
            **self._ledger_report(),
            "k": self.k,
            "d": self.feat_dim,
            "directions": (f"stacked random orthonormal blocks ({self.directions}; bound=frame: exact sensitivity)"
                           if self.frame
                           else "independent uniform unit vectors"),
            "sampling": "without_replacement (uniform random subset of batch_size target rows per step)",
            "row_bound": rows,
            "target_gradient": grad,
            "not_covered": ("the target accuracy in metrics (computed on the private target labels: the paper's "
                            "transductive protocol, kept for reproduction; it is NOT private), "
                            "task.eval_every's target_acc log lines (same), and anything beyond the networks and "
                            "the losses (source terms and distances of released projections)"),
            "guarantee_holds": self.guarantee_holds(),
            "guarantee_caveats": self.caveats(),
        }
