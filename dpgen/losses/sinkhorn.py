"""The empirical Sinkhorn divergence of DP-Sinkhorn (dp-sinkhorn.txt, Eq. 2, 4, 5 and appendix A).

API like POT / geomloss: ``sinkhorn_divergence(x, y, epsilon=0.05)``.

Cost and regularisation. The paper's cost is the squared Euclidean distance
c(x, y) = ||x - y||^2 between flattened samples and its entropy regularisation is epsilon
(0.05 for MNIST / FashionMNIST, 5 for CelebA), Eq. 1:

    W_{c,eps}(mu, nu) = min_pi <c, pi> + eps KL(pi | mu x nu),
    S_{c,eps}(mu, nu) = 2 W(mu, nu) - W(mu, mu) - W(nu, nu)      (Eq. 2, Feydy et al. 2019)

geomloss' ``SamplesLoss("sinkhorn", p=2, blur=b)`` uses the cost ||x - y||^2 / 2 and
regularisation blur^p = b^2. Halving both the cost and the regularisation halves W (the
optimal plan is unchanged), so W_paper(eps) = 2 W_geomloss(blur = sqrt(eps / 2)). geomloss'
debiased value is W(x, y) - W(x, x) / 2 - W(y, y) / 2, half of Eq. 2, hence

    S_paper(eps) = 4 * SamplesLoss("sinkhorn", p=2, blur=sqrt(eps / 2), debias=True)

which is what :func:`sinkhorn_divergence` returns (the paper's units; its gradient in the
generated batch is Algorithm 1's grad of 2 W(X, Y) - W(X, X)). Units matter for DP-Sinkhorn
only through the clipping bound C: the batch gradient is clipped to C before noise is added.
(tests/methods/test_dpsinkhorn.py checks the value against POT's log-domain Sinkhorn.) The
paper's authors used geomloss "with all other hyperparameters at their default values";
they may have passed blur = eps directly (regularisation eps^2 on the halved cost), which the
paper's text does not settle: ``geomloss_blur`` reports the mapping used here.

Class conditioning (Eq. 5): rows are [x, alpha_c * onehot(l)], so the cost of a pair with
different labels grows by 2 alpha_c^2 and the transport plan moves to same-label pairs.

``backend``: ``tensorized`` (dense N x M cost matrix, best at the batch sizes DP-Sinkhorn uses
on a CPU), ``online`` (KeOps; only when pykeops imports and compiles), ``auto`` (geomloss'
choice: tensorized for small batches; never KeOps when pykeops is absent).

:func:`sinkhorn_divergence_pot` computes the same divergence with POT (``ot.sinkhorn2``,
log-domain, torch backend) as an independent reference, and :func:`transport_plan` the
entropic plan between two batches (POT; to inspect where its mass goes).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

import torch

from dpgen.utils.labels import one_hot_or_zero

BACKENDS = ("auto", "tensorized", "online", "static")


def geomloss_blur(epsilon: float) -> float:
    """geomloss' ``blur`` for the paper's regularisation ``epsilon`` on the cost ||x - y||^2."""
    if not epsilon > 0:
        raise ValueError(f"epsilon={epsilon} is invalid: the entropy regularisation must be > 0")
    return math.sqrt(epsilon / 2.0)


@lru_cache(maxsize=None)
def keops_available() -> bool:
    try:
        import pykeops  # noqa: F401
        import pykeops.torch  # noqa: F401

        return True
    except Exception:  # ImportError, or a broken compiler setup
        return False


def epsilon_schedule(diameter: float, blur: float, scaling: float) -> list:
    """The annealed temperatures of epsilon-scaling for p = 2 (geomloss' schedule): diameter^2, then
    geometric steps of ratio scaling^2 down to blur^2, then blur^2."""
    if not (diameter > 0 and blur > 0 and 0 < scaling < 1):
        raise ValueError(f"epsilon_schedule needs diameter > 0, blur > 0 and 0 < scaling < 1, got diameter={diameter}, "
                         f"blur={blur}, scaling={scaling}")
    hi, lo, step = 2 * math.log(diameter), 2 * math.log(blur), 2 * math.log(scaling)
    n = max(0, math.ceil((lo - hi) / step))  # the values hi, hi + step, ... strictly above lo
    return [diameter ** 2] + [math.exp(hi + i * step) for i in range(n)] + [blur ** 2]


def row_box_diameter(dim: int, low: float = -1.0, high: float = 1.0, num_classes: int = 0,
                     alpha_c: float = 0.0) -> float:
    """A data-independent diameter for :func:`sinkhorn_static`: that of the box holding every row
    [image in [low, high]^dim, alpha_c * onehot] (geomloss measures the batch's own box instead,
    which needs a host sync per call)."""
    return math.sqrt(dim * (high - low) ** 2 + num_classes * alpha_c ** 2)


def _softmin(eps: float, cost: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """-eps log sum_j exp(h_j - C_ij / eps), for every row i."""
    return -eps * torch.logsumexp(h.unsqueeze(0) - cost / eps, dim=1)


def sinkhorn_static(x: torch.Tensor, y: torch.Tensor, blur: float, *, diameter: float, scaling: float = 0.5,
                    debias: bool = True, y_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """geomloss' tensorized debiased Sinkhorn loss (p = 2, cost ||x - y||^2 / 2, uniform weights), computed
    with a schedule fixed by ``diameter``: no data-dependent control flow and no host synchronisation,
    so a step using it can be captured in a CUDA graph. Same algorithm as geomloss' ``sinkhorn_loop``
    (symmetric log-domain updates averaged with the previous potentials, epsilon-scaling from
    diameter^2 to blur^2, the loop without autograd, and one last extrapolation through which the
    gradient flows via the cost matrices, each with its second argument detached), so at the same diameter the values agree to float rounding
    (tests/methods/test_dpsinkhorn.py). Returns geomloss' value (multiply by 4 for the paper's S, see
    :func:`sinkhorn_divergence`).

    ``y_mask`` (bool per row of ``y``, optional): the rows of ``y`` to keep; the others get weight 0 (log-weight
    -inf: they take no part in any softmin, and their potentials are left out of the final sum), and the
    kept ones share the mass uniformly, as if the others were not there, without a host read. With every row
    kept the arithmetic is the unmasked one (the same values)."""
    eps_list = epsilon_schedule(diameter, blur, scaling)
    a_log = torch.full((x.shape[0],), -math.log(x.shape[0]), dtype=x.dtype, device=x.device)
    b_log = torch.full((y.shape[0],), -math.log(y.shape[0]), dtype=y.dtype, device=y.device)
    keep, rescale = None, None
    if y_mask is not None:
        keep = y_mask.reshape(-1).to(device=y.device, dtype=torch.bool)
        n_keep = keep.sum().to(torch.float64).clamp_min(1.0)
        b_log = torch.where(keep, (-torch.log(n_keep)).to(y.dtype), torch.full_like(b_log, float("-inf")))
        rescale = (y.shape[0] / n_keep).to(y.dtype)  # mean over all rows x n / n_kept: 1.0 when all are kept

    def y_mean(v: torch.Tensor) -> torch.Tensor:
        if keep is None:
            return v.mean()
        return torch.where(keep, v, torch.zeros((), dtype=v.dtype, device=v.device)).mean() * rescale
    # the second argument detached: the gradient of each potential flows through its own point only,
    # which at the fixed point is the gradient of the loss (envelope theorem), as in geomloss
    c_xy, c_yx = _sq_dist(x, y.detach()) / 2, _sq_dist(y, x.detach()) / 2
    c_xx, c_yy = (_sq_dist(x, x.detach()) / 2, _sq_dist(y, y.detach()) / 2) if debias else (None, None)
    with torch.no_grad():
        cxy, cyx = c_xy.detach(), c_yx.detach()
        cxx, cyy = (c_xx.detach(), c_yy.detach()) if debias else (None, None)
        eps = eps_list[0]
        g_ab, f_ba = _softmin(eps, cyx, a_log), _softmin(eps, cxy, b_log)
        if debias:
            f_aa, g_bb = _softmin(eps, cxx, a_log), _softmin(eps, cyy, b_log)
        for eps in eps_list:
            ft_ba, gt_ab = _softmin(eps, cxy, b_log + g_ab / eps), _softmin(eps, cyx, a_log + f_ba / eps)
            f_ba, g_ab = 0.5 * (f_ba + ft_ba), 0.5 * (g_ab + gt_ab)
            if debias:
                ft_aa, gt_bb = _softmin(eps, cxx, a_log + f_aa / eps), _softmin(eps, cyy, b_log + g_bb / eps)
                f_aa, g_bb = 0.5 * (f_aa + ft_aa), 0.5 * (g_bb + gt_bb)
    eps = eps_list[-1]  # the last extrapolation, differentiable through the costs
    f_ba, g_ab = _softmin(eps, c_xy, b_log + g_ab / eps), _softmin(eps, c_yx, a_log + f_ba / eps)
    if not debias:
        return f_ba.mean() + y_mean(g_ab)
    f_aa, g_bb = _softmin(eps, c_xx, a_log + f_aa / eps), _softmin(eps, c_yy, b_log + g_bb / eps)
    return (f_ba - f_aa).mean() + y_mean(g_ab - g_bb)


def _sq_dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """||x_i - y_j||^2 as geomloss' tensorized backend computes it (expanded form, differentiable)."""
    return (x * x).sum(1, keepdim=True) - 2 * x @ y.T + (y * y).sum(1).unsqueeze(0)


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is invalid: choose one of {', '.join(BACKENDS)}")
    if backend == "online" and not keops_available():
        raise ValueError("backend='online' (method.backend) needs pykeops (KeOps), which does not import here: "
                         "use backend='tensorized' (or 'auto')")
    if backend == "auto":
        return "tensorized" if not keops_available() else "auto"
    return backend


