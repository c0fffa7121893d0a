"""Small helpers shared by the evaluators: devices, array conversion, image-shape handling."""

from __future__ import annotations

import contextlib
import math
from typing import Optional, Sequence, Tuple

import numpy as np
import torch



def to_numpy(a, name: str = "array") -> np.ndarray:
    """Tensor / array-like -> numpy array (on CPU, detached)."""
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    if a is None:
        raise ValueError(f"{name} is None")
    return np.asarray(a)


def to_float_tensor(a, name: str = "array") -> torch.Tensor:
    """Tensor / array-like -> float32 CPU tensor (no copy when already one)."""
    if isinstance(a, torch.Tensor):
        return a.detach().to("cpu", torch.float32)
    arr = np.asarray(a)
    if arr.dtype == object:
        raise ValueError(f"{name} has dtype object; expected a numeric array")
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


def check_unit_range(x: torch.Tensor, name: str, tol: float = 1e-3) -> None:
    """Raise ValueError unless all values are finite and lie in [0, 1] (up to ``tol``)."""
    if x.numel() == 0:
        raise ValueError(f"{name} is empty")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    lo, hi = float(x.min()), float(x.max())
    if lo < -tol or hi > 1 + tol:
        raise ValueError(
            f"{name} must have values in [0, 1] (got min {lo:.4g}, max {hi:.4g}); "
            "map generator outputs in [-1, 1] with (x + 1) / 2 first"
        )


def infer_image_shape(feature_shape: Sequence[int], image_shape: Optional[Sequence[int]] = None
                      ) -> Tuple[int, int, int]:
    """(C, H, W) for a batch whose per-sample shape is ``feature_shape``.

    * 3-d per-sample shapes are taken as (C, H, W) when C in {1, 3}, else as (H, W, C) when the
      last axis is 1 or 3 (channels-last);
    * 2-d shapes are (H, W) grayscale;
    * 1-d (flattened) shapes use ``image_shape`` when given, else D = s*s -> (1, s, s) or
      D = 3*s*s -> (3, s, s).
    """
    fs = tuple(int(s) for s in feature_shape)
    if image_shape is not None:
        shp = tuple(int(s) for s in image_shape)
        if len(shp) == 2:
            shp = (1,) + shp
        if len(shp) != 3:
            raise ValueError(f"image_shape must be (C, H, W) or (H, W), got {image_shape!r}")
        if math.prod(shp) != math.prod(fs):
            raise ValueError(f"image_shape {shp} does not match per-sample size {math.prod(fs)} "
                             f"(per-sample shape {fs})")
        return shp  # type: ignore[return-value]
    if len(fs) == 3:
        if fs[0] in (1, 3):
            return fs  # type: ignore[return-value]
        if fs[2] in (1, 3):
            return (fs[2], fs[0], fs[1])
        raise ValueError(f"cannot tell the channel axis of per-sample shape {fs}; pass image_shape")
    if len(fs) == 2:
        return (1, fs[0], fs[1])
    if len(fs) == 1:
        d = fs[0]
        for c in (1, 3):
            s = int(round(math.sqrt(d / c)))
            if c * s * s == d:
                return (c, s, s)
        raise ValueError(f"cannot infer a square image from {d} features; pass image_shape")
    raise ValueError(f"unsupported per-sample shape {fs}")


def as_image_batch(x: torch.Tensor, image_shape=None) -> torch.Tensor:
    """Reshape a batch to (N, C, H, W) following :func:`infer_image_shape`."""
    if x.dim() < 2:
        raise ValueError(f"expected a batch of images, got shape {tuple(x.shape)}")
    c, h, w = infer_image_shape(x.shape[1:], image_shape)
    if x.dim() == 4 and tuple(x.shape[1:]) == (h, w, c) and tuple(x.shape[1:]) != (c, h, w):
        x = x.permute(0, 3, 1, 2)
    return x.reshape(x.shape[0], c, h, w)


@contextlib.contextmanager
def seeded(seed: int, device: torch.device):
    """Seed torch's global RNGs inside the block and restore their state afterwards."""
    devices = [device.index or 0] if device.type == "cuda" else []
    prev_det = torch.backends.cudnn.deterministic
    prev_bench = torch.backends.cudnn.benchmark
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        if device.type == "cuda":
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        try:
            yield
        finally:
            torch.backends.cudnn.deterministic = prev_det
            torch.backends.cudnn.benchmark = prev_bench
