"""Wavelet denoising of privatised images (PyWavelets), the paper's first baseline (section 4.3).

Each image is decomposed with ``pywt.wavedec2`` (basis ``wavelet``, ``level`` levels), its detail
coefficients are soft- (or hard-) thresholded at ``threshold`` and the image is rebuilt with
``pywt.waverec2``; the approximation coefficients are kept.

Tuning as the paper describes: the basis, the level and the threshold are chosen to minimise the
average l2 distance between the denoised and the *original* images under the particular noise
instance (:func:`tune_wavelet`). That uses the clean images, so it is an oracle that is better
than what a fully private pipeline could do, and "wavelet denoising + WGAN" is only approximately
private at the stated epsilon (the paper says so too).
"""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


def wavelet_denoise(images: np.ndarray, wavelet: str = "db2", level: int = 2, threshold: float = 0.5,
                    mode: str = "soft") -> np.ndarray:
    """Denoise images (n, H, W) or (n, 1, H, W); returns the same shape."""
    import pywt

    x = np.asarray(images, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1, shape[-2], shape[-1])
    if threshold < 0:
        raise ValueError(f"threshold={threshold} is invalid: it must be >= 0")
    if mode not in ("soft", "hard"):
        raise ValueError(f"mode={mode!r} is invalid: choose soft or hard")
    out = np.empty_like(x)
    for i, img in enumerate(x):
        coeffs = pywt.wavedec2(img, wavelet, level=level)
        if threshold > 0:  # (pywt's soft threshold at 0 gives 0/0 on zero coefficients)
            coeffs = [coeffs[0]] + [tuple(pywt.threshold(d, threshold, mode=mode) for d in det) for det in coeffs[1:]]
        rec = pywt.waverec2(coeffs, wavelet)
        out[i] = rec[: shape[-2], : shape[-1]]
    return out.reshape(shape)


def tune_wavelet(noisy: np.ndarray, clean: np.ndarray, noise_scale: float,
                 wavelets: Sequence[str] = ("haar", "db2", "db4", "sym4", "coif1", "bior2.2"),
                 levels: Sequence[int] = (1, 2, 3),
                 threshold_factors: Sequence[float] = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),
                 modes: Sequence[str] = ("soft", "hard")) -> Dict:
    """Grid search (basis, level, threshold = factor x noise scale, mode) minimising the mean l2
    distance to the clean images, clipped to [0, 1] (the oracle tuning of section 4.3)."""
    noisy = np.asarray(noisy, dtype=np.float64)
    clean = np.asarray(clean, dtype=np.float64).reshape(noisy.shape)
    best = None
    for w in wavelets:
        for lv in levels:
            for f in threshold_factors:
                for mode in modes:
                    den = np.clip(wavelet_denoise(noisy, w, lv, f * noise_scale, mode), 0, 1)
                    err = float(np.mean(np.linalg.norm((den - clean).reshape(len(clean), -1), axis=1)))
                    if best is None or err < best["error"]:
                        best = {"wavelet": w, "level": lv, "threshold": f * noise_scale, "mode": mode, "error": err}
    best["error_noisy"] = float(np.mean(np.linalg.norm((np.clip(noisy, 0, 1) - clean).reshape(len(clean), -1),
                                                       axis=1)))
    return best
