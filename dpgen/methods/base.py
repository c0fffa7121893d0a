"""What the shared trainer needs from a generative method."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from dpgen.privacy.base import Accountant


class GenerativeMethod:
    """A loss between generated and real batches, a privacy mechanism and an accountant.

    The trainer calls, per step: ``sample_batch`` (which real records this step sees: the
    sampling scheme the accountant assumes), ``loss(fake, y_fake, real, y_real)`` (the privacy
    mechanism is applied inside, to the real side), then ``account()`` once the step is taken.
    """

    name = "base"
    private = False
    #: "without_replacement" (fixed-size random subsets) or "poisson"
    sampling = "without_replacement"

    def __init__(self) -> None:
        self.accountant: Optional[Accountant] = None
        self.max_steps: Optional[int] = None  # the steps the (epsilon, delta) budget allows
        #: generator of the mechanism's randomness (directions, noise); set by the trainer
        self.rng: Optional[torch.Generator] = None

    # ---- sampling -------------------------------------------------------------------------
    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Indices of this step's real batch."""
        if self.sampling == "poisson":
            q = batch_size / n
            return torch.nonzero(torch.rand(n, generator=generator) < q).flatten()
        return torch.randperm(n, generator=generator)[:batch_size]

    def prepare_data(self, x: torch.Tensor, y: torch.Tensor, output_dir=None):
        """Transform the in-memory private set once before training (default: unchanged)."""
        return x, y

    # ---- loss and privacy ----------------------------------------------------------------
    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def account(self) -> None:
        """Record one private step (no-op for non-private methods)."""

    def epsilon(self) -> float:
        return 0.0 if not self.private else float("nan")

    def privacy_report(self) -> Dict[str, Any]:
        return {"private": False, "epsilon_spent": 0.0}

    def state_dict(self) -> Dict[str, Any]:
        return {"accountant": self.accountant.state_dict() if self.accountant is not None else None}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if self.accountant is not None and state.get("accountant") is not None:
            self.accountant.load_state_dict(state["accountant"])


class WORGaussianLedger:
    """Privacy ledger of a subsampled-without-replacement Gaussian mechanism (the DP-SWD methods).

    Needs ``accountant`` (autodp RDP), ``noise_multiplier``, ``sample_rate`` and ``delta_rdp``.
    """

    def account(self) -> None:
        self.accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)

    def epsilon(self) -> float:
        return self.accountant.get_epsilon(self.delta_rdp)

    def _cross_check(self) -> float:
        """The same ledger under dpgen's own Theorem 9 accountant (independent of autodp)."""
        from dpgen.privacy.accountants import WangWORAccountant

        acc = WangWORAccountant()
        acc.history = [dict(h) for h in self.accountant.history]
        return acc.get_epsilon(self.delta_rdp)

    def _ledger_report(self) -> Dict[str, Any]:
        """The budget, the calibration and the spent epsilon, as every DP-SWD privacy report states them
        (needs ``epsilon_budget``, ``delta_bound``, ``sigma`` and ``calibration`` too)."""
        return {
            "epsilon_budget": self.epsilon_budget,
            "epsilon_spent": self.epsilon(),
            "delta": self.delta_bound + self.delta_rdp,
            "delta_bound": self.delta_bound,
            "delta_rdp": self.delta_rdp,
            "sigma": self.sigma,
            "noise_multiplier": self.noise_multiplier,
            "squared_sensitivity_bound": self.calibration["squared_sensitivity"],
            "bound": self.calibration["bound"],
            "convention": self.calibration["convention"],
        }