@lru_cache(maxsize=32)
def _samples_loss(blur: float, scaling: float, backend: str, debias: bool, potentials: bool = False,
                  diameter: Optional[float] = None):
    from geomloss import SamplesLoss

    return SamplesLoss("sinkhorn", p=2, blur=blur, scaling=scaling, debias=debias, backend=backend,
                       potentials=potentials, diameter=diameter)


def conditional_rows(x: torch.Tensor, labels: Optional[torch.Tensor], num_classes: int,
                     alpha_c: float, check: bool = True) -> torch.Tensor:
    """Eq. 5: flatten ``x`` and append ``alpha_c * onehot(labels)`` (nothing when alpha_c = 0).

    ``check=False`` skips the label-range check (a host read of the labels): the training step uses it,
    with the dataset's labels checked once at setup when they are in memory and the generated ones in range
    by construction; a label outside [0, num_classes) (a lazily read dataset) then gets an all-zero label
    part instead of an exception (``dpgen.utils.labels.one_hot_or_zero``), and the private mechanisms drop
    that record (:func:`sinkhorn_divergence`'s ``y_mask``, ``Sinkhorn.finite_records``)."""
    rows = x.flatten(1)
    if num_classes <= 0 or alpha_c == 0:
        return rows
    if labels is None:
        raise ValueError(f"the class-conditional cost (alpha_c={alpha_c}, {num_classes} classes) needs labels "
                         "for both batches: pass labels, or set method.alpha_c=0 for an unconditional cost")
    labels = labels.long().flatten()
    if labels.shape[0] != rows.shape[0]:
        raise ValueError(f"cost/label mismatch: {rows.shape[0]} samples but {labels.shape[0]} labels")
    if check and labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"cost/label mismatch: labels must lie in [0, {num_classes - 1}], got "
                         f"[{int(labels.min())}, {int(labels.max())}]; check dataset.num_classes")
    return torch.cat([rows, alpha_c * one_hot_or_zero(labels, num_classes, rows.dtype)], dim=1)


