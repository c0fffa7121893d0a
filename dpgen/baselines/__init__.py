"""Baselines of the entropic-LDP GAN paper (Figure 2): wavelet denoising of the privatised images
(then a WGAN-GP, ``method=wgan_gp``: dpgen/methods/wgan_gp.py), and a W_p GAN trained directly on the
privatised data (i.e. ``method=entropic_ldp method.loss=wasserstein``)."""

from dpgen.baselines.wavelet import tune_wavelet, wavelet_denoise

__all__ = ["wavelet_denoise", "tune_wavelet"]
