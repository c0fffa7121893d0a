"""Private labels inside a mechanism: a record whose label lies outside [0, num_classes) contributes nothing.

A dataset read lazily (CelebA, a user's loader) has its labels checked by nobody before the step that
draws them; ``F.one_hot`` (and ``F.cross_entropy``) raise on such a label, which stops the run at a step
decided by one private record: a data-dependent event outside the ledger. Every mechanism that reads a
private label therefore maps such a record to a zero contribution, as it maps a record with non-finite
values (``dpgen.privacy.clipping``): DP-Sinkhorn's rows and per-record gradients, DP-SGD's per-example
loss, DP-SWD's compared rows, DP-MERF's class embedding. Zero is inside every bound, so the
sensitivity holds for every label, and nothing is raised, printed or read on the host (no sync).

Imports nothing of dpgen above the privacy library.
"""

from __future__ import annotations

import torch


def label_in_range(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Bool tensor (on the labels' device): 0 <= label < num_classes, per record; computed on the device."""
    y = labels.reshape(-1)
    return (y >= 0) & (y < int(num_classes))


def one_hot_or_zero(labels: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``F.one_hot(labels, num_classes).to(dtype)`` for labels in range (the same values), an all-zero row for a
    label outside [0, num_classes): never raises, never reads a label on the host."""
    y = labels.reshape(-1).long()
    classes = torch.arange(int(num_classes), device=y.device)
    return (y.unsqueeze(1) == classes.unsqueeze(0)).to(dtype)


def safe_labels(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The labels with every out-of-range one replaced by 0 (a valid index: the caller drops that record's
    contribution with :func:`label_in_range`)."""
    y = labels.long()
    return torch.where(label_in_range(y, num_classes).reshape(y.shape), y, torch.zeros_like(y))


__all__ = ["label_in_range", "one_hot_or_zero", "safe_labels"]
