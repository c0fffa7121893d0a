"""Clipping for every DP mechanism of dpgen: per sample (DP-SGD, DP-DANN, DP-Sinkhorn (param grad)),
per row (DP-SWD's compared rows and target representations, the DP mean), per batch (DP-Sinkhorn's
image gradient).

A clip must bound a record's contribution for *every* input, non-finite ones included: scaling an
infinite norm by C / inf = 0 gives inf x 0 = NaN, and a NaN in the sum turns the whole release into
NaN, which tells D from D' (the run stops, or the release is visibly different). Every function here
maps a contribution whose norm is not finite (an inf or NaN entry, or a norm that overflows) to zero
before the noise is added: zero has norm 0 <= C, so the sensitivity holds for every input, and the
non-finite test the loop makes afterwards reads the release only.
"""

from __future__ import annotations

import math
from typing import Iterable, List, Tuple

import torch

from dpgen.privacy.validation import check_positive


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, clip / norm) where the norm is finite, 0 where it is not (inf or NaN)."""
    ok = torch.isfinite(norms)
    factor = (clip / norms.clamp_min(1e-12)).clamp(max=1.0)
    return torch.where(ok, factor, torch.zeros_like(factor))


def scale_finite(t: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``t * factor`` (``factor`` broadcast over ``t``'s trailing dimensions), with 0 where the factor is 0:
    a non-finite entry times 0 would be NaN."""
    f = factor.reshape(factor.shape + (1,) * (t.dim() - factor.dim()))
    return torch.where(f > 0, t * f, torch.zeros((), dtype=t.dtype, device=t.device))


def clip_rows(rows: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row of ``rows`` ``[n, d]`` scaled to l2 norm <= ``bound``; a row whose norm is not finite becomes 0."""
    return scale_finite(rows, clip_factors(rows.norm(dim=1), float(bound)))


def clip_whole(t: torch.Tensor, clip: float) -> torch.Tensor:
    """``t`` as one vector scaled to l2 norm <= ``clip``; 0 when its norm is not finite (per-batch clipping)."""
    factor = clip_factors(t.detach().flatten().norm(2), float(clip))
    return scale_finite(t, factor)


def clip_per_sample(grads: List[torch.Tensor], clip: float) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Scale each sample's whole gradient (all tensors ``[n, *shape]`` together) to l2 norm <= ``clip``;
    a sample whose gradient norm is not finite contributes 0. Returns the clipped per-sample gradients
    and the norms before clipping (kept in memory: they are computed from private records)."""
    clip = check_positive(clip, "clip", "the per-sample gradient clipping bound C")
    n = grads[0].shape[0]
    # explicit row sizes: an empty Poisson batch (n = 0) has no -1 to infer
    norms = torch.sqrt(sum(t.reshape(n, math.prod(t.shape[1:])).pow(2).sum(1) for t in grads))
    factor = clip_factors(norms, clip)
    return [scale_finite(t, factor) for t in grads], norms


def finite_gradients(params: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """Whether every gradient is finite (the check a private run makes on its released gradient), as a
    0-dim bool tensor on the gradients' device: ``bool()`` of it is the one host sync."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(True)
    return torch.isfinite(torch.nn.utils.get_total_norm(grads))


__all__ = ["clip_factors", "clip_per_sample", "clip_rows", "clip_whole", "finite_gradients", "scale_finite"]
