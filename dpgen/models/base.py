"""The base class of dpgen's class-conditional generators (``forward(z, y)``) and its split at the last
trainable layer; the concrete generators and their registry are in :mod:`dpgen.models.generators` and
:mod:`dpgen.models.dcgan`, which both build on this module (so neither imports the other's base)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


class ConditionalGenerator(nn.Module):
    """Base: ``forward(z, y)`` with y integer labels (one-hot encoded inside) or None."""

    #: a generator whose ``decode`` is a fixed linear map gives its vector-Jacobian product here,
    #: ``decode_vjp(pixel_grad) -> code_grad`` (the DCT generators: DP-Sinkhorn's per-record code gradients then
    #: take a closed form); None: the gradients go through autograd
    decode_vjp = None

    def __init__(self, code_dim: int, num_classes: int, out_shape: Sequence[int]):
        super().__init__()
        self.code_dim = int(code_dim)
        self.num_classes = int(num_classes)
        self.out_shape = tuple(int(s) for s in out_shape)

    def inputs(self, z: torch.Tensor, y=None) -> torch.Tensor:
        if self.num_classes > 0:
            if y is None:
                raise ValueError("this generator is class-conditional: pass labels y")
            z = torch.cat([z, F.one_hot(y.long(), self.num_classes).to(z.dtype)], dim=1)
        return z

    def draw(self, n: int, y=None, generator=None, device=None):
        """(latent codes z, labels y): labels drawn uniformly when y is None; data-independent."""
        device = device or next(self.parameters()).device
        z = torch.randn(n, self.code_dim, generator=generator, device=device)
        if self.num_classes > 0 and y is None:
            y = torch.randint(0, self.num_classes, (n,), generator=generator, device=device)
        return z, y

    def sample(self, n: int, y=None, generator=None, device=None):
        """n samples; labels drawn uniformly when y is None. Returns (x, y)."""
        z, y = self.draw(n, y, generator, device)
        return self(z, y), y

    # ---- the split at the last trainable layer (the privacy barrier of output-gradient mechanisms) ----
    def code(self, z, y=None) -> torch.Tensor:
        """The trainable layers' output (default: the whole generator)."""
        return self(z, y)

    def decode(self, code: torch.Tensor) -> torch.Tensor:
        """Fixed, parameter-free, data-independent map from ``code`` to samples (default: identity)."""
        return code

    def sample_code(self, n: int, y=None, generator=None, device=None):
        """(code, y) with ``decode(code)`` distributed as ``sample``'s x."""
        z, y = self.draw(n, y, generator, device)
        return self.code(z, y), y
