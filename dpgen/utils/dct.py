"""The orthonormal DCT-II matrix, shared by DP-SWD's low-pass comparison, entropic-LDP's DCT features and the dct generator."""

from __future__ import annotations

import math

import torch


def dct_matrix(n: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """C (n, n), rows the cosine basis vectors: C @ v = scipy.fft.dct(v, type=2, norm='ortho') (orthogonal)."""
    k = torch.arange(n, dtype=torch.float64)[:, None]
    i = torch.arange(n, dtype=torch.float64)[None, :]
    c = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    c[0] /= math.sqrt(2.0)
    return c.to(dtype=dtype, device=device)


def lowpass(x: torch.Tensor, k: int) -> torch.Tensor:
    """Images x [n, C, H, W] projected onto their k x k lowest 2-D DCT-II frequencies per channel, then clamped to
    [0, 1], as the ``dct`` generator's fixed decode clamps at ``model.dct_size=k`` (the same projection as
    ``model.dct_project``). k = min(H, W) on a square image is the identity before the clamp."""
    if x.dim() != 4:
        raise ValueError(f"lowpass needs images [n, C, H, W], got shape {tuple(x.shape)}")
    h, w = x.shape[-2:]
    if not 1 <= int(k) <= min(h, w):
        raise ValueError(f"lowpass k={k} is invalid for {h} x {w} images: give 1 <= k <= {min(h, w)}")
    ch = dct_matrix(h, dtype=x.dtype, device=x.device)[:k]
    cw = dct_matrix(w, dtype=x.dtype, device=x.device)[:k]
    # P_h = ch^T ch and P_w = cw^T cw are the orthogonal projections onto the k lowest frequencies of each axis
    return (ch.t() @ (ch @ x @ cw.t()) @ cw).clamp(0.0, 1.0)


__all__ = ["dct_matrix", "lowpass"]
