"""Fidelity and diversity beside downstream accuracy: what a generator adds beyond ten class averages.

* :func:`class_mean_baseline` - accuracy (%) on the real test split of a nearest-class-mean classifier whose
  class means are the SYNTHETIC samples' (pixels, Euclidean). A generator whose LogReg / MLP / CNN accuracy is
  no higher than this has shown nothing beyond its class templates.
* :func:`spread_ratio` - the intra-class spread (mean pairwise Euclidean distance between samples of the same
  class, pixels) of the synthetic set over that of the real test split, per class and averaged: about 1 for a
  generator whose samples vary as real ones do, near 0 for templates.
* :func:`prdc` - precision and recall (Kynkaenniemi et al., 2019) and density and coverage (Naeem et al., 2020)
  in the Inception feature space, with the ``prdc`` package (clovaai's reference implementation; k = 5 as in
  Naeem et al.), on at most ``max_samples`` features a side.

The real side is always evaluation data (the test split), never the private training set: these numbers are
post-processing of the released generator and of evaluation data, as downstream accuracy is.
"""

from __future__ import annotations

import contextlib
import io
from typing import Dict, Optional

import numpy as np
import torch

from dpgen.eval._common import to_float_tensor

__all__ = ["set_fidelity", "class_mean_baseline", "intra_class_spread", "spread_ratio", "prdc", "recall_indicators",
           "PRDC_K", "PRDC_MAX_SAMPLES"]

#: neighbours of the k-NN balls (Naeem et al. 2020 recommend k = 5 with 10,000 samples a side)
PRDC_K = 5
#: features per side (two n x n distance matrices in float64: 1.6 GB at 10,000)
PRDC_MAX_SAMPLES = 10000


def _flat(x, name: str) -> torch.Tensor:
    t = to_float_tensor(x, name)
    if t.ndim < 2 or t.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty batch (n, ...), got shape {tuple(t.shape)}")
    return t.reshape(t.shape[0], -1).double()


def _labels(y, n: int, name: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)).long().reshape(-1)
    if t.numel() != n:
        raise ValueError(f"{name} has {t.numel()} labels for {n} samples")
    return t


def class_mean_baseline(x_syn, y_syn, x_test, y_test) -> Dict[str, float]:
    """Nearest-synthetic-class-mean classifier on the real test split: ``{"test_acc": %, "classes": k}``.

    The means are those of the synthetic classes present; a test image is assigned the class whose mean is
    nearest in Euclidean distance (pixels, flattened)."""
    xs, xt = _flat(x_syn, "x_syn"), _flat(x_test, "x_test")
    if xs.shape[1] != xt.shape[1]:
        raise ValueError(f"synthetic samples have {xs.shape[1]} values, test samples {xt.shape[1]}")
    ys, yt = _labels(y_syn, len(xs), "y_syn"), _labels(y_test, len(xt), "y_test")
    classes = torch.unique(ys)
    means = torch.stack([xs[ys == c].mean(0) for c in classes])
    pred = classes[torch.cdist(xt, means).argmin(1)]
    return {"test_acc": float((pred == yt).double().mean() * 100.0), "classes": int(len(classes))}


def _mean_pairwise(x: torch.Tensor) -> float:
    n = len(x)
    if n < 2:
        return float("nan")
    d = torch.cdist(x, x)
    return float(d.sum() / (n * (n - 1)))  # the diagonal is zero: the mean over i != j


def intra_class_spread(x, y, max_per_class: int = 500, seed: int = 0) -> Dict[int, float]:
    """Mean pairwise Euclidean distance between samples of each class (pixels, flattened), on at most
    ``max_per_class`` samples of a class (a seeded subset)."""
    xf = _flat(x, "x")
    yl = _labels(y, len(xf), "y")
    g = torch.Generator().manual_seed(int(seed))
    out = {}
    for c in torch.unique(yl).tolist():
        idx = torch.nonzero(yl == c).flatten()
        if len(idx) > max_per_class:
            idx = idx[torch.randperm(len(idx), generator=g)[:max_per_class]]
        out[int(c)] = _mean_pairwise(xf[idx])
    return out


