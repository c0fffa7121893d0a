"""What the shared trainer needs from a generative method."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from dpgen.privacy.base import Accountant


class LedgerState:
    """The ledger part of a method's state: what the loop persists before it publishes anything
    (dpgen.train.publication), small enough to write at every log line."""

    #: the loss may be published: it is computed from released values and public data only
    publishes_loss = True
    #: each training step is a mechanism run the ledger charges (False: a one-time release before
    #: training, after which every step is post-processing, as entropic-LDP)
    accounts_steps = True

    def ledger_state(self) -> Dict[str, Any]:
        if self.ledger is not None:  # the accountant and the releases made before training
            return self.ledger.state_dict()
        return {"accountant": self.accountant.state_dict() if self.accountant is not None else None}

    def load_ledger_state(self, state: Dict[str, Any]) -> None:
        if self.ledger is not None and state.get("accountant") is not None:
            self.ledger.load_state_dict(state)
        elif self.accountant is not None and state.get("accountant") is not None:
            self.accountant.load_state_dict(state["accountant"])

    def ledger_steps(self) -> int:
        """Mechanism runs in the ledger (a release before training, such as a DP mean, included)."""
        return self.accountant.steps if self.accountant is not None else 0

    def spent_steps(self) -> int:
        """Per-step mechanism runs in the ledger: what ``max_steps`` counts."""
        return self.ledger.private_steps() if self.ledger is not None else self.ledger_steps()

    #: the run's :class:`dpgen.privacy.ledger.Ledger` (private subsampled-Gaussian methods), else None
    ledger = None

    def account(self) -> None:
        """Record one private step (no-op for non-private methods)."""
        if self.ledger is not None:
            self.ledger.step()

    def epsilon(self) -> float:
        if self.ledger is not None:
            return self.ledger.epsilon()
        return 0.0 if not self.private else float("nan")


class Method(LedgerState):
    """The one contract every trainable method implements (the loop is ``dpgen.train.loop.fit``).

    Per step the loop asks the method which private records the step sees (``sample_batch``: the
    sampling scheme its accountant assumes), hands the task's batch to ``step(models, batch)``,
    which sets ``.grad`` of every trained parameter (the privacy mechanism applied inside) and
    returns the values it may publish (tensors; read only at log time), then steps the optimizer
    and calls ``account()``. ``models``: the task's trained networks by name; ``parameters()``:
    the method's own trained modules (a domain discriminator), stepped by the same optimizer.
    """

    name = "base"
    private = False
    #: "without_replacement" (fixed-size random subsets) or "poisson"
    sampling = "without_replacement"
    accountant = None
    max_steps: Optional[int] = None
    #: generator of the mechanism's randomness (directions, noise); set by the loop
    rng: Optional[torch.Generator] = None

    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Indices of this step's private batch."""
        if self.sampling == "poisson":
            return torch.nonzero(torch.rand(n, generator=generator) < batch_size / n).flatten()
        return torch.randperm(n, generator=generator)[:batch_size]

    def parameters(self) -> List[torch.nn.Parameter]:
        """The method's own trained parameters (default: none)."""
        return []

    def step(self, models: Dict[str, torch.nn.Module], batch) -> Dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def released_finite(self, logs: Dict[str, torch.Tensor], params) -> torch.Tensor:
        """Whether the step's released quantity is finite, as a 0-dim bool tensor on the device (no
        host sync: the loop reads it at log and checkpoint steps only). It reads the loss where it
        is published, else the gradient the mechanism released (post-processing of the release)."""
        from dpgen.train.publication import finite_gradients

        if self.publishes_loss and "loss" in logs:
            return torch.isfinite(torch.as_tensor(logs["loss"])).all()
        return finite_gradients(params)

    def privacy_report(self) -> Dict[str, Any]:
        return {"private": False, "epsilon_spent": 0.0}

    def state_dict(self) -> Dict[str, Any]:
        return self.ledger_state()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.load_ledger_state(state)


