"""Atomic checkpoints: models, optimizers, RNG states, the accountant's ledger, the step; each records its format
and an older one is brought to the current format when it is loaded (:mod:`dpgen.train.migrations`)."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from dpgen.train import migrations
from dpgen.utils.io import atomic_write_bytes


def rng_state() -> Dict[str, Any]:
    """Global RNG states (models, generated codes and labels; not the mechanism's randomness)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    """``<dir>/last.pt``, replaced atomically (write to a temp file, fsync, rename)."""

    def __init__(self, directory) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "last.pt"

    def exists(self) -> bool:
        return self.path.exists()

    def save(self, state: Dict[str, Any]) -> Path:
        buf = io.BytesIO()
        torch.save(migrations.stamped(state), buf)
        return atomic_write_bytes(self.path, buf.getvalue())

    def load(self) -> Dict[str, Any]:
        """The checkpoint in the current format (an older one is migrated, or refused when it cannot be)."""
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as e:  # a torn file cannot happen with atomic writes, but say so if it does
            raise RuntimeError(f"checkpoint {self.path} cannot be read ({e}); delete it to start over") from e
        return migrations.migrate(state, migrations.CHECKPOINT, self.path)