def spread_ratio(x_syn, y_syn, x_real, y_real, max_per_class: int = 500, seed: int = 0) -> Dict[str, object]:
    """Intra-class spread of the synthetic set over the real one's: ``{"ratio": mean over classes,
    "per_class": {class: ratio}, "synthetic": mean spread, "real": mean spread}`` (classes present in both)."""
    s = intra_class_spread(x_syn, y_syn, max_per_class, seed)
    r = intra_class_spread(x_real, y_real, max_per_class, seed)
    common = [c for c in sorted(s) if c in r and np.isfinite(s[c]) and np.isfinite(r[c]) and r[c] > 0]
    if not common:
        raise ValueError("no class has at least 2 synthetic and 2 real samples")
    per = {c: s[c] / r[c] for c in common}
    return {"ratio": float(np.mean(list(per.values()))), "per_class": per,
            "synthetic": float(np.mean([s[c] for c in common])), "real": float(np.mean([r[c] for c in common]))}


def _subsample(a: np.ndarray, m: int, seed: int) -> np.ndarray:
    if len(a) <= m:
        return a
    return a[np.random.default_rng(seed).choice(len(a), m, replace=False)]


def prdc(real_features, fake_features, k: int = PRDC_K, max_samples: Optional[int] = PRDC_MAX_SAMPLES,
         seed: int = 0) -> Dict[str, float]:
    """Precision, recall, density and coverage of ``fake_features`` against ``real_features`` ((n, d) arrays),
    with the ``prdc`` package's ``compute_prdc`` (its size line is not printed); each side is subsampled (seeded)
    to ``max_samples`` first. Needs more than ``k`` samples a side."""
    try:
        from prdc import compute_prdc
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("precision/recall/density/coverage need the prdc package: pip install prdc") from e
    real = np.asarray(real_features, dtype=np.float32)
    fake = np.asarray(fake_features, dtype=np.float32)
    if real.ndim != 2 or fake.ndim != 2 or real.shape[1] != fake.shape[1]:
        raise ValueError(f"feature matrices must be (n, d) with equal d, got {real.shape} and {fake.shape}")
    if min(len(real), len(fake)) <= k:
        raise ValueError(f"need more than k={k} samples a side, got {len(real)} real and {len(fake)} fake")
    if max_samples:
        real, fake = _subsample(real, max_samples, seed), _subsample(fake, max_samples, seed + 1)
    with contextlib.redirect_stdout(io.StringIO()):
        out = compute_prdc(real_features=real, fake_features=fake, nearest_k=int(k))
    return {key: float(v) for key, v in out.items()}


def recall_indicators(real, fake, k: int = PRDC_K, chunk: int = 2048) -> np.ndarray:
    """For each real sample, whether it lies inside the fake manifold of Kynkaanniemi et al. (2019): within the
    k-NN radius of some fake sample (its distance to its k-th nearest other fake), with the ``prdc`` package's
    strict inequality; the mean is ``prdc``'s recall. Each real sample's indicator depends on that sample and the
    fakes only, so a sum over private records has sensitivity 1 (dpgen.privacy.selection). Euclidean distances of
    the flattened inputs (pixels, or features), float64."""
    r = torch.as_tensor(np.asarray(real, dtype=np.float64)).reshape(len(real), -1)
    f = torch.as_tensor(np.asarray(fake, dtype=np.float64)).reshape(len(fake), -1)
    if len(f) <= k:
        raise ValueError(f"need more than k={k} fake samples for their k-NN radii")
    radii = []
    for i in range(0, len(f), chunk):  # the k-th nearest other fake: index k of the sorted row (0 is itself)
        d = torch.cdist(f[i:i + chunk], f)
        radii.append(d.kthvalue(k + 1, dim=1).values)
    radius = torch.cat(radii)
    out = np.zeros(len(r), dtype=bool)
    for i in range(0, len(r), chunk):
        d = torch.cdist(r[i:i + chunk], f)
        out[i:i + chunk] = (d < radius[None, :]).any(dim=1).numpy()
    return out


def set_fidelity(x_syn, y_syn, x_test, y_test, seed: int = 0) -> Dict[str, object]:
    """The pixel-space numbers every labelled generation run reports beside its classifiers: ``class_mean``
    (:func:`class_mean_baseline`), ``spread_ratio`` and ``spread`` (:func:`spread_ratio`, against the test split)."""
    out: Dict[str, object] = {"class_mean": class_mean_baseline(x_syn, y_syn, x_test, y_test)}
    try:
        sr = spread_ratio(x_syn, y_syn, x_test, y_test, seed=seed)
    except ValueError as e:  # a test split too small to have two images of a class (sizes of public data only)
        out["spread"] = f"n/a: {e}"
        return out
    out["spread_ratio"] = round(sr["ratio"], 4)
    out["spread"] = {"synthetic": round(sr["synthetic"], 4), "real_test": round(sr["real"], 4),
                     "per_class_ratio": {str(c): round(v, 4) for c, v in sr["per_class"].items()}}
    return out
