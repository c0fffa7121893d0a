"""The CNN of the WDP paper's deep-learning experiment (Table 2), from Triastcyn & Faltings (2020).

The WDP paper (wdp.txt, "Deep Learning") says only that it trains "a CNN model designed by Triastcyn
and Faltings (2020)". Our reading of that CNN, from the Bayesian-DP paper's experiments (MNIST, CIFAR-10,
SVHN notebooks published with it) and the WDP authors' ``model.py``, written here from that description:

* **MNIST-type head** (one-channel inputs: MNIST, FashionMNIST, USPS, mnist10k)::

      conv 5x5, 64 filters -> ReLU -> max-pool 2 -> norm -> conv 5x5, 64 filters -> ReLU -> norm
      -> max-pool 2 -> flatten -> FC 384 -> SELU -> FC 192 -> SELU -> FC num_classes

  (on 28x28 inputs the flattened size is 64 x 4 x 4 = 1024; ~0.58 M parameters).
* **CIFAR-type head** (three-channel inputs: CIFAR-10, SVHN): the same two convolutions, then
  FC 384 -> ReLU -> FC 384 -> ReLU -> FC num_classes (64 x 5 x 5 = 1600 on 32x32 inputs).

Deviation: the original normalisation layers are *batch* norm, which mixes the examples of a batch, so
one example's gradient depends on the others and per-example clipping no longer bounds its influence
(DP-SGD's analysis breaks; opacus refuses BatchNorm for the same reason). We use ``norm="group"``
(GroupNorm with 8 groups of 8 channels, per example) by default; ``norm="none"`` drops them. Inputs
of any size >= 16x16 work: the flattened size is computed from ``in_shape`` (USPS 16x16 -> 64 x 1 x 1).
No in-place activations (``torch.func.vmap`` of the per-example gradients needs pure functions).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

NORMS = ("group", "none")
ARCHS = ("auto", "triastcyn_mnist", "triastcyn_cifar")


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(min(8, channels), channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm={kind!r} is invalid: choose one of {', '.join(NORMS)} (batch norm breaks "
                     "per-example clipping, see dpgen/models/classifiers.py)")


class TriastcynCNN(nn.Module):
    """Two 5x5 convolutions (``width`` filters) + a three-layer fully connected head (see module doc)."""

    def __init__(self, in_shape: Sequence[int], num_classes: int = 10, arch: str = "auto", width: int = 64,
                 kernel: int = 5, norm: str = "group") -> None:
        super().__init__()
        if len(in_shape) != 3:
            raise ValueError(f"in_shape={tuple(in_shape)} is invalid: the CNN needs images (C, H, W).")
        c, h, w = (int(s) for s in in_shape)
        if arch not in ARCHS:
            raise ValueError(f"arch={arch!r} is invalid: choose one of {', '.join(ARCHS)}")
        if arch == "auto":
            arch = "triastcyn_mnist" if c == 1 else "triastcyn_cifar"
        if min(h, w) < 4 * kernel - 4:
            raise ValueError(f"in_shape={tuple(in_shape)} is too small for two {kernel}x{kernel} convolutions "
                             f"and two 2x2 poolings: images need at least {4 * kernel - 4} pixels a side.")
        self.arch = arch
        self.features = nn.Sequential(
            nn.Conv2d(c, width, kernel), nn.ReLU(), nn.MaxPool2d(2, 2), _norm(norm, width),
            nn.Conv2d(width, width, kernel), nn.ReLU(), _norm(norm, width), nn.MaxPool2d(2, 2),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = int(self.features(torch.zeros(1, c, h, w)).shape[1])
        if arch == "triastcyn_mnist":
            self.head = nn.Sequential(nn.Linear(flat, 384), nn.SELU(), nn.Linear(384, 192), nn.SELU(),
                                      nn.Linear(192, num_classes))
        else:
            self.head = nn.Sequential(nn.Linear(flat, 384), nn.ReLU(), nn.Linear(384, 384), nn.ReLU(),
                                      nn.Linear(384, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def make_classifier(in_shape: Sequence[int], num_classes: int, arch: str = "auto", norm: str = "group") -> nn.Module:
    return TriastcynCNN(in_shape, num_classes, arch=arch, norm=norm)
