"""WGAN-GP (Gulrajani et al. 2017) for 28 x 28 images: the GAN of the paper's "wavelet denoising +
WGAN" baseline (section 4.3). Critic: DCGAN-style convolutions without batch norm (the gradient
penalty is per sample); generator: ``dcgan28`` (dpgen.models.generators) with a uniform latent.
Adam (lr 1e-4, betas (0.5, 0.9)), n_critic = 5, penalty weight 10, as in the WGAN-GP paper. The
training step is ``method=wgan_gp`` (dpgen/methods/wgan_gp.py) of the one loop.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Critic28(nn.Module):
    def __init__(self, channels: int = 1, width: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, width, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(2 * width * 7 * 7, 1))

    def forward(self, x):
        return self.net(x).flatten()


def gradient_penalty(critic, real, fake, generator=None):
    a = torch.rand(len(real), 1, 1, 1, generator=generator, device=real.device)
    mix = (a * real + (1 - a) * fake).requires_grad_(True)
    grad, = torch.autograd.grad(critic(mix).sum(), mix, create_graph=True)
    return ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()
