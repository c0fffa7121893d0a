"""What the shared trainer needs from a generative method."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from dpgen.privacy.base import Accountant
from dpgen.utils.noise import permutation, uniform


def ledger_for(mechanism, privacy, steps: int = 0, **overrides):
    """The calibrated ledger of the mechanism a method declares (``dpgen.privacy.mechanisms``) under the run's
    privacy settings (``privacy.epsilon``, ``delta``, ``accountant``, ``rel_tol``; ``overrides`` replace them,
    e.g. a split delta or the accountant a sampling scheme needs). The one place a method's ledger is built."""
    from dpgen.privacy.mechanisms import make_ledger

    kw = dict(epsilon=privacy.epsilon, delta=privacy.delta, accountant=privacy.accountant,
              rel_tol=privacy.rel_tol)
    kw.update(overrides)
    return make_ledger(mechanism, steps=steps, **kw)


def poisson_gaussian(cfg, info, sensitivity: float, label: str, batch_size: Optional[int] = None):
    """The release of a Poisson method: batches of ``batch_size`` (default ``trainer.batch_size``) of the
    ``info.n_private`` records (q = B / n), Gaussian noise of ``method.noise_multiplier`` (None: calibrated) x
    ``sensitivity``."""
    from dpgen.privacy.mechanisms import SubsampledGaussian

    b = cfg.trainer.batch_size if batch_size is None else batch_size
    return SubsampledGaussian("poisson", b / info.n_private, cfg.method.noise_multiplier,
                              sensitivity=float(sensitivity), label=label)


class LedgerState:
    """The ledger part of a method's state: what the loop persists before it publishes anything
    (dpgen.train.publication), small enough to write at every log line."""

    #: the loss may be published: it is computed from released values and public data only
    publishes_loss = True
    #: each training step is a mechanism run the ledger charges (False: a one-time release before
    #: training, after which every step is post-processing, as entropic-LDP)
    accounts_steps = True

    @property
    def accountant(self) -> Optional[Accountant]:
        """The accountant holding the history: the ledger's when the method has one (never a copy a ledger could
        outlive), else the one the method keeps itself (None for a non-private method)."""
        return self.ledger.accountant if self.ledger is not None else self.__dict__.get("_own_accountant")

    @accountant.setter
    def accountant(self, value: Optional[Accountant]) -> None:
        self.__dict__["_own_accountant"] = value

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
        """Record one private step (no-op for non-private methods, and for a method whose steps are
        post-processing of a release made before training, ``accounts_steps = False``: its ledger charges none)."""
        if self.ledger is not None and self.accounts_steps:
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
    #: the dataclass of its settings (a subclass of ``dpgen.config.MethodConfig``), registered as its schema
    #: (``schema/method/<name>``); None: its YAML extends ``schema/method/base`` and needs no keys of its own
    Settings: Optional[type] = None
    private = False
    #: "without_replacement" (fixed-size random subsets) or "poisson"
    sampling = "without_replacement"
    #: a local mechanism (each record privatised on its own, entropic-LDP): its guarantee does not involve the
    #: set's size n. A full-batch release (DP-MERF's mean) is not local: its sensitivity is 2 / n
    local = False
    max_steps: Optional[int] = None
    #: the Gaussian noise multiplier (noise std / sensitivity) of its release once calibrated or given; None:
    #: no Gaussian release (a non-private method) or not known before the method is built
    noise_multiplier: Optional[float] = None
    #: generator of the mechanism's randomness (directions, noise); set by the loop
    rng: Optional[torch.Generator] = None

    # -- construction (dpgen.methods.registry.build) -------------------------------------------
    @classmethod
    def from_config(cls, cfg, info, steps: int, **extra):
        """The method of a run from its config, the data's public facts (``registry.DataInfo``) and the
        steps it is asked to train; each base class maps these onto its constructor."""
        raise NotImplementedError(f"{cls.__qualname__} does not say how it is built: subclass GenerativeMethod, "
                                  "DAMethod or define the classmethod from_config(cfg, info, steps)")

    #: the neighbouring relation ``task=accounting`` names (None: the one the method's report gives)
    accounting_relation: Optional[str] = None

    @classmethod
    def declare(cls, cfg, info, steps: int):
        """What the method releases (a mechanism of ``dpgen.privacy.mechanisms``) for a run of ``steps`` steps on
        data with the public facts ``info``: ``task=accounting`` hands it to the privacy library
        (``dpgen.privacy.accounting.account``), and a method builds its ledger from it. None (the default): the
        method declares nothing, and ``task=accounting`` builds it and prints its own ``privacy_report()``."""
        return None

    # -- the audit's hook (dpgen.audit.canary.audit_release) ----------------------------------------
    #: a method whose step releases one Gaussian mechanism's output may define
    #: ``release(real, y) -> List[Tensor]`` (that output for the real batch ``real``, noise
    #: ``self.noise_multiplier * release_sensitivity()`` per coordinate, drawn from ``self.rng``) and
    #: ``release_sensitivity() -> float`` (its l2 sensitivity under the method's relation); ``make audit``
    #: then audits it with canaries through that code (``--method <name>``), outside methods included
    release = None

    #: a Poisson method's sampling rate q = B / n with n the DECLARED size (``dataset.n_train``), which its
    #: ledger charges; None: ``batch_size / n`` (a non-private method)
    sample_rate: Optional[float] = None

    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Indices of this step's private batch among the ``n`` records loaded. Poisson: each record independently
        at the rate :attr:`sample_rate` its ledger charges (computed from the declared size, so nothing here
        depends on how many records were loaded); otherwise ``batch_size`` records without replacement."""
        if self.sampling == "poisson":
            q = self.sample_rate if self.sample_rate is not None else batch_size / n
            return torch.nonzero(uniform(n, generator=generator) < q).flatten()
        return permutation(n, generator=generator)[:batch_size]

    def parameters(self) -> List[torch.nn.Parameter]:
        """The method's own trained parameters (default: none)."""
        return []

    def step(self, models: Dict[str, torch.nn.Module], batch) -> Dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def released_finite(self, logs: Dict[str, torch.Tensor], params) -> torch.Tensor:
        """Whether the step's released quantity is finite, as a 0-dim bool tensor on the device (no
        host sync: the loop reads it at log and checkpoint steps only). It reads the loss where it
        is published, else the gradient the mechanism released (post-processing of the release)."""
        from dpgen.privacy.clipping import finite_gradients

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

    @classmethod
    def from_config(cls, cfg, info, steps: int, **extra):
        return cls(cfg, num_classes=info.num_classes, data_dim=info.dim, n_private=info.n_private, steps=steps,
                   batch_size=cfg.trainer.batch_size, image_shape=tuple(info.shape) or None, **extra)

    #: ``prepare_data`` needs the whole private set in memory (a release before training)
    needs_whole_set = False

    #: whether ``step`` takes a padded batch with a record mask (``batch.mask``, trainer.static_shapes: the same
    #: loss and gradient as the unpadded batch, in the fixed shapes a CUDA graph of the step needs)
    takes_masked_batch = False

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
