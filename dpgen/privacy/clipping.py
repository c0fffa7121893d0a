"""Per-sample gradient clipping shared by the DP-SGD-style mechanisms (DP-SGD, DP-DANN, DP-Sinkhorn (param grad))."""

from __future__ import annotations

from typing import List, Tuple

import torch

from dpgen.privacy.validation import check_positive


def clip_per_sample(grads: List[torch.Tensor], clip: float) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Scale each sample's whole gradient (all tensors ``[n, *shape]`` together) to l2 norm <= ``clip``;
    returns the clipped per-sample gradients and the norms before clipping."""
    clip = check_positive(clip, "clip", "the per-sample gradient clipping bound C")
    n = grads[0].shape[0]
    norms = torch.sqrt(sum(t.reshape(n, -1).pow(2).sum(1) for t in grads))
    factor = (clip / norms.clamp_min(1e-12)).clamp(max=1.0)
    return [t * factor.view(-1, *([1] * (t.dim() - 1))) for t in grads], norms
