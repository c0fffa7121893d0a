"""WGAN-GP (Gulrajani et al. 2017) for 28 x 28 images: the GAN of the paper's "wavelet denoising +
WGAN" baseline (section 4.3). Critic: DCGAN-style convolutions without batch norm (the gradient
penalty is per sample); generator: ``dcgan28`` (dpgen.models.generators) with a uniform latent.
Adam (lr 1e-4, betas (0.5, 0.9)), n_critic = 5, penalty weight 10, as in the WGAN-GP paper.
"""

from __future__ import annotations

import time

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


def train_wgan_gp(data: torch.Tensor, steps: int = 1000, batch_size: int = 64, code_dim: int = 100,
                  n_critic: int = 5, gp_weight: float = 10.0, lr: float = 1e-4, seed: int = 0, progress: bool = True):
    """Train a ``dcgan28`` generator with WGAN-GP on ``data`` (n, 1, 28, 28). Returns (generator, seconds)."""
    from tqdm.auto import tqdm

    from dpgen.models import make_generator

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    gen = make_generator("dcgan28", tuple(data.shape[1:]), 0, code_dim)
    critic = Critic28(data.shape[1])
    opt_g = torch.optim.Adam(gen.parameters(), lr=lr, betas=(0.5, 0.9))
    opt_c = torch.optim.Adam(critic.parameters(), lr=lr, betas=(0.5, 0.9))
    n = len(data)
    t0 = time.time()
    for _ in tqdm(range(steps), desc="WGAN-GP", disable=not progress, leave=False, mininterval=5.0):
        for _ in range(n_critic):
            real = data[torch.randint(0, n, (batch_size,), generator=g)]
            with torch.no_grad():
                fake = gen.sample(batch_size, generator=g)[0]
            loss_c = critic(fake).mean() - critic(real).mean() + gp_weight * gradient_penalty(critic, real, fake, g)
            opt_c.zero_grad(set_to_none=True)
            loss_c.backward()
            opt_c.step()
        fake = gen.sample(batch_size, generator=g)[0]
        loss_g = -critic(fake).mean()
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
    gen.eval()
    return gen, time.time() - t0
