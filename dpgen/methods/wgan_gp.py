"""WGAN-GP (Gulrajani et al. 2017) as a method of the one loop (non-private).

The entropic-LDP paper's "wavelet denoising + WGAN" baseline trains it on a set that was already
released by a local mechanism and denoised (post-processing), so it needs no mechanism of its own.
Per step: ``n_critic`` critic updates (each on its own batch of real records, drawn with replacement
by ``sample_batch``, and a fresh generated batch; Wasserstein loss + gradient penalty, its own Adam),
then the generator's gradient of ``-critic(fake)``, which the loop's optimizer applies. Critic:
:class:`Critic28`; generator ``dcgan28`` with a uniform latent; Adam (lr 1e-4, betas (0.5, 0.9)),
n_critic = 5, penalty weight 10, as in the WGAN-GP paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import torch
import torch.nn as nn

from dpgen.methods.base import GenerativeMethod
from dpgen.methods.registry import register
from dpgen.privacy.validation import check_positive, check_positive_int
from dpgen.utils.noise import randint
from dpgen.utils.settings import MethodConfig



class Critic28(nn.Module):
    """The critic for 28 x 28 images: DCGAN-style convolutions without batch norm (the gradient penalty is
    per sample)."""

    def __init__(self, channels: int = 1, width: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, width, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(2 * width * 7 * 7, 1))

    def forward(self, x):
        return self.net(x).flatten()


def gradient_penalty(critic, real, fake, generator=None):
    """Gulrajani et al.'s penalty: (||grad critic(mix)|| - 1)^2 at random mixes of real and fake, per sample."""
    a = torch.rand(len(real), 1, 1, 1, generator=generator, device=real.device)
    mix = (a * real + (1 - a) * fake).requires_grad_(True)
    grad, = torch.autograd.grad(critic(mix).sum(), mix, create_graph=True)
    return ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()


# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

@dataclass
class WGANGPConfig(MethodConfig):
    """WGAN-GP (Gulrajani et al. 2017), non-private: the GAN of the entropic-LDP paper's "wavelet
    denoising + WGAN" baseline, trained on an already released (privatised, denoised) set."""

    name: str = "wgan_gp"
    private: bool = False
    #: critic steps per generator step, each on its own batch of real records
    n_critic: int = 5
    gp_weight: float = 10.0
    #: the critic's Adam learning rate (betas 0.5, 0.9 as in the WGAN-GP paper)
    critic_lr: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.n_critic, "method.n_critic")
        check_positive(self.critic_lr, "method.critic_lr")


@register("wgan_gp")
class WGANGP(GenerativeMethod):
    Settings = WGANGPConfig
    private = False

    def __init__(self, cfg, image_shape=None, **_):
        super().__init__()
        m = cfg.method
        if not image_shape or tuple(image_shape[-2:]) != (28, 28):
            raise ValueError(f"method=wgan_gp has a 28 x 28 critic; this dataset's records have shape {image_shape}")
        self.n_critic, self.gp_weight = int(m.n_critic), float(m.gp_weight)
        self.critic = Critic28(int(image_shape[0]))
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=float(m.critic_lr), betas=(0.5, 0.9))

    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """``n_critic`` batches of real records, drawn with replacement (one per critic update)."""
        return randint(n, (self.n_critic * batch_size,), generator=generator)  # a SecureGenerator too

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        gen = models["generator"]
        self.critic.to(batch.device)
        for real in batch.real.split(batch.size):
            with torch.no_grad():
                fake = gen.sample(len(real), device=batch.device)[0]
            loss_c = (self.critic(fake).mean() - self.critic(real).mean()
                      + self.gp_weight * gradient_penalty(self.critic, real, fake))
            self.critic_opt.zero_grad(set_to_none=True)
            loss_c.backward()
            self.critic_opt.step()
        loss_g = -self.critic(gen.sample(batch.size, device=batch.device)[0]).mean()
        loss_g.backward()
        self.critic.zero_grad(set_to_none=True)  # the critic's share of loss_g's gradient is not a critic step
        return {"loss": loss_g.detach(), "loss_critic": loss_c.detach()}

    def state_dict(self) -> Dict[str, Any]:
        return {**super().state_dict(), "critic": self.critic.state_dict(), "critic_opt": self.critic_opt.state_dict()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.critic.load_state_dict(state["critic"])
        self.critic_opt.load_state_dict(state["critic_opt"])


__all__ = ["WGANGP"]
