"""Sliced Wasserstein distance and its Gaussian-smoothed private version (DP-SWD, Algorithm 1).

``sliced_wasserstein(x, y, n_projections=k, p=q, sigma=0)`` returns the empirical SWD_q^q of
Eq. 4: both samples are projected on the same k random unit directions U, then (Algorithm 1)
independent N(0, sigma^2) noise is added to every projected sample of each side, and the 1-D
Wasserstein distances are computed by sorting and averaged over the directions.

The projection and noise are differentiable in ``x`` and ``y`` (sorting is piecewise linear), so
the function is a training loss. The noise on the private side is the Gaussian mechanism
M(X) = X U + V of the privacy analysis; see :mod:`dpgen.methods.dpswd` for how rows are bounded
and how sigma is calibrated.
"""

from __future__ import annotations

from typing import Optional

import torch

from dpgen.utils.noise import gaussian


def random_projections(d: int, k: int, generator: Optional[torch.Generator] = None, device=None,
                       dtype=torch.float32) -> torch.Tensor:
    """A (d, k) matrix whose columns are independent and uniform on the unit sphere S^{d-1}."""
    if d <= 0 or k <= 0:
        raise ValueError(f"random_projections needs d > 0 and k > 0, got d={d}, k={k}")
    u = gaussian((d, k), generator=generator, device=device, dtype=dtype)
    return u / u.norm(dim=0, keepdim=True).clamp_min(1e-12)


def sort_columns(proj: torch.Tensor) -> torch.Tensor:
    """Each column of ``proj`` (m, k) sorted ascending; differentiable (the gradient follows the
    permutation), equal to ``torch.sort(proj, dim=0).values``.

    On a CPU, numpy's vectorised argsort over the contiguous transposed rows is 2-3x faster than
    ``torch.sort`` along dim 0 (the sort is the hot path of (DP-)SWD: ``make bench``); the values are
    then gathered by torch, so autograd is unchanged. Elsewhere (CUDA) ``torch.sort``.
    """
    if proj.device.type != "cpu" or proj.dtype not in (torch.float32, torch.float64):
        return torch.sort(proj, dim=0).values
    import numpy as np

    # (a thread pool splitting the rows measured slower: it contends with torch's OpenMP threads)
    idx = torch.from_numpy(np.argsort(proj.detach().T.contiguous().numpy(), axis=1)).T
    return torch.gather(proj, 0, idx)


def _quantiles(proj: torch.Tensor, n: int) -> torch.Tensor:
    """Sorted projections of ``proj`` (m, k) resampled at n quantile levels (m == n: plain sort)."""
    s = sort_columns(proj)
    m = s.shape[0]
    if m == n:
        return s
    levels = (torch.arange(n, device=proj.device, dtype=proj.dtype) + 0.5) / n * m - 0.5
    lo = levels.floor().clamp(0, m - 1).long()
    hi = (lo + 1).clamp(max=m - 1)
    w = (levels - lo.to(proj.dtype)).clamp(0, 1).unsqueeze(1)
    return s[lo] * (1 - w) + s[hi] * w


def sliced_wasserstein(
    x: torch.Tensor,
    y: torch.Tensor,
    n_projections: int = 1000,
    p: int = 2,
    sigma: float = 0.0,
    projections: Optional[torch.Tensor] = None,
    generator: Optional[torch.Generator] = None,
    noise_x: bool = True,
    noise_y: bool = True,
    y_copies: int = 1,
) -> torch.Tensor:
    """Empirical SWD_p^p between samples ``x`` (n, d) and ``y`` (m, d); DP_sigma SWD when sigma > 0.

    ``projections``: a fixed (d, k) matrix of unit columns, or a callable mapping rows (n, d) to their
    k projections (n, k), e.g. :class:`dpgen.privacy.projection.StructuredFrame` (else k = ``n_projections``
    fresh ones, drawn with ``generator``). ``noise_x`` / ``noise_y`` choose which side gets the N(0, sigma^2)
    noise (Algorithm 1 noises both). Unequal sample sizes compare quantile functions at
    max(n, m) levels. ``y_copies`` = c compares c independently noised copies of every row of y
    (the same as passing ``y.repeat(c, 1)``, with y projected once instead of c times).
    """
    if x.dim() != 2 or y.dim() != 2:
        x, y = x.flatten(1), y.flatten(1)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same dimension, got {x.shape[1]} and {y.shape[1]}")
    if p not in (1, 2):
        raise ValueError(f"p={p!r} is invalid: the order of the sliced Wasserstein distance is 1 or 2")
    if sigma < 0:
        raise ValueError(f"sigma={sigma!r} is invalid: the noise std must be >= 0")
    d = x.shape[1]
    if projections is None:
        if n_projections <= 0:
            raise ValueError(f"n_projections={n_projections!r} is invalid: k must be a positive integer")
        projections = random_projections(d, n_projections, generator, x.device, x.dtype)
    if callable(projections) and not isinstance(projections, torch.Tensor):  # a linear operator on rows
        px, py = projections(x), projections(y)
    else:
        px, py = x @ projections, y @ projections
    if y_copies > 1:
        py = py.repeat(y_copies, 1)
    if sigma > 0:
        if noise_x:
            px = px + sigma * gaussian(px.shape, generator=generator, device=px.device, dtype=px.dtype)
        if noise_y:
            py = py + sigma * gaussian(py.shape, generator=generator, device=py.device, dtype=py.dtype)
    return sliced_from_projections(px, py, p)


def sliced_from_projections(px: torch.Tensor, py: torch.Tensor, p: int = 2) -> torch.Tensor:
    """SWD_p^p from samples already projected (and possibly noised) on the same k directions,
    ``px`` (n, k) and ``py`` (m, k): the 1-D Wasserstein distances by sorting, averaged over the
    directions (unequal sizes compare quantile functions at max(n, m) levels). This is how a
    released projection (the Gaussian mechanism's output) enters a loss as post-processing."""
    if p not in (1, 2):
        raise ValueError(f"p={p!r} is invalid: the order of the sliced Wasserstein distance is 1 or 2")
    n = max(px.shape[0], py.shape[0])
    diff = _quantiles(px, n) - _quantiles(py, n)
    cost = diff.abs() if p == 1 else diff * diff
    return cost.mean()
