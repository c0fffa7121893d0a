"""Entropic W_p (no debiasing), plain W_p and the Sinkhorn divergence, POT/geomloss-style.

The entropic-LDP GAN paper (entropic-ldp-gan.txt, Eq. 8-9) regularises the p-Wasserstein cost
with the mutual information of the coupling:

    W_{p,lambda}(mu, nu) = min_pi  E_pi ||X - Y||_p^p  +  lambda I_pi(X; Y),

and I_pi(X; Y) = KL(pi | mu x nu). The ground cost is ||x - y||_p^p = sum_i |x_i - y_i|^p: the
proof of Theorem 1 splits the entropy over coordinates and uses the maximum-entropy law under a
p-th moment constraint per coordinate, i.e. i.i.d. Laplace noise (p = 1, the l1 cost) and i.i.d.
Gaussian noise (p = 2, the squared Euclidean cost). Matching rule (section 3):

    Laplace of scale b  ->  p = 1, lambda = b;     Gaussian of std s  ->  p = 2, lambda = 2 s^2.

Mapping onto geomloss. ``geomloss.SamplesLoss("sinkhorn", p, blur, debias=False, cost=C)``
returns OT_eps = min_pi <pi, C> + eps KL(pi | a x b) with eps = blur^p (its docstring; checked
against POT in tests/methods/test_entropic_ldp.py). We give it the paper's cost C(x, y) = ||x - y||_p^p
explicitly (geomloss' default is ||x - y||^p / p with the Euclidean norm, which for p = 2 would
halve the cost and for p = 1 use the wrong norm), so eps = lambda and blur = lambda^(1/p):
the value returned *is* W_{p,lambda} with no rescaling. For the Gaussian rule this gives
blur = sqrt(2) s.

* :func:`entropic_wasserstein` -- W_{p,lambda} (geomloss, ``debias=False``): the paper's loss.
* :func:`sinkhorn_divergence` -- S = W_{p,lambda}(a, b) - (W_{p,lambda}(a, a) + W_{p,lambda}(b, b)) / 2
  (geomloss, ``debias=True``, same cost and lambda): the debiased baseline of Figure 5.
* :func:`wasserstein` -- exact W_p^p by network simplex (POT ``ot.emd2``; its gradient in x is
  the optimal plan's, through POT's torch backend): for small batches.
* :func:`matched_loss_params` -- (p, lambda) from the mechanism and its noise scale.

All return W^p-type values (not their p-th root), differentiable in both arguments.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

__all__ = ["ground_cost", "matched_loss_params", "geomloss_blur", "entropic_wasserstein", "sinkhorn_divergence",
           "wasserstein", "entropic_objective_pot"]


def _check_p(p) -> int:
    if p not in (1, 2):
        raise ValueError(f"p={p!r} is invalid: the entropic-LDP losses use p = 1 (Laplace) or p = 2 (Gaussian).")
    return int(p)


def _check_reg(reg) -> float:
    reg = float(reg)
    if not math.isfinite(reg) or reg <= 0:
        raise ValueError(f"reg={reg!r} is invalid: the entropic regularisation lambda must be > 0 "
                         "(use wasserstein() for the unregularised distance).")
    return reg


def ground_cost(x: torch.Tensor, y: torch.Tensor, p: int) -> torch.Tensor:
    """||x_i - y_j||_p^p for point clouds (..., N, D) and (..., M, D) -> (..., N, M)."""
    p = _check_p(p)
    if p == 2:
        xx = (x * x).sum(-1, keepdim=True)
        yy = (y * y).sum(-1, keepdim=True).transpose(-1, -2)
        return (xx + yy - 2 * x @ y.transpose(-1, -2)).clamp_min(0.0)
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).abs().sum(-1)


def matched_loss_params(mechanism: str, scale: float) -> Tuple[int, float]:
    """The paper's rule: (p, lambda) = (1, b) for Laplace(b); (2, 2 s^2) for Gaussian(s)."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"noise scale={scale!r} is invalid: it must be > 0")
    if mechanism == "laplace":
        return 1, float(scale)
    if mechanism == "gaussian":
        return 2, 2.0 * float(scale) ** 2
    raise ValueError(f"mechanism={mechanism!r} is invalid: choose laplace or gaussian")


def geomloss_blur(p: int, reg: float) -> float:
    """geomloss' ``blur`` for regularisation lambda with the cost ||x - y||_p^p: eps = blur^p = lambda."""
    return _check_reg(reg) ** (1.0 / _check_p(p))


def _as_cloud(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1) if x.dim() != 2 else x


