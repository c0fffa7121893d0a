"""The accountant interface shared by every accountant of dpgen.

Modelled on opacus / autodp:

* ``step(**kwargs)`` records that one (or ``num_steps``) mechanism invocation(s) happened;
* ``get_epsilon(delta)`` returns the epsilon spent so far at that delta;
* ``state_dict()`` / ``load_state_dict(state)`` save and restore everything needed to continue
  accounting, so a resumed run never under-counts (the state is plain JSON-serialisable data).

Accountants differ in what a step needs: the subsampled-Gaussian accountants take
``noise_multiplier`` and ``sample_rate``; the Bayesian and Wasserstein accountants take the
per-step privacy-loss statistics computed from gradient pairs (see their modules).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional


class Accountant(ABC):
    """Base class: a history of steps, an epsilon at a given delta, and a saveable state."""

    #: short name used in configs, tables and checkpoints
    name: str = "base"
    #: what reports call it (None: its name)
    label: Optional[str] = None
    #: (near) exact for the subsampled Gaussian (PLD, PRV), rather than an upper bound (RDP, moments): every RDP
    #: bound of a history must then lie at or above its epsilon (:func:`dpgen.privacy.ledger.cross_check_verdict`)
    exact: bool = False
    #: how a :class:`dpgen.privacy.ledger.Ledger` kept by this accountant calibrates, searches and cross-checks: a
    #: class of :mod:`dpgen.privacy.ledger_accountants`; None: it keeps no ledger (the Bayesian and Wasserstein
    #: accountants take per-step privacy-loss statistics, not a subsampled Gaussian's noise and rate)
    ledger_family: Optional[str] = None
    #: offered as ``privacy.accountant`` and ``privacy.cross_check`` when it keeps a ledger (False: an internal
    #: surrogate or cross-check, such as dpgen's own Theorem 9 accountant)
    offered: bool = True
    #: the one sampling scheme it analyses (opacus' and dp-accounting's: poisson); None: any it is given
    sampling: Optional[str] = None

    def __init__(self) -> None:
        self.history: List[Dict[str, Any]] = []

    @abstractmethod
    def step(self, **kwargs) -> None:
        """Record one mechanism invocation (or ``num_steps`` identical ones)."""

    @abstractmethod
    def get_epsilon(self, delta: float) -> float:
        """Epsilon spent so far, at ``delta``."""

    @property
    def steps(self) -> int:
        return int(sum(h.get("num_steps", 1) for h in self.history))

    def state_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "history": copy.deepcopy(self.history)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(
                f"accountant state is for {state.get('name')!r}, not {self.name!r}: "
                "resume with the accountant the run was started with."
            )
        self.history = copy.deepcopy(state["history"])

    def __len__(self) -> int:
        return self.steps

    def __repr__(self) -> str:
        return f"{type(self).__name__}(steps={self.steps})"
