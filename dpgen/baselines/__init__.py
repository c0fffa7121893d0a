"""Baselines of the entropic-LDP GAN paper (Figure 2): wavelet denoising of the privatised images
followed by a WGAN-GP, and a W_p GAN trained directly on the privatised data (
i.e. ``method=entropic_ldp method.loss=wasserstein``)."""

from dpgen.baselines.wavelet import tune_wavelet, wavelet_denoise
from dpgen.baselines.wgan_gp import Critic28, gradient_penalty

__all__ = ["wavelet_denoise", "tune_wavelet", "Critic28", "gradient_penalty"]
