"""Networks of DP-SWD's domain-adaptation experiments (dp-swd.txt, appendix 8.5.2).

* digits (MNIST <-> USPS, 1x28x28): feature extractor g = conv 5x5 (32) + max-pool 2 + ReLU (the same
  function as ReLU then max-pool, ReLU being monotone, on a quarter of the values),
  conv 5x5 (20) + sigmoid (centred: minus 1/2), flattened (20 x 8 x 8 = 1,280 features); classifier h = FC 100 + ReLU,
  FC 10; discriminator = FC 100 + ReLU, FC 1.
* visda (2048-d ResNet-50 features): g = FC 100 + ReLU, FC 100 + ReLU (latent 100); heads FC 100 +
  ReLU, FC (12 | 1).
* office31 (2048-d): g = FC 100 + ReLU, FC 50 + ReLU (latent 50); heads FC 50 + ReLU, FC (31 | 1).

``make_da_nets(arch, input_shape, num_classes)`` returns ``(g, h, discriminator, feature_dim)``;
``arch="auto"`` picks digits for images and, for vectors, visda/office31 from the class count.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch
from torch import nn

ARCHS = ("auto", "digits", "visda", "office31")


class DigitsFeatures(nn.Module):
    def __init__(self, in_channels: int = 1, side: int = 28):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, 32, 5), nn.MaxPool2d(2), nn.ReLU(),
            nn.Conv2d(32, 20, 5), nn.Sigmoid(), nn.Flatten(),
        )
        self.set_channels_last(True)
        s = (side - 4) // 2 - 4
        if s <= 0:
            raise ValueError(f"the digits feature extractor needs images of at least 14x14, got side {side}")
        self.out_dim = 20 * s * s

    def forward(self, x):
        # centred sigmoid: a constant shift (the classifier's bias absorbs it) so that a representation
        # row carries its information in its direction, which DP-SWD's per-row clip to norm 1/2 keeps
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x) - 0.5

    def set_channels_last(self, flag: bool) -> "DigitsFeatures":
        """Channels-last convolutions (the default): 1.7x faster forward + backward on CPU (B = 256, one
        thread). Opacus' conv grad sampler (1.6) returns wrong per-sample gradients for channels-last
        layers with several input channels, so DP-DANN's opacus copy turns this off."""
        self.channels_last = bool(flag)
        self.to(memory_format=torch.channels_last if flag else torch.contiguous_format)
        return self


def mlp(sizes: Sequence[int], last_activation: bool = False) -> nn.Sequential:
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def resolve_arch(arch: str, input_shape: Tuple[int, ...], num_classes: int) -> str:
    if arch not in ARCHS:
        raise ValueError(f"model architecture {arch!r} is invalid: choose one of {', '.join(ARCHS)}")
    if arch != "auto":
        return arch
    if len(input_shape) == 3:
        return "digits"
    return "visda" if num_classes == 12 else "office31"


def make_da_nets(arch: str, input_shape: Tuple[int, ...], num_classes: int):
    """(feature extractor g, classifier h, domain discriminator, latent dimension)."""
    arch = resolve_arch(arch, tuple(input_shape), num_classes)
    if arch == "digits":
        if len(input_shape) != 3:
            raise ValueError(f"the digits architecture needs images (C, H, W), got shape {tuple(input_shape)}")
        g = DigitsFeatures(input_shape[0], input_shape[-1])
        d, hidden = g.out_dim, 100
    else:
        if len(input_shape) != 1:
            raise ValueError(f"the {arch} architecture needs feature vectors, got shape {tuple(input_shape)}")
        widths = (100, 100) if arch == "visda" else (100, 50)
        g = mlp([int(input_shape[0]), *widths], last_activation=True)
        d = widths[-1]
        hidden = 100 if arch == "visda" else 50
    h = mlp([d, hidden, num_classes])
    disc = mlp([d, hidden, 1])
    return g, h, disc, d
