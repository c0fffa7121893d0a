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


__all__ = ["dct_matrix"]
