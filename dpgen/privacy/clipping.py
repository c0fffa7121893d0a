"""Clipping for every DP mechanism of dpgen: per sample (DP-SGD, DP-DANN, DP-Sinkhorn (param grad)),
per row (DP-SWD's compared rows and target representations, the DP mean), per batch (DP-Sinkhorn's
image gradient).

A clip must bound a record's contribution for *every* input, non-finite ones included: scaling an
infinite norm by C / inf = 0 gives inf x 0 = NaN, and a NaN in the sum turns the whole release into
NaN, which tells D from D' (the run stops, or the release is visibly different). Every function here
maps a contribution whose norm is not finite (an inf or NaN entry, or a norm that overflows) to zero
before the noise is added: zero has norm 0 <= C, so the sensitivity holds for every input, and the
non-finite test the loop makes afterwards reads the release only.

Every clip scales to norm ``C (1 - CLIP_MARGIN)`` (``CLIP_MARGIN`` = 1e-5), the factor computed in float64: the
factor min(1, C / norm) in float32 let the clipped norm exceed C by float rounding (the norm's sum of squares,
the factor, the product: about 1e-7 relative each); the margin covers that (and the per-sample norms of opacus'
ghost clipping, below). It cannot cover the rounding of a float32 *sum* of the clipped contributions, which grows
with the batch n (~n 2^-24 C per coordinate): when a batch of n = 500 or 1,000 identical records got one more
copy, the float32 sums moved by up to 1.0000865 C (one coordinate), 1.000025 C (DP-Sinkhorn's per-record
release), 1.000054 C (ghost clipping); issue 83 saw 1.0000101 C at n = 640. So every clipped sum is accumulated
in float64 (:func:`clipped_sum`, the one way formed contributions are summed, and :func:`clipped_pair_sum`, the same
sum of contributions of one closed form that it never forms; :mod:`dpgen.privacy.per_sample` runs the ghost clipping's
summing pass on a float64 copy), the Gaussian noise is added to the float64 sum, and only then the release is
rounded to the working dtype (:func:`release_sum`): that rounding is post-processing of the release. A float64 sum
of n contributions rounds by ~n 2^-53 relative (1e-13 at n = 1,000), far inside the margin; the largest shift
measured is 0.9999901 C over batches of 500 and 1,000 identical records through every path
(``tests/privacy/test_clip_float64.py``) and 0.999992 C over the adversarial records of
``tests/privacy/test_clip_margin.py`` (DP-SGD ghost clipping; 0.99999 elsewhere). Every norm here is
the square root of a ``pow(2).sum()`` (:func:`l2_norms`), which torch accumulates pairwise: 1e-7 relative error
on 4e6 float32 entries. ``Tensor.norm`` / ``torch.linalg.vector_norm`` accumulate in a row on the CPU, and their
float32 error grows with the length (measured: 1.2e-5 relative at 1e6 entries, 9.2e-5 at 4e6, which the old
``clip_whole`` turned into a clipped norm above C, test_clip_margin.py); a float64 norm is as exact but 4-7x slower
(a float64 copy). A factor below the dtype's smallest normal number (a norm above about 1e37 C in float32, where
the factor would be subnormal and lose its precision) maps the contribution to 0, as a non-finite norm does.
Not covered: the per-sample norms opacus computes for the ghost clipping (``dpgen.privacy.per_sample``) use its
own arithmetic; the tests measure them inside the margin on dpgen's networks.
"""

from __future__ import annotations

import math
from typing import Iterable, List, Tuple

import torch

from dpgen.privacy.validation import check_positive


#: relative margin of every clip (module doc): contributions are scaled to l2 norm <= C (1 - CLIP_MARGIN)
CLIP_MARGIN = 1e-5


def l2_norms(t: torch.Tensor, dim=None) -> torch.Tensor:
    """The l2 norm of ``t`` over ``dim`` (all of it when None): sqrt(sum of squares) with torch's pairwise sum
    (module doc), in ``t``'s dtype; inf where the squares overflow it (that contribution then maps to 0)."""
    sq = t.detach().pow(2)
    return (sq.sum() if dim is None else sq.sum(dim)).sqrt()


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, clip (1 - CLIP_MARGIN) / norm) where the norm is finite, 0 where it is not (inf or NaN): computed and
    returned in float64, whatever ``norms``' dtype (:func:`scale_finite` rounds it to the contribution's)."""
    n = norms.detach().to(torch.float64)
    factor = (float(clip) * (1.0 - CLIP_MARGIN) / n.clamp_min(1e-300)).clamp(max=1.0)
    return torch.where(torch.isfinite(n), factor, torch.zeros_like(factor))


def scale_finite(t: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``t * factor`` (``factor`` broadcast over ``t``'s trailing dimensions, rounded to ``t``'s dtype), with 0
    where the factor is 0 or below the dtype's smallest normal number (module doc): a non-finite entry times 0
    would be NaN."""
    f = factor.reshape(factor.shape + (1,) * (t.dim() - factor.dim()))
    f = f.to(t.dtype) if t.dtype.is_floating_point else f
    tiny = torch.finfo(f.dtype).tiny
    return torch.where(f >= tiny, t * f, torch.zeros((), dtype=t.dtype, device=t.device))