class GenerativeMethod(Method):
    """A loss between generated and real batches, a privacy mechanism and a ledger.

    The default ``step`` draws the generated batch (labels uniform, never the private ones), calls
    ``loss(fake, y_fake, real, y_real)`` (the privacy mechanism is applied inside, to the real
    side; ``empty_batch_loss(fake)`` on an empty Poisson batch) and back-propagates it.
    """

    def __init__(self) -> None:
        self.accountant: Optional[Accountant] = None
        self.max_steps: Optional[int] = None  # the steps the (epsilon, delta) budget allows
        self.rng: Optional[torch.Generator] = None

    #: ``prepare_data`` needs the whole private set in memory (a release before training)
    needs_whole_set = False

    def prepare_data(self, x: torch.Tensor, y: torch.Tensor, output_dir=None):
        """Transform the in-memory private set once before training (default: unchanged)."""
        return x, y

    def use_release(self) -> None:
        """Train on a set the caller released before (entropic-LDP figures, baselines on a denoised
        release). A method that privatises its data in ``prepare_data`` records that it was done."""

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        fake, y_fake = models["generator"].sample(batch.size, device=batch.device)
        if batch.real is None:  # an empty Poisson batch: the mechanism still releases its noise
            loss = self.empty_batch_loss(fake)
        else:
            loss = self.loss(fake, y_fake, batch.real, batch.y)
        loss.backward()
        return {"loss": loss.detach()}

    def empty_batch_loss(self, fake) -> torch.Tensor:
        raise NotImplementedError(f"{self.name} drew an empty batch but has no empty_batch_loss: its Poisson "
                                  "mechanism must release noise on an empty batch too")

    # ---- loss and privacy ----------------------------------------------------------------
    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class WORGaussianLedger:
    """The DP-SWD methods' privacy bookkeeping: a :class:`dpgen.privacy.ledger.Ledger` (subsampled
    Gaussian without replacement) plus the random directions' sensitivity bound.

    ``_setup_ledger`` needs ``k`` (directions) and sets ``ledger``, ``accountant``, ``calibration``,
    ``sigma``, ``noise_multiplier``, ``sample_rate``, ``delta_bound``, ``delta_rdp``,
    ``epsilon_budget`` and ``max_steps``.
    """

    def _setup_ledger(self, method_cfg, privacy_cfg, d: int, n_private: int, batch_size: int, steps: int,
                      prefix=()) -> None:
        from dpgen.privacy.dpswd import sensitivity_bound, split_delta
        from dpgen.privacy.ledger import Ledger

        m, p = method_cfg, privacy_cfg
        if batch_size > n_private:
            raise ValueError(f"trainer.batch_size={batch_size} is larger than the private set ({n_private} records): "
                             "lower trainer.batch_size.")
        db, dr = split_delta(p.delta, m.convention, m.delta_split, None, None, m.bound)
        self.sample_rate = batch_size / n_private
        self.ledger = Ledger(epsilon=p.epsilon, delta=dr, sampling="without_replacement", sample_rate=self.sample_rate,
                             prefix=prefix, rel_tol=p.rel_tol, accountant=p.accountant)
        self.accountant = self.ledger.accountant
        # null: calibrated for the run's steps; a number fixes the noise and the budget decides the steps
        z = self.ledger.calibrate(steps) if m.noise_multiplier is None else self.ledger.use_noise(m.noise_multiplier)
        w = sensitivity_bound(self.k, d, db, bound=m.bound, convention=m.convention)
        self.calibration = {"sigma": z * math.sqrt(w), "noise_multiplier": z, "squared_sensitivity": w,
                            "delta_bound": db, "delta_rdp": dr, "bound": m.bound, "convention": m.convention}
        self.sigma, self.noise_multiplier = float(self.calibration["sigma"]), float(z)
        self.delta_bound, self.delta_rdp = float(db), float(dr)
        self.epsilon_budget = float(p.epsilon)
        self.max_steps = self.ledger.max_steps()
        self._apply_union_bound(m, d)

    def _apply_union_bound(self, method_cfg, d: int) -> None:
        """Make a random-direction sensitivity bound (bernstein, chernoff) hold over the whole run.

        Each step draws fresh directions, and the bound fails with probability delta_bound per
        draw. The differing record enters a step with probability q, independently of the
        directions, so over T steps the bound fails for it with probability <= q T delta_bound'
        (union bound). With ``method.union_bound=true`` (default) the per-step bound is evaluated
        at delta_bound' = delta_bound / max(1, q T), T = the most steps the budget allows, so the
        run's delta is delta_bound + delta_rdp as reported. ``false`` is the paper's per-step
        reading (reproduction only: the report then says the guarantee does not hold).
        Needs ``calibration``, ``k``, ``sample_rate``, ``max_steps``, ``noise_multiplier``.
        """
        from dpgen.privacy.dpswd import sensitivity_bound

        cal = self.calibration
        self.union_bound = bool(method_cfg.union_bound)
        self.bound_name = str(method_cfg.bound)
        if not self.union_bound or self.bound_name not in ("bernstein", "chernoff"):
            return
        touches = max(1.0, self.sample_rate * float(self.max_steps))
        per_step = float(cal["delta_bound"]) / touches
        w = sensitivity_bound(self.k, d, per_step, bound=method_cfg.bound, convention=method_cfg.convention)
        cal.update(squared_sensitivity=w, delta_bound_per_step=per_step, sigma=self.noise_multiplier * w ** 0.5,
                   steps_touching_a_record=touches)
        self.sigma = float(cal["sigma"])

    def bound_caveats(self) -> List[str]:
        """Why the directions' sensitivity bound does not give the reported (epsilon, delta), if it does not."""
        if self.bound_name == "clt":
            return ["bound=clt is a normal approximation of the projected sensitivity, not a bound: at k = 1000, "
                    "d = 794 its quantile is below the exact one (per-step failure ~3x delta_bound), so the "
                    "reported delta is not guaranteed (the paper's -c presets; approximate)"]
        if self.bound_name in ("bernstein", "chernoff") and not self.union_bound:
            touches = self.sample_rate * float(self.max_steps or 0)
            return [f"method.union_bound=false: the per-step bound fails with probability delta_bound at each of the "
                    f"~q T = {touches:.4g} steps that touch a record; the delta guaranteed is up to "
                    f"{self.delta_rdp + max(1.0, touches) * self.delta_bound:.3g}, not the reported one"]
        return []

    def _ledger_report(self) -> Dict[str, Any]:
        """The budget, the calibration and the spent epsilon, as every DP-SWD privacy report states them
        (needs ``epsilon_budget``, ``delta_bound``, ``sigma`` and ``calibration`` too)."""
        return {
            **self.ledger.report(),
            "delta": self.delta_bound + self.delta_rdp,
            "delta_bound": self.delta_bound,
            "delta_bound_per_step": self.calibration.get("delta_bound_per_step", self.delta_bound),
            "union_bound_over_steps": ("yes: the per-step bound at delta_bound / (q T), T the most steps the budget "
                                       "allows" if "delta_bound_per_step" in self.calibration else
                                       "not needed (bound=frame holds surely)" if self.bound_name == "frame" else
                                       "no"),
            "delta_rdp": self.delta_rdp,
            "sigma": self.sigma,
            "squared_sensitivity_bound": self.calibration["squared_sensitivity"],
            "bound": self.calibration["bound"],
            "convention": self.calibration["convention"],
            "max_steps_in_budget": self.max_steps,
        }