def _diameter(x: torch.Tensor, y: torch.Tensor, p: int) -> float:
    """An upper bound on max ||x_i - y_j||_p (starts geomloss' epsilon-scaling at the right scale)."""
    with torch.no_grad():
        lo = torch.minimum(x.min(0).values, y.min(0).values)
        hi = torch.maximum(x.max(0).values, y.max(0).values)
        span = (hi - lo).abs()
        d = float(span.sum()) if p == 1 else float(span.norm())
    return max(d, 1e-6)


def _sinkhorn(x, y, p, reg, debias, scaling, a=None, b=None):
    from geomloss import SamplesLoss

    p = _check_p(p)
    reg = _check_reg(reg)
    if not 0.0 < scaling < 1.0:
        raise ValueError(f"scaling={scaling!r} is invalid: geomloss' epsilon-scaling ratio lies in (0, 1)")
    x, y = _as_cloud(x), _as_cloud(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"point clouds have different dimensions ({x.shape[1]} vs {y.shape[1]})")
    loss = SamplesLoss("sinkhorn", p=p, blur=geomloss_blur(p, reg), scaling=scaling, debias=debias,
                       diameter=_diameter(x, y, p), cost=lambda u, v: ground_cost(u, v, p), backend="tensorized")
    if a is None:
        return loss(x, y)
    return loss(a, x, b, y)


def entropic_wasserstein(x: torch.Tensor, y: torch.Tensor, p: int = 2, reg: float = 1.0, scaling: float = 0.9,
                         a: Optional[torch.Tensor] = None, b: Optional[torch.Tensor] = None) -> torch.Tensor:
    """W_{p,lambda}(x, y) = min_pi <pi, ||x - y||_p^p> + lambda KL(pi | a x b), without debiasing.

    x (N, ...), y (M, ...) point clouds (flattened), uniform weights unless ``a``, ``b`` given;
    ``reg`` = lambda; ``scaling`` = geomloss' epsilon-scaling ratio (closer to 1: more accurate).
    """
    return _sinkhorn(x, y, p, reg, False, scaling, a, b)


def sinkhorn_divergence(x: torch.Tensor, y: torch.Tensor, p: int = 2, reg: float = 1.0, scaling: float = 0.9,
                        a: Optional[torch.Tensor] = None, b: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Debiased Sinkhorn divergence W_{p,l}(x, y) - (W_{p,l}(x, x) + W_{p,l}(y, y)) / 2 (Feydy et al. 2019)."""
    return _sinkhorn(x, y, p, reg, True, scaling, a, b)


def wasserstein(x: torch.Tensor, y: torch.Tensor, p: int = 2, max_iter: int = 1_000_000) -> torch.Tensor:
    """Exact W_p^p between uniform empirical measures (POT ``ot.emd2``, cost ||x - y||_p^p).

    Differentiable in x and y through POT's torch backend (the gradient of the cost matrix is the
    optimal plan). O(n^3): for batches of a few hundred points.
    """
    import ot

    x, y = _as_cloud(x), _as_cloud(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"point clouds have different dimensions ({x.shape[1]} vs {y.shape[1]})")
    M = ground_cost(x, y, p)
    a = torch.full((x.shape[0],), 1.0 / x.shape[0], dtype=M.dtype, device=M.device)
    b = torch.full((y.shape[0],), 1.0 / y.shape[0], dtype=M.dtype, device=M.device)
    return ot.emd2(a, b, M, numItermax=max_iter)


def entropic_objective_pot(x, y, p: int = 2, reg: float = 1.0, num_iter: int = 5000, tol: float = 1e-10) -> float:
    """W_{p,lambda} computed independently with POT (log-domain Sinkhorn), for checks.

    POT's ``ot.sinkhorn`` minimises <pi, M> - reg H(pi); on the transport polytope this differs
    from <pi, M> + reg KL(pi | a x b) by a constant, so the plans coincide; the value is then
    <pi, M> + reg KL(pi | a x b) evaluated at POT's plan.
    """
    import numpy as np
    import ot

    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    M = ground_cost(torch.from_numpy(x), torch.from_numpy(y), p).numpy()
    a = np.full(len(x), 1.0 / len(x))
    b = np.full(len(y), 1.0 / len(y))
    pi = ot.sinkhorn(a, b, M, reg, method="sinkhorn_log", numItermax=num_iter, stopThr=tol, warn=False)
    ab = np.outer(a, b)
    nz = pi > 0
    kl = float(np.sum(pi[nz] * np.log(pi[nz] / ab[nz])))
    return float(np.sum(pi * M) + reg * kl)
