"""DP-Sinkhorn's generators (dp-sinkhorn.txt, appendix D.3).

* ``dcgan`` — the DCGAN-based generator: a latent code (12 for MNIST / FashionMNIST, 32 for
  CelebA: ``model.code_dim``) concatenated with a learned class embedding of dimension 4, then
  4 transposed convolutions: the first projects the 1 x 1 input to 256 x s x s with no padding
  (kernel s = H / 4: 7 for 28 x 28, 8 for 32 x 32), then output depths 128, 64, C with kernels
  4, 4, 3, strides 2, 2, 1 and padding 1, 1, 1; ReLU at the hidden layers (with batch norm, as
  DCGAN does: it sees generated data only), tanh at the output. The tanh output in [-1, 1] is
  mapped to [0, 1] ((t + 1) / 2), the range of every dataset and evaluator in dpgen.
* ``biggan32`` — a BigGAN-style generator (Brock et al. 2019, CIFAR-10 configuration) for
  H x W = 32 x 32 (any H divisible by 8): latent 32 -> spectrally normalised linear to
  256 x H/8 x W/8, 4 residual blocks of depth 256 (three upsampling x2, one at full size), each
  block class-conditional batch norm -> ReLU -> SN conv 3x3 -> class-conditional BN -> ReLU ->
  SN conv 3x3 plus an SN 1x1 shortcut (three convolutions per block), then BN -> ReLU -> SN conv
  3x3 -> tanh, mapped to [0, 1]. Class-conditional BN: batch norm without affine parameters,
  then a per-class gain (1 + embedding) and bias (embedding). Simplified from BigGAN (no
  hierarchical latent, no shared embedding, no self-attention).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm

from dpgen.models.base import ConditionalGenerator


class DCGANGenerator(ConditionalGenerator):
    def __init__(self, code_dim: int = 12, num_classes: int = 10, out_shape=(1, 28, 28), embed_dim: int = 4,
                 widths: Sequence[int] = (256, 128, 64), batch_norm: bool = True):
        super().__init__(code_dim, num_classes, out_shape)
        c_out, h, w = self.out_shape
        if h != w or h % 4:
            raise ValueError(f"model.generator=dcgan needs square images with a side divisible by 4 (28 or 32), "
                             f"the dataset has {h} x {w}")
        self.embed = nn.Embedding(self.num_classes, embed_dim) if self.num_classes > 0 else None
        c_in = self.code_dim + (embed_dim if self.num_classes > 0 else 0)
        w0, w1, w2 = widths

        def block(conv, width):
            return [conv, nn.BatchNorm2d(width) if batch_norm else nn.Identity(), nn.ReLU()]

        self.net = nn.Sequential(
            *block(nn.ConvTranspose2d(c_in, w0, h // 4, 1, 0, bias=not batch_norm), w0),   # 1 -> H/4
            *block(nn.ConvTranspose2d(w0, w1, 4, 2, 1, bias=not batch_norm), w1),          # -> H/2
            *block(nn.ConvTranspose2d(w1, w2, 4, 2, 1, bias=not batch_norm), w2),          # -> H
            nn.ConvTranspose2d(w2, c_out, 3, 1, 1), nn.Tanh(),                             # -> H, C channels
        )
        self.channels_last = False

    def inputs(self, z, y=None):
        if self.num_classes > 0:
            if y is None:
                raise ValueError("this generator is class-conditional: pass labels y")
            z = torch.cat([z, self.embed(y.long())], dim=1)
        return z

    def set_channels_last(self, flag: bool) -> "DCGANGenerator":
        """Channels-last weights, so every transposed convolution and batch norm runs in that layout: on a
        CPU (oneDNN) forward + backward at batch 50 on 28 x 28 is about 10 % faster (2 threads; ``make bench``,
        part ``dpsinkhorn_steps``, times both layouts). The same function: only the memory layout differs.
        ``model.memory_format`` (:func:`dpgen.models.generators.apply_memory_format`) sets it: channels-last
        on a CPU by default, contiguous on a GPU."""
        self.channels_last = bool(flag)
        self.to(memory_format=torch.channels_last if flag else torch.contiguous_format)
        return self

    def forward(self, z, y=None):
        return (self.net(self.inputs(z, y)[:, :, None, None]) + 1) / 2


class ConditionalBatchNorm2d(nn.Module):
    def __init__(self, width: int, num_classes: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(width, affine=num_classes == 0)
        self.num_classes = num_classes
        if num_classes > 0:
            self.gain = nn.Embedding(num_classes, width)
            self.bias = nn.Embedding(num_classes, width)
            nn.init.zeros_(self.gain.weight)
            nn.init.zeros_(self.bias.weight)

    def forward(self, x, y):
        x = self.bn(x)
        if self.num_classes == 0:
            return x
        return x * (1 + self.gain(y))[:, :, None, None] + self.bias(y)[:, :, None, None]


class ResBlock(nn.Module):
    def __init__(self, width: int, num_classes: int, upsample: bool):
        super().__init__()
        self.upsample = upsample
        self.bn1 = ConditionalBatchNorm2d(width, num_classes)
        self.conv1 = spectral_norm(nn.Conv2d(width, width, 3, padding=1))
        self.bn2 = ConditionalBatchNorm2d(width, num_classes)
        self.conv2 = spectral_norm(nn.Conv2d(width, width, 3, padding=1))
        self.shortcut = spectral_norm(nn.Conv2d(width, width, 1))

    def forward(self, x, y):
        h = F.relu(self.bn1(x, y))
        if self.upsample:
            h = F.interpolate(h, scale_factor=2)
            x = F.interpolate(x, scale_factor=2)
        h = self.conv2(F.relu(self.bn2(self.conv1(h), y)))
        return h + self.shortcut(x)


class BigGAN32Generator(ConditionalGenerator):
    def __init__(self, code_dim: int = 32, num_classes: int = 2, out_shape=(3, 32, 32), width: int = 256,
                 blocks: int = 4):
        super().__init__(code_dim, num_classes, out_shape)
        c_out, h, w = self.out_shape
        if h % 8 or w % 8:
            raise ValueError(f"model.generator=biggan32 needs an image size divisible by 8 (32 x 32), "
                             f"the dataset has {h} x {w}")
        if blocks < 3:
            raise ValueError(f"biggan32 needs at least 3 residual blocks (three x2 upsamplings), got {blocks}")
        self.h0, self.w0, self.width = h // 8, w // 8, width
        self.linear = spectral_norm(nn.Linear(self.code_dim, width * self.h0 * self.w0))
        self.blocks = nn.ModuleList([ResBlock(width, self.num_classes, upsample=i < 3) for i in range(blocks)])
        self.bn = nn.BatchNorm2d(width)
        self.out = spectral_norm(nn.Conv2d(width, c_out, 3, padding=1))

    def forward(self, z, y=None):
        if self.num_classes > 0 and y is None:
            raise ValueError("this generator is class-conditional: pass labels y")
        y = y.long() if y is not None else None
        x = self.linear(z).view(-1, self.width, self.h0, self.w0)
        for b in self.blocks:
            x = b(x, y)
        return (torch.tanh(self.out(F.relu(self.bn(x)))) + 1) / 2


__all__ = ["BigGAN32Generator", "DCGANGenerator"]