def clip_rows(rows: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row of ``rows`` ``[n, d]`` scaled to l2 norm <= ``bound``; a row whose norm is not finite becomes 0."""
    return scale_finite(rows, clip_factors(l2_norms(rows, dim=1), float(bound))).to(rows.dtype)


def clip_whole(t: torch.Tensor, clip: float) -> torch.Tensor:
    """``t`` as one vector scaled to l2 norm <= ``clip``; 0 when its norm is not finite (per-batch clipping)."""
    factor = clip_factors(l2_norms(t), float(clip))
    return scale_finite(t, factor).to(t.dtype)


def clip_per_sample(grads: List[torch.Tensor], clip: float) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Scale each sample's whole gradient (all tensors ``[n, *shape]`` together) to l2 norm <= ``clip``;
    a sample whose gradient norm is not finite contributes 0. Returns the clipped per-sample gradients
    and the norms before clipping (kept in memory: they are computed from private records)."""
    clip = check_positive(clip, "clip", "the per-sample gradient clipping bound C")
    n = grads[0].shape[0]
    # explicit row sizes: an empty Poisson batch (n = 0) has no -1 to infer
    norms = torch.sqrt(sum(l2_norms(t.reshape(n, math.prod(t.shape[1:])), dim=1).pow(2) for t in grads))
    factor = clip_factors(norms, clip)
    return [scale_finite(t, factor).to(t.dtype) for t in grads], norms


def clipped_sum(grads: List[torch.Tensor], clip: float) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """The sums over the samples of :func:`clip_per_sample`'s clipped gradients (one per tensor of ``grads``,
    ``[n, *shape]`` -> ``[*shape]``), accumulated in float64 (module doc: a float32 sum of n records moves by
    up to ~n 2^-24 C when one more joins); and the norms before clipping. The single way a clipped sum of
    formed per-record contributions is made (:func:`clipped_pair_sum`: of contributions of one closed form, never
    formed): add the noise to these float64 sums with :func:`release_sum`."""
    clipped, norms = clip_per_sample(grads, clip)
    return [c.sum(0, dtype=torch.float64) for c in clipped], norms


def clipped_pair_sum(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, clip: float,
                     scale: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`clipped_sum` of the per-record contributions G_i = ``scale`` w_i (a - b_i) ([m, p]: row j is
    ``scale`` w_ij (a_j - b_i); ``w`` [n, m], ``a`` [m, p], ``b`` [n, p]) without forming the n x m x p tensor:
    ||G_i||^2 = scale^2 sum_j w_ij^2 ||a_j - b_i||^2 and sum_i s_i G_i = scale (sum_i s_i w_i) a - scale (s w)^T b,
    matrix products in float64 (s_i: :func:`clip_factors`). DP-Sinkhorn's per-record release on a linear decode
    has this form (``dpgen.methods.dpsinkhorn``): about 4 n m p operations, where the formed tensor costs several
    passes over n m p floats in memory.

    Every number is the one the formed tensor gives, up to float64 rounding: the squared distances are expanded
    around the mean of ``a`` (their cancellation is then ~1e-16 of the points' spread around it, far inside
    :data:`CLIP_MARGIN`). A contribution that would not be finite maps to 0, as :func:`clip_per_sample` maps it:
    a record with a non-finite weight or coordinate, a norm that overflows, and every record when ``a`` has a
    non-finite value (each G_i then holds one: 0 x inf is NaN). Returns the float64 sum [m, p] and the norms
    before clipping [n] (float64, inf or NaN where the contribution is not finite; kept in memory: they are
    computed from private records). No host read."""
    clip = check_positive(clip, "clip", "the per-record clipping bound C")
    w, a, b = (t.detach().to(torch.float64) for t in (w, a, b))
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    a_ok = torch.isfinite(a).all()
    a = torch.where(a_ok, a, zero)
    centre = a.mean(0, keepdim=True) if a.shape[0] else torch.zeros_like(a[:1])
    a, b = a - centre, b - centre
    rows_ok = torch.isfinite(w).all(1) & torch.isfinite(b).all(1) & a_ok
    w = torch.where(rows_ok.unsqueeze(1), w, zero)
    b = torch.where(rows_ok.unsqueeze(1), b, zero)
    d2 = ((a * a).sum(1).unsqueeze(0) + (b * b).sum(1).unsqueeze(1) - 2.0 * (b @ a.t())).clamp_min(0.0)  # [n, m]
    norms = abs(float(scale)) * ((w * w) * d2).sum(1).sqrt()
    norms = torch.where(rows_ok, norms, torch.full_like(norms, float("nan")))
    factor = clip_factors(norms, clip)
    factor = torch.where(factor >= torch.finfo(torch.float64).tiny, factor, zero)
    sw = torch.where(factor.unsqueeze(1) > 0, factor.unsqueeze(1) * w, zero)  # [n, m]
    total = float(scale) * (sw.sum(0).unsqueeze(1) * a - sw.t() @ b)
    return total, norms


def release_sum(total: torch.Tensor, noise: torch.Tensor, std: float, dtype: torch.dtype) -> torch.Tensor:
    """``total + std * noise`` computed in float64 (``total``: a float64 clipped sum, :func:`clipped_sum`;
    ``noise``: the standard normal draw, in any dtype), and only then rounded to ``dtype``: the rounding is
    post-processing of the release, so it needs no room in the clip margin."""
    return (total.to(torch.float64) + float(std) * noise.to(torch.float64)).to(dtype)


def finite_gradients(params: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """Whether every gradient is finite (the check a private run makes on its released gradient), as a
    0-dim bool tensor on the gradients' device: ``bool()`` of it is the one host sync."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(True)
    return torch.isfinite(torch.nn.utils.get_total_norm(grads))


__all__ = ["CLIP_MARGIN", "clip_factors", "clip_per_sample", "clip_rows", "clip_whole", "clipped_pair_sum",
           "clipped_sum", "finite_gradients", "l2_norms", "release_sum", "scale_finite"]