def _check_pair(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.dim() != 2 or y.dim() != 2:
        raise ValueError(f"sinkhorn_divergence takes (N, D) and (M, D) rows, got shapes {tuple(x.shape)} and "
                         f"{tuple(y.shape)}: flatten the samples first (see conditional_rows)")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"cost/label mismatch: generated rows have {x.shape[1]} features, real rows "
                         f"{y.shape[1]}: both batches need the same image shape and the same label encoding")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"sinkhorn_divergence needs non-empty batches, got {x.shape[0]} and {y.shape[0]} rows "
                         "(an empty Poisson batch is skipped and accounted by the trainer)")


def sinkhorn_divergence(x: torch.Tensor, y: torch.Tensor, epsilon: float = 0.05, *, scaling: float = 0.5,
                        backend: str = "tensorized", debias: bool = True,
                        diameter: Optional[float] = None, y_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Debiased Sinkhorn divergence S_{c,eps}(x, y) with c = ||x - y||^2 (uniform weights).

    ``x`` (N, D) and ``y`` (M, D) rows; differentiable in both. ``scaling`` is geomloss'
    epsilon-scaling ratio (its default 0.5). ``debias=False`` gives W_{c,eps}(x, y) instead.
    ``diameter``: the start of the epsilon-scaling schedule (default: the batches' bounding box, as
    geomloss measures it: one host sync). ``backend="static"`` (:func:`sinkhorn_static`) needs it
    fixed (e.g. :func:`row_box_diameter`) when it must not synchronise.

    ``y_mask`` (bool per row of ``y``): rows of ``y`` to leave out (weight 0; the others uniform), without a host
    read; a masked row is replaced by 0 first, so that a non-finite value there cannot reach the others through
    the shared cost matrices. DP-Sinkhorn passes the records whose label lies in range
    (``dpgen.utils.labels``): a record with an out-of-range label contributes nothing.
    """
    _check_pair(x, y)
    blur = geomloss_blur(epsilon)
    scale = 4.0 if debias else 2.0
    if y_mask is not None:
        y_mask = y_mask.reshape(-1).to(device=y.device, dtype=torch.bool)
        y = torch.where(y_mask.unsqueeze(1), y, torch.zeros((), dtype=y.dtype, device=y.device))
    if resolve_backend(backend) == "static":
        d = float(diameter) if diameter is not None else _box_diameter(x.detach(), y.detach())
        return scale * sinkhorn_static(x, y, blur, diameter=d, scaling=float(scaling), debias=bool(debias),
                                       y_mask=y_mask)
    loss = _samples_loss(blur, float(scaling), resolve_backend(backend), bool(debias),
                         diameter=None if diameter is None else float(diameter))
    if y_mask is None:
        return scale * loss(x.contiguous(), y.contiguous())
    a = torch.full((x.shape[0],), 1.0 / x.shape[0], dtype=x.dtype, device=x.device)
    b = y_mask.to(y.dtype) / y_mask.sum().clamp_min(1).to(y.dtype)
    return scale * loss(a, x.contiguous(), b, y.contiguous())


def _box_diameter(x: torch.Tensor, y: torch.Tensor) -> float:
    """The diameter of the bounding box of both batches (geomloss' default; a host sync)."""
    lo = torch.minimum(x.min(0).values, y.min(0).values)
    hi = torch.maximum(x.max(0).values, y.max(0).values)
    return float((hi - lo).norm())


def record_terms(x: torch.Tensor, y: torch.Tensor, epsilon: float = 0.05) -> torch.Tensor:
    """Per-record terms g_i = -eps log( (1/N) sum_j exp(-||x_j - y_i||^2 / eps) ), i over the rows of ``y``.

    g is the c-transform of the zero potential on ``x``: the dual of W_{c,eps}(x, y) evaluated at
    (f = 0, g), the first half-iteration of Sinkhorn, so mean_i g_i <= W_{c,eps}(x, y). Unlike W,
    this lower bound is a sum over the records of ``y``, each term depending on its own record only:
    the loss per-sample clipping (DP-SGD) needs. With a small eps each record pulls its nearest
    generated row (its nearest same-label row under the class-conditional cost of Eq. 5).
    """
    _check_pair(x, y)
    if not epsilon > 0:
        raise ValueError(f"epsilon={epsilon} is invalid: the entropy regularisation must be > 0")
    cost = torch.cdist(y, x).pow(2)  # (M, N)
    return -epsilon * (torch.logsumexp(-cost / epsilon, dim=1) - math.log(x.shape[0]))


def sinkhorn_iterations(x: torch.Tensor, y: torch.Tensor, epsilon: float = 0.05, scaling: float = 0.5) -> int:
    """How many Sinkhorn iterations geomloss runs for these rows (its epsilon-scaling schedule)."""
    from geomloss._legacy.sinkhorn_divergence import epsilon_schedule, max_diameter

    d = max_diameter(x.detach(), y.detach())
    return len(epsilon_schedule(2, d, geomloss_blur(epsilon), scaling))


def _pot_entropic_ot(x, y, epsilon, num_iter_max, tol, with_iters=False):
    """W_{c,eps}(x, y) (dual value, the quantity geomloss computes) with POT's log-domain Sinkhorn."""
    import ot

    a = torch.full((x.shape[0],), 1.0 / x.shape[0], dtype=x.dtype, device=x.device)
    b = torch.full((y.shape[0],), 1.0 / y.shape[0], dtype=y.dtype, device=y.device)
    M = ot.dist(x, y)  # squared Euclidean
    _, log = ot.sinkhorn(a, b, M, epsilon, method="sinkhorn_log", numItermax=num_iter_max, stopThr=tol,
                         log=True)
    # P = diag(u) K diag(v); the dual potentials are f = eps (log u - log a), g = eps (log v - log b),
    # and at convergence W = <a, f> + <b, g> (the mass term of the dual vanishes)
    f = epsilon * (log["log_u"] - torch.log(a))
    g = epsilon * (log["log_v"] - torch.log(b))
    w = (a * f).sum() + (b * g).sum()
    return (w, int(log["niter"])) if with_iters else w


def sinkhorn_divergence_pot(x: torch.Tensor, y: torch.Tensor, epsilon: float = 0.05, *, num_iter_max: int = 10000,
                            tol: float = 1e-9) -> torch.Tensor:
    """The same S_{c,eps} with POT (independent reference; values only, no gradient promise)."""
    _check_pair(x, y)
    return (2 * _pot_entropic_ot(x, y, epsilon, num_iter_max, tol) - _pot_entropic_ot(x, x, epsilon, num_iter_max, tol)
            - _pot_entropic_ot(y, y, epsilon, num_iter_max, tol))


def pot_sinkhorn2_divergence(x: torch.Tensor, y: torch.Tensor, epsilon: float = 0.05, *, num_iter_max: int = 1000,
                             tol: float = 1e-9):
    """``ot.sinkhorn2`` (log domain, torch backend, same cost and regularisation), debiased:
    2 OT(x, y) - OT(x, x) - OT(y, y) with POT's linear loss <P, C>. Returns (value, iterations)."""
    import ot

    _check_pair(x, y)
    total, iters = 0.0, 0
    for coef, (u, v) in ((2.0, (x, y)), (-1.0, (x, x)), (-1.0, (y, y))):
        a = torch.full((u.shape[0],), 1.0 / u.shape[0], dtype=u.dtype, device=u.device)
        b = torch.full((v.shape[0],), 1.0 / v.shape[0], dtype=v.dtype, device=v.device)
        val, log = ot.sinkhorn2(a, b, ot.dist(u, v), epsilon, method="sinkhorn_log", numItermax=num_iter_max,
                                stopThr=tol, log=True)
        total = total + coef * val
        iters += int(log["niter"])
    return total, iters


def transport_plan(x: torch.Tensor, y: torch.Tensor, epsilon: float = 0.05, num_iter_max: int = 10000,
                   tol: float = 1e-7) -> torch.Tensor:
    """The entropic optimal plan P (N x M, sums to 1) between rows x and y under c = ||x - y||^2
    (POT's log-domain Sinkhorn, run to convergence: to inspect where the plan puts its mass)."""
    import ot

    _check_pair(x, y)
    with torch.no_grad():
        a = torch.full((x.shape[0],), 1.0 / x.shape[0], dtype=x.dtype, device=x.device)
        b = torch.full((y.shape[0],), 1.0 / y.shape[0], dtype=y.dtype, device=y.device)
        return ot.sinkhorn(a, b, ot.dist(x, y), epsilon, method="sinkhorn_log", numItermax=num_iter_max,
                           stopThr=tol)


__all__ = ["BACKENDS", "conditional_rows", "epsilon_schedule", "geomloss_blur", "keops_available",
           "pot_sinkhorn2_divergence", "row_box_diameter", "sinkhorn_divergence", "sinkhorn_divergence_pot",
           "sinkhorn_iterations", "sinkhorn_static", "transport_plan"]
