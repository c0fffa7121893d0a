"""The one device resolver: ``auto`` -> CUDA when present, else CPU."""

from __future__ import annotations

import torch


def resolve_device(name="auto", key: str = "trainer.device") -> torch.device:
    """``"auto"`` (or None): CUDA when available, else CPU; ``cuda`` without CUDA is an error that
    names ``key`` and the fix; anything else is passed to ``torch.device``."""
    if name is None or (isinstance(name, str) and name == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{key}={name} but no CUDA device is available: use {key}=auto or cpu")
    return dev


__all__ = ["resolve_device"]
