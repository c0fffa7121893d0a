"""DP-Sinkhorn (dp-sinkhorn.txt, Algorithm 1, appendix D) and its variants: ``sinkhorn``, ``dpsinkhorn``,
``dpsinkhorn_param``, ``sinkhorn_adv``, ``dpsinkhorn_adv`` (``conf/method/<name>.yaml``).

Contract: in the private methods real records reach the generator only through one released quantity per step,
the image gradient of the generated batch (``dpsinkhorn``, ``dpsinkhorn_adv``) or the parameter gradient
(``dpsinkhorn_param``), clipped to C and noised by a dpgen.privacy mechanism and charged to the run's ledger; the
generator's inputs are data-independent, so its update is post-processing. The adversarial variants' feature
extractors are not private: release only the generator. A record with an out-of-range label or non-finite
values contributes nothing; batches whose shapes differ, or a missing label when alpha_c > 0, raise a ValueError
naming the mismatch. Each mechanism, its sensitivity and its accountant: docs/DPSINKHORN.md, "The mechanisms".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
import torch.nn as nn

from dpgen.losses.sinkhorn import conditional_rows, record_terms, row_box_diameter, sinkhorn_divergence
from dpgen.methods.base import GenerativeMethod, ledger_for, poisson_gaussian
from dpgen.methods.registry import DataInfo, register
from dpgen.privacy.clipping import clipped_pair_sum, clipped_sum
from dpgen.privacy.image_gradient import ImageGradientMechanism, PerSampleGradientMechanism
from dpgen.utils.labels import label_in_range
from dpgen.privacy.mechanisms import SubsampledGaussian, accountant_for
from dpgen.privacy.validation import check_positive, check_positive_int
from dpgen.utils.noise import permutation, randint
from dpgen.utils.settings import ConfigError, MethodConfig
from dpgen.utils.settings import choice as _choice

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

#: method.clip_mode: per_sample (each record's gradient clipped on its own) or batch (the paper's: the batch's image
#: gradient as one vector); DPSinkhornConfig validates it, the methods read it
CLIP_MODES = ("per_sample", "batch")


@dataclass
class SinkhornConfig(MethodConfig):
    """The Sinkhorn-divergence generator loss (non-private) and its adversarial variant (Eq. 6)."""

    name: str = "sinkhorn"
    private: bool = False
    sampling: str = "poisson"
    #: entropy regularisation of the Sinkhorn divergence (0.05 MNIST, 5 CelebA)
    entropy_reg: float = 0.05
    alpha_c: float = 15.0
    #: Sinkhorn loss settings (dpgen/losses/sinkhorn.py): static (dpgen's log-domain loop with a fixed
    #: schedule: no host sync, CUDA-graph ready; same algorithm and values as geomloss at the same
    #: diameter), tensorized / online / auto (geomloss, the reference); epsilon-scaling ratio
    backend: str = "static"
    scaling: float = 0.5
    #: start of the epsilon-scaling schedule (diameter^2). null: static uses the data-independent box of
    #: the rows' domain ([0, 1] pixels, alpha_c one-hot labels); geomloss measures each batch's box
    diameter: Optional[float] = None
    #: adversarial variants (Eq. 6): weight of the normalised features, feature extractors' Adam lr,
    #: number of data partitions (one extractor each; null: N // batch_size)
    alpha_a: float = 10.0
    feature_lr: float = 1e-4
    num_partitions: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.entropy_reg, "method.entropy_reg", "the entropy regularisation epsilon")
        if self.alpha_c < 0 or self.alpha_a < 0:
            raise ConfigError(f"method.alpha_c={self.alpha_c} / method.alpha_a={self.alpha_a} is invalid: both must "
                              "be >= 0.")
        _choice(self.backend, "method.backend", ("auto", "tensorized", "online", "static"))
        if self.diameter is not None:
            check_positive(self.diameter, "method.diameter", "the start of the epsilon-scaling schedule")
        if not 0.0 < self.scaling < 1.0:
            raise ConfigError(f"method.scaling={self.scaling} is invalid: geomloss' epsilon-scaling ratio lies in "
                              "(0, 1).")
        check_positive(self.feature_lr, "method.feature_lr")
        if self.num_partitions is not None:
            check_positive_int(self.num_partitions, "method.num_partitions")


@dataclass
class DPSinkhornConfig(SinkhornConfig):
    """DP-Sinkhorn (dp-sinkhorn.txt): image-gradient clip C and noise 2 C sigma, Poisson batches."""

    name: str = "dpsinkhorn"
    private: bool = True
    clip: float = 0.5
    #: sigma (the paper's 1.1), or null: calibrated by the ledger to privacy.(epsilon, delta) at the requested steps
    noise_multiplier: Optional[float] = 1.1
    #: batch: the batch gradient clipped to C as one vector, noise std 2 C sigma (the paper: Algorithm 1 for
    #: dpsinkhorn, appendix B for dpsinkhorn_param); per_sample: each real record's gradient of the
    #: record-separable dual bound clipped to C on its own, summed, noise std C sigma (DP-SGD's clipping:
    #: dpsinkhorn_param's default, and dpgen's per-record image gradient for dpsinkhorn). dpsinkhorn_adv: batch
    clip_mode: str = "batch"
    #: generated samples per step (null: trainer.batch_size, the expected real batch). dpsinkhorn with
    #: clip_mode=per_sample only. Data-independent: each record's gradient with respect to all of them is still
    #: clipped to C, so the sensitivity and the accountant do not change; the noise covers fake_batch x |code|
    #: coordinates, and the released sum is still divided by the expected real batch
    fake_batch: Optional[int] = None
    #: lambda >= 0: each step pushes every generated sample away from its nearest other generated sample of its
    #: class, lambda times one record's clipped pull (C / B) for a duplicate, falling linearly to 0 at the batch's
    #: median such distance (DPSinkhorn.repulsion). dpsinkhorn with clip_mode=per_sample only. It reads generated
    #: samples only: post-processing, no privacy cost. 0: off (the releases of every earlier run)
    repel: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.clip_mode, "method.clip_mode", CLIP_MODES)
        if not (math.isfinite(self.repel) and self.repel >= 0):
            raise ConfigError(f"method.repel={self.repel} is invalid: give a finite weight >= 0 (0: no push)")
        if self.repel and (self.name != "dpsinkhorn" or self.clip_mode != "per_sample"):
            raise ConfigError(f"method.repel={self.repel} is set for method={self.name} with "
                              f"method.clip_mode={self.clip_mode}: only dpsinkhorn with clip_mode=per_sample "
                              "pushes its generated samples apart; use method.repel=0")
        if self.fake_batch is not None:
            check_positive_int(self.fake_batch, "method.fake_batch")
            if self.name != "dpsinkhorn" or self.clip_mode != "per_sample":
                raise ConfigError(f"method.fake_batch={self.fake_batch} is set for method={self.name} with "
                                  f"method.clip_mode={self.clip_mode}: only dpsinkhorn with clip_mode=per_sample "
                                  "draws its own count of samples; use method.fake_batch=null")
        check_positive(self.clip, "method.clip", "the image-gradient clipping bound C")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier",
                           "sigma, or null to calibrate it to the budget at the requested steps")


@register("sinkhorn")
class Sinkhorn(GenerativeMethod):
    """Non-private class-conditional Sinkhorn-divergence generator loss."""

    Settings = SinkhornConfig

    private = False

    def __init__(self, cfg, num_classes: int = 0, data_dim: int = 0, n_private: int = 0, steps: int = 0,
                 batch_size: int = 0, **_):
        super().__init__()
        m = cfg.method
        self.sampling = m.sampling
        self.epsilon_reg = float(m.entropy_reg)
        self.alpha_c = float(m.alpha_c)
        self.backend = m.backend
        self.scaling = float(m.scaling)
        self.diameter = None if m.diameter is None else float(m.diameter)
        self.num_classes = int(num_classes)
        self.data_dim = int(data_dim)
        self.n_private = int(n_private)
        self.batch_size = int(batch_size)
        #: diagnostics of the last step (norm of the image gradient before clipping, real batch size)
        self.last_grad_norm: Optional[float] = None
        self.last_real_batch: Optional[int] = None
        #: this step's record mask of a padded batch (trainer.static_shapes; None: every row is a record)
        self.batch_mask: Optional[torch.Tensor] = None

    # ---- compared rows and the divergence -----------------------------------------------------
    def rows(self, x: torch.Tensor, y) -> torch.Tensor:
        # no per-step label check (a host sync): the task checks the dataset's labels once at setup
        return conditional_rows(x, y, self.num_classes, self.alpha_c, check=False)

    def _check(self, fake, real) -> None:
        if tuple(fake.shape[1:]) != tuple(real.shape[1:]):
            raise ValueError(f"cost/label mismatch: generated samples have shape {tuple(fake.shape[1:])}, real "
                             f"ones {tuple(real.shape[1:])}: the generator must produce the dataset's shape")

    def schedule_diameter(self, rows: torch.Tensor) -> Optional[float]:
        """The epsilon-scaling start: method.diameter, else for the static backend the data-independent
        box of the rows' domain ([0, 1] pixels and alpha_c one-hot labels; :func:`row_box_diameter`),
        else None (geomloss measures each batch)."""
        if self.diameter is not None or self.backend != "static":
            return self.diameter
        labels = self.num_classes if self.alpha_c > 0 else 0
        return row_box_diameter(rows.shape[1] - labels, 0.0, 1.0, labels, self.alpha_c)

    def label_mask(self, y: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """The real records whose label lies in [0, num_classes) (a bool tensor, no host read), or None when
        labels do not enter the rows (alpha_c = 0, no classes). A record outside it contributes nothing
        (``dpgen.utils.labels``): weight 0 in the divergence, gradient 0 in the per-record modes."""
        if self.num_classes <= 0 or self.alpha_c == 0 or y is None:
            return None
        return label_in_range(y, self.num_classes)

    def divergence(self, fake, y_fake, real, y_real) -> torch.Tensor:
        self._check(fake, real)
        rf = self.rows(fake, y_fake)
        keep = self.label_mask(y_real)
        if self.batch_mask is not None:  # a padded batch: its padding rows weigh 0, as rows out of range do
            keep = self.batch_mask if keep is None else keep & self.batch_mask
        return sinkhorn_divergence(rf, self.rows(real, y_real).detach(), self.epsilon_reg, scaling=self.scaling,
                                   backend=self.backend, diameter=self.schedule_diameter(rf), y_mask=keep)

    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:
        self.last_real_batch = int(real.shape[0])
        return self.divergence(fake, y_fake, real, y_real)

    def finite_records(self, rf: torch.Tensor, rr: torch.Tensor, y_real: Optional[torch.Tensor] = None) -> tuple:
        """(the real rows with every dropped record replaced by 0, the mask of the kept ones): a record is dropped
        when it has a non-finite value, when its term against the generated rows ``rf`` is not finite (a huge
        value), or when its label ``y_real`` lies outside [0, num_classes) (:meth:`label_mask`)."""
        with torch.no_grad():
            rr, ok = self.valid_records(rr, y_real)
            ok = ok & torch.isfinite(record_terms(rf.detach(), rr, self.epsilon_reg))
        return torch.where(ok.unsqueeze(1), rr, torch.zeros((), dtype=rr.dtype, device=rr.device)), ok

    def valid_records(self, rr: torch.Tensor, y_real: Optional[torch.Tensor] = None) -> tuple:
        """(the real rows with every record that has a non-finite value or a label outside [0, num_classes)
        replaced by 0, the mask of the others): the first test of :meth:`finite_records` and
        :meth:`record_code_pair_sums`, before the term test (no host read)."""
        ok = torch.isfinite(rr).all(dim=1)
        labels = self.label_mask(y_real)
        if labels is not None:
            ok = ok & labels
        return torch.where(ok.unsqueeze(1), rr, torch.zeros((), dtype=rr.dtype, device=rr.device)), ok

    def record_gradients(self, wrt: torch.Tensor, fake, y_fake, real, y_real, chunk: Optional[int] = None):
        """Yields (records' indices, their terms g_i [k], d g_i / d ``wrt`` for each of them [k, *wrt.shape])
        of the record-separable dual bound mean_i g_i (:func:`record_terms`), ``chunk`` records at a time
        (None: all at once); ``fake`` is a function of ``wrt`` (the generated batch itself, or the code a
        fixed decode turns into it). A chunk of k records against m generated rows holds k x m costs and
        k x |wrt| gradients, so the memory stays bounded whatever the batch (a full batch too).

        A record with a non-finite value, or whose term is not finite (a huge value), contributes 0 and is
        replaced by 0 first: back-propagating 0 through its inf / NaN costs would turn every record's
        gradient into NaN (the costs of a chunk share one cdist), so a per-record bound C holds."""
        self._check(fake, real)
        rf = self.rows(fake, y_fake)
        rr, ok = self.finite_records(rf, self.rows(real, y_real).detach(), y_real)
        n = rr.shape[0]
        k = n if chunk is None else max(1, int(chunk))
        for start in range(0, n, k):
            idx = slice(start, min(n, start + k))
            terms = record_terms(rf, rr[idx], self.epsilon_reg) * ok[idx].to(rf.dtype)  # (k,)
            eye = torch.eye(terms.shape[0], dtype=terms.dtype, device=terms.device)
            grads = torch.autograd.grad(terms, wrt, grad_outputs=eye, retain_graph=start + k < n,
                                        is_grads_batched=True)[0]
            yield idx, terms.detach(), grads


#: the adversarial variant's relation: its records are the fixed partitions
PARTITION_RELATION = ("replace one record (here: one fixed partition of the private set; one drawn per step without "
                      "replacement)")


class _PrivateMixin:
    """Accountant, budget and report shared by the private variants."""

    accountant_sampling = "poisson"
    mechanism_text = ""
    #: the Sinkhorn loss (and the dual bound of the param-grad variant) is computed from the clean real
    #: batch: only the noisy gradient is released, so the loop never publishes the loss
    publishes_loss = False

    @classmethod
    def declare(cls, cfg, info, steps: int) -> SubsampledGaussian:
        return cls.released(cfg, info.n_private, int(cfg.trainer.batch_size))

    @classmethod
    def released(cls, cfg, n_private: int, batch_size: int) -> SubsampledGaussian:
        """What one step releases with batches of ``batch_size`` from ``n_private`` records: ``declare`` (for
        ``task=accounting``) and the run's ledger (``_setup_privacy``) both read it."""
        raise NotImplementedError

    @classmethod
    def poisson_mechanism(cls, cfg, n_private: int, batch_size: int, label: str) -> SubsampledGaussian:
        """A Poisson variant's release: the batch of B of the n records, noise x the clip mode's sensitivity."""
        return poisson_gaussian(cfg, DataInfo(int(n_private)), cls.clip_sensitivity(cfg), label, batch_size)

    @staticmethod
    def clip_sensitivity(cfg) -> float:
        """The add/remove sensitivity of method.clip_mode: per_sample clips each record to C (C), batch clips
        the batch's gradient as one vector (2C)."""
        return float(cfg.method.clip) * (1 if cfg.method.clip_mode == "per_sample" else 2)

    def _clip_mode_mechanism(self, cfg):
        """The Poisson variants' checks (Poisson batches, a known method.clip_mode) and the mechanism class the
        clip mode selects."""
        if self.sampling != "poisson":
            raise ValueError(f"method.sampling={self.sampling!r}: {self.name}'s accountant assumes Poisson "
                             "sampling; set method.sampling=poisson")
        self.clip_mode = str(cfg.method.clip_mode)  # one of CLIP_MODES: its settings validated it
        return PerSampleGradientMechanism if self.clip_mode == "per_sample" else ImageGradientMechanism

    def _setup_privacy(self, cfg, n_private: int, batch_size: int, steps: int = 0,
                       mechanism=ImageGradientMechanism) -> None:
        """The ledger of what :meth:`released` declares, and the mechanism that adds its noise."""
        m, p = cfg.method, cfg.privacy
        if batch_size > n_private:
            raise ValueError(f"trainer.batch_size={batch_size} is larger than the dataset ({n_private} records): "
                             "lower trainer.batch_size.")
        # the ledger's accountant: privacy.accountant (auto: dp-accounting's PLD for Poisson batches); the
        # adversarial variant draws partitions without replacement, which only autodp's RDP analyses here
        accountant, reason = self.ledger_accountant(p.accountant)
        if m.noise_multiplier is None and not steps:  # null: calibrated to the budget at the requested steps
            raise ValueError(f"method.noise_multiplier=null calibrates the noise for the run's steps, but "
                             f"{self.name} was given none: set trainer.steps or trainer.epochs, or give "
                             "method.noise_multiplier")
        # a given noise: the ledger's accountant sets how many steps the budget allows
        release = self.released(cfg, n_private, batch_size)
        sample_rate, clip = release.sample_rate, float(m.clip)
        self.ledger = ledger_for(release, p, int(steps or 0), accountant=accountant, reason=reason)
        self.noise_multiplier = self.ledger.noise_multiplier
        self.mechanism = mechanism(clip=float(clip), noise_multiplier=float(self.noise_multiplier),
                                   sample_rate=float(sample_rate))
        self.sample_rate = float(sample_rate)
        self.delta = float(p.delta)
        self.epsilon_budget = float(p.epsilon)
        self.steps_requested = int(steps or 0)
        # None: every requested step fits in the budget (one accountant call, no search)
        self.max_steps = self.ledger.max_steps(self.steps_requested)

    def ledger_accountant(self, requested: str) -> tuple:
        """(the accountant passed to the ledger, why when the method overrides privacy.accountant=``requested``):
        the Poisson variants take it as it is; a variant sampling without replacement keeps ``auto`` / ``rdp`` and
        replaces a Poisson-only accountant by autodp's RDP, saying why."""
        return accountant_for(requested, self.accountant_sampling)

    def privacy_report(self) -> Dict[str, Any]:
        return {
            "private": True,
            "mechanism": self.mechanism_text,
            **self.ledger.report(),
            "delta": self.delta,
            "clip": self.mechanism.clip,
            "noise_std": self.mechanism.noise_std,
            "sensitivity": self.mechanism.sensitivity,  # noise_std = noise_multiplier (the ledger's) x sensitivity
            **({} if self.accountant_sampling == "poisson" else {"neighbouring_relation": PARTITION_RELATION}),
            "not_covered": ("the loss values (computed from clean records: never published); anything the "
                            "run writes outside the generator, its samples and this report"
                            + ("; the feature extractors in the checkpoint (trained on private partitions: "
                               "never release them)" if self.accountant_sampling != "poisson" else "")),
            "max_steps_in_budget": (self.max_steps if self.max_steps is not None else
                                    f">= {self.steps_requested} (the requested steps fit in the budget)"),
            "guarantee_holds": True,
        }


@register("dpsinkhorn")
class DPSinkhorn(_PrivateMixin, Sinkhorn):
    """Algorithm 1: Poisson batches, image gradient clipped to C and noised with std 2 C sigma."""

    Settings = DPSinkhornConfig

    private = True
    sampling = "poisson"
    mechanism_text = ("image gradient grad_X S clipped to C (whole batch) + N(0, (2 C sigma)^2) before it flows "
                      "into the generator (backward hook on the generator output; DP-Sinkhorn Algorithm 1)")


    PER_RECORD_TEXT = ("per-record image gradients: each real record's gradient of the record-separable dual bound "
                       "(mean_i g_i, g = c-transform of the zero potential) with respect to the generated batch "
                       "clipped to C on its own, summed, + N(0, (C sigma)^2) per coordinate, / B, before it flows "
                       "into the generator (dpgen's DP-Sinkhorn variant: DP-SGD's clipping at the image gradient)")

    @classmethod
    def released(cls, cfg, n_private: int, batch_size: int) -> SubsampledGaussian:
        per_record = cfg.method.clip_mode == "per_sample"
        return cls.poisson_mechanism(cfg, n_private, batch_size, "DP-Sinkhorn (image gradient"
                                     + (", per-record clip)" if per_record else ")"))

    def __init__(self, cfg, *, n_private: int = 0, steps: int = 0, batch_size: int = 0, **kw):
        super().__init__(cfg, n_private=n_private, steps=steps, batch_size=batch_size, **kw)
        mech = self._clip_mode_mechanism(cfg)
        self._setup_privacy(cfg, n_private, batch_size, steps, mech)
        if self.clip_mode == "per_sample":
            self.mechanism_text = self.PER_RECORD_TEXT
        #: generated samples per step (method.fake_batch; None: the batch's own size)
        fake_batch = getattr(cfg.method, "fake_batch", None)  # a hand-built config without the field: None
        self.fake_batch = None if fake_batch is None else int(fake_batch)
        #: method.repel (lambda of :meth:`repulsion`; 0: off)
        self.repel = float(getattr(cfg.method, "repel", 0.0) or 0.0)
        #: per-record gradient norms of the last step before clipping (per_sample; kept in memory)
        self.last_norms: Optional[torch.Tensor] = None

    #: per-sample shape of the tensor the hook sits on (set by ``step``; the report names it)
    release_shape: Optional[tuple] = None

    def _hook(self, grad: torch.Tensor) -> torch.Tensor:
        self.last_grad_norm = grad.detach().flatten().norm()  # kept in memory; a tensor: no host sync
        return self.mechanism.privatize(grad, generator=self.rng)

    def _batch_clip_only(self) -> None:
        """The hook clips the batch gradient as one vector: with clip_mode=per_sample its noise (C sigma) would
        be half what that needs, so the per-record mode releases through ``step`` only."""
        if self.clip_mode != "batch":
            raise ValueError(f"method.clip_mode={self.clip_mode!r}: the per-record image gradient is released by "
                             "DPSinkhorn.step (release_per_record), not by the batch hook of loss(); use "
                             "method.clip_mode=batch for the hook")

    def privacy_report(self) -> Dict[str, Any]:
        rep = super().privacy_report()
        if self.release_shape is not None:
            rep["release_point"] = (f"the generator's sample_code output, {math.prod(self.release_shape)} numbers "
                                    f"per generated sample (shape {list(self.release_shape)}); only fixed, "
                                    "parameter-free operations follow it")
        return rep

    def loss(self, fake, y_fake, real, y_real, barrier: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The divergence, with the privacy hook on ``barrier`` (default: ``fake`` itself, the
        generator output; section 4.1). ``fake`` must be a fixed, parameter-free function of it."""
        self._batch_clip_only()
        barrier = fake if barrier is None else barrier
        if not barrier.requires_grad:
            raise ValueError("DP-Sinkhorn needs the generator output (requires_grad) to privatise its gradient")
        barrier.register_hook(self._hook)
        return super().loss(fake, y_fake, real, y_real)

    def empty_batch_loss(self, fake, barrier: Optional[torch.Tensor] = None) -> torch.Tensor:
        """An empty Poisson batch: the clean image gradient is 0 and the mechanism still releases its
        noise N(0, (2 C sigma)^2) into the generator, as the Poisson analysis assumes."""
        self._batch_clip_only()
        (fake if barrier is None else barrier).register_hook(self._hook)
        return (fake * 0.0).sum()

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        """The hook sits on the generator's ``sample_code`` output, its last trainable layer's: the
        image itself for most generators; the k x k DCT coefficients for ``model.generator=dct``,
        whose ``decode`` (inverse DCT + clamp) is fixed and parameter-free, so the released
        gradient is grad_code S(decode(code), real) clipped to C + N(0, (2 C sigma)^2) per coordinate:
        the same sensitivity 2C and accountant, in fewer coordinates."""
        gen = models["generator"]
        code, y_fake = gen.sample_code(self.fake_batch or batch.size, device=batch.device)
        self.release_shape = tuple(code.shape[1:])  # shapes are data-independent (no host read)
        if self.clip_mode == "per_sample":
            released = self.release_per_record(gen, code, y_fake, batch)
            code.backward(released if not self.repel else released + self.repulsion(gen, code.detach(), y_fake))
            return {}
        fake = gen.decode(code)  # every trainable parameter is before ``code``
        if batch.real is None:  # an empty Poisson batch: the mechanism still releases its noise
            loss = self.empty_batch_loss(fake, barrier=code)
        else:
            self.batch_mask = batch.mask
            try:
                loss = self.loss(fake, y_fake, batch.real, batch.y, barrier=code)
                loss.backward()
            finally:
                self.batch_mask = None
            return {"loss": loss.detach()}
        loss.backward()
        return {"loss": loss.detach()}

    @property
    def takes_masked_batch(self) -> bool:  # the batch clip masks rows in the divergence; per_sample does not
        return self.clip_mode == "batch"

    def release_per_record(self, gen, code: torch.Tensor, y_fake, batch) -> torch.Tensor:
        """``clip_mode=per_sample``: the released gradient with respect to ``code`` (the generator's
        ``sample_code`` output, ``gen.decode`` fixed after it), sum_i clip(d g_i / d code, C) +
        N(0, (C sigma)^2) per coordinate, divided by the expected batch B. Adding or removing one record
        moves the clipped sum by at most C: sensitivity C, noise multiplier sigma, Algorithm 1's
        accountant. An empty Poisson batch releases the noise alone."""
        # the running total in float64, rounded to code's dtype after the noise (dpgen.privacy.clipping)
        total = torch.zeros(code.shape, dtype=torch.float64, device=code.device)
        if batch.real is not None:
            n = int(batch.real.shape[0])
            self.last_real_batch = n
            norms = []
            parts = (self.record_code_pair_sums(gen, code.detach(), y_fake, batch.real, batch.y)
                     if callable(gen.decode_vjp) else
                     (clipped_sum([grads], self.mechanism.clip) for grads in self.record_code_gradients(
                         gen, code.detach(), y_fake, batch.real, batch.y, chunk=self.record_chunk(n, code))))
            for (part,), nrm in parts:
                total = total + part
                norms.append(nrm)
            self.last_norms = torch.cat(norms)  # kept in memory
        # an empty Poisson batch releases the noise alone
        (noisy,) = self.mechanism.noise_sum([total], generator=self.rng, dtypes=[code.dtype])
        return noisy / self.batch_size

    def repulsion(self, gen, code: torch.Tensor, y_fake) -> torch.Tensor:
        """``method.repel``: the code gradient that pushes each generated sample j away from its nearest other
        generated sample of its class, -lambda (C / B) (1 - d_j / dbar)_+ (p_j - p_nn) / d_j, in the coordinates
        the records' gradients pull in (p = ``decode_vjp(decode(code))``, the clamped image's projection onto the
        code; the code itself for a generator without one). d_j = |p_j - p_nn|, dbar their median over the batch:
        a duplicate is pushed by lambda times one record's clipped pull C / B, a sample at or beyond the median
        distance not at all, so the push evens out crowded samples without spreading the batch past its own
        median spacing (an unbounded 1 / d push, tried first, carried samples that no record pulls back off the
        data: experiments/fidelity/2026-12-07_dpsinkhorn_repel_proxy.md). A sample with no other of its class
        gets none. It reads the generated batch only (no record): post-processing of earlier releases, outside
        the mechanism and its sensitivity. No host sync."""
        with torch.no_grad():
            m = code.shape[0]
            p = (gen.decode_vjp(gen.decode(code)) if callable(gen.decode_vjp) else code).reshape(m, -1)
            d2 = torch.cdist(p, p).pow(2)
            other = ~torch.eye(m, dtype=torch.bool, device=code.device)
            if y_fake is not None:
                other = other & (y_fake.reshape(-1, 1) == y_fake.reshape(1, -1))
            d2 = torch.where(other, d2, torch.full_like(d2, float("inf")))
            d2_nn, nn = d2.min(dim=1)
            has = torch.isfinite(d2_nn) & (d2_nn > 0)
            d = torch.where(has, d2_nn, torch.ones_like(d2_nn)).sqrt()
            dbar = torch.nanmedian(torch.where(has, d, torch.full_like(d, float("nan"))))
            scale = self.repel * self.mechanism.clip / self.batch_size * (1 - d / dbar).clamp_min(0) / d
            scale = torch.nan_to_num(torch.where(has, scale, torch.zeros_like(d)), nan=0.0)
            return (-scale.unsqueeze(1) * (p - p[nn])).reshape(code.shape).to(code.dtype)

    def record_code_gradients(self, gen, code: torch.Tensor, y_fake, real, y_real, chunk: Optional[int] = None):
        """Yields d g_i / d ``code`` [k, *code.shape] for the real records, ``chunk`` at a time (the
        record-separable dual bound; a non-finite record gives 0, as in :meth:`record_gradients`).

        A generator with a fixed linear decode (``decode_vjp``: the DCT generator) takes the closed form:
        g_i = -eps log mean_j exp(-c_ij / eps) gives d g_i / d x_j = 2 w_ij (x_j - y_i) on the image part
        of the rows (w_i = softmax_j(-c_ij / eps); the label part is constant), and the code gradient is
        that through decode's vector-Jacobian product, 2 w_ij (P x_j - P y_i). The same numbers as
        autograd (a test), in k m |code| operations instead of a batched backward through the cost and
        the decode (make bench, part per_record_image_gradient: 4.6 ms against 57.5 ms at batch 50 on MNIST,
        within 1.1x of the cost matrix alone). Other generators: autograd (:meth:`record_gradients`)."""
        if not callable(gen.decode_vjp):  # ConditionalGenerator.decode_vjp: None unless decode is linear
            c = code.detach().requires_grad_(True)
            for _, _, grads in self.record_gradients(c, gen.decode(c), y_fake, real, y_real, chunk=chunk):
                yield grads
            return
        with torch.no_grad():
            x = gen.decode(code)
            self._check(x, real)
            rf = self.rows(x, y_fake)
            rr, ok = self.finite_records(rf, self.rows(real, y_real), y_real)
            d_img = math.prod(x.shape[1:])
            px = gen.decode_vjp(x)  # [m, |code|]
            n = rr.shape[0]
            k = n if chunk is None else max(1, int(chunk))
            for start in range(0, n, k):
                rows = rr[start:start + k]
                w = torch.softmax(-torch.cdist(rows, rf).pow(2) / self.epsilon_reg, dim=1)  # [k, m]
                w = w * ok[start:start + k].unsqueeze(1).to(w.dtype)
                py = gen.decode_vjp(rows[:, :d_img].reshape(rows.shape[0], *x.shape[1:]))  # [k, |code|]
                yield (2.0 * w.unsqueeze(2) * (px.unsqueeze(0) - py.unsqueeze(1))).reshape(
                    rows.shape[0], *code.shape)

    def record_code_pair_sums(self, gen, code: torch.Tensor, y_fake, real, y_real):
        """Yields (the float64 sum of the clipped d g_i / d ``code`` [*code.shape],), their norms before clipping,
        for the real records, a chunk at a time (:meth:`pair_chunk`): a generator with a fixed linear decode
        (``decode_vjp``), whose record gradients :meth:`record_code_gradients` gives in closed form,
        2 w_ij (P x_j - P y_i), summed by :func:`dpgen.privacy.clipping.clipped_pair_sum` without forming the
        k x m x |code| tensor (the same numbers up to float64 rounding; a test compares them). A record with a
        non-finite value or term, or a label out of range, contributes 0, as in :meth:`finite_records` (the same
        :meth:`valid_records`; the term test here shares each chunk's cdist)."""
        with torch.no_grad():
            x = gen.decode(code)
            self._check(x, real)
            rf = self.rows(x, y_fake)
            rr, keep = self.valid_records(self.rows(real, y_real), y_real)
            zero = torch.zeros((), dtype=rr.dtype, device=rr.device)
            d_img = math.prod(x.shape[1:])
            m = x.shape[0]
            px = gen.decode_vjp(x).reshape(m, -1)  # [m, |code sample|]
            n = rr.shape[0]
            k = self.pair_chunk(n, code)
            for start in range(0, n, k):
                logits = -torch.cdist(rr[start:start + k], rf).pow(2) / self.epsilon_reg  # [k, m]
                # the record's term is -eps (logsumexp - log m): finite or the record is dropped
                ok = (keep[start:start + k] & torch.isfinite(torch.logsumexp(logits, dim=1))).unsqueeze(1)
                w = torch.where(ok, torch.softmax(logits, dim=1), zero)
                rows = torch.where(ok, rr[start:start + k], zero)
                py = gen.decode_vjp(rows[:, :d_img].reshape(rows.shape[0], *x.shape[1:])).reshape(rows.shape[0], -1)
                total, norms = clipped_pair_sum(w, px, py, self.mechanism.clip, scale=2.0)
                yield (total.reshape(code.shape),), norms

    #: float64 numbers one chunk of :meth:`record_code_pair_sums` may hold per array (about 32 MB)
    PAIR_CHUNK_FLOATS = 2 ** 22

    def pair_chunk(self, n: int, code: torch.Tensor) -> int:
        """Records per chunk of :meth:`record_code_pair_sums`: k with k x (m + |code sample|) <= PAIR_CHUNK_FLOATS
        (m generated samples); shapes only, nothing read from the records."""
        m, per = code.shape[0], math.prod(code.shape[1:])
        return max(1, min(max(n, 1), self.PAIR_CHUNK_FLOATS // (m + per)))

    #: floats one chunk of per-record gradients may hold (costs and gradients; about 32 MB in float32)
    RECORD_CHUNK_FLOATS = 2 ** 23

    def record_chunk(self, n: int, code: torch.Tensor) -> int:
        """Records per chunk: k with k x (k + |code sample|) x m floats <= RECORD_CHUNK_FLOATS (m generated
        samples); shapes only, nothing read from the records."""
        m, per = code.shape[0], math.prod(code.shape[1:])
        k = max(1, n)
        while k > 1 and k * (k + per) * m > self.RECORD_CHUNK_FLOATS:
            k //= 2
        return k


@register("dpsinkhorn_param")
class DPSinkhornParamGrad(_PrivateMixin, Sinkhorn):
    """DP-Sinkhorn (param grad): noise on the generator's parameter gradient (clip_mode per_sample | batch)."""

    Settings = DPSinkhornConfig

    private = True
    sampling = "poisson"



    @classmethod
    def released(cls, cfg, n_private: int, batch_size: int) -> SubsampledGaussian:
        return cls.poisson_mechanism(cfg, n_private, batch_size,
                                     f"DP-Sinkhorn (param grad, {cfg.method.clip_mode} clipping)")

    def __init__(self, cfg, *, n_private: int = 0, steps: int = 0, batch_size: int = 0, **kw):
        super().__init__(cfg, n_private=n_private, steps=steps, batch_size=batch_size, **kw)
        mech = self._clip_mode_mechanism(cfg)
        self._setup_privacy(cfg, n_private, batch_size, steps, mech)
        self.mechanism_text = (
            "per-record parameter gradients of the record-separable Sinkhorn dual lower bound (mean_i g_i, "
            "g = c-transform of the zero potential) clipped to C each, summed, + N(0, (C sigma)^2), / B "
            "(DP-SGD; DP-Sinkhorn (param grad))" if self.clip_mode == "per_sample" else
            "parameter gradient grad_theta S of the batch clipped to C (one vector) + N(0, (2 C sigma)^2) "
            "per coordinate (DP-Sinkhorn (param grad), appendix B)")
        self.params: List[torch.nn.Parameter] = []
        #: per-record gradient norms of the last step before clipping (per_sample mode)
        self.last_norms: Optional[torch.Tensor] = None

    def bind_generator(self, gen: nn.Module) -> None:
        self.params = [p for p in gen.parameters() if p.requires_grad]

    def _param_grads(self, out: torch.Tensor, cotangent: Optional[torch.Tensor] = None,
                     retain_graph: bool = False) -> List[torch.Tensor]:
        grads = torch.autograd.grad(out, self.params, grad_outputs=cotangent, retain_graph=retain_graph,
                                    allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads)]

    def record_grads(self, fake, y_fake, real, y_real, batched: Optional[bool] = None) -> tuple:
        """(per-record losses g_i [n], per-record parameter gradients [n, *p.shape] per parameter).

        ``batched``: one vmapped backward (default off a CPU) or one backward per record (default on a
        CPU, where it is faster); both give the same gradients."""
        # d g_i / d fake for every record i at once (rows: the image part; the label part is constant)
        ((_, terms, cot),) = self.record_gradients(fake, fake, y_fake, real, y_real)
        n = terms.shape[0]
        if not (fake.device.type != "cpu" if batched is None else batched):
            # one backward per record through the retained graph: on a CPU 1.7x faster than the batched
            # (vmap) backward, whose batching rules for the transposed convolutions cost more than they
            # save (make bench: per-record backward loop vs is_grads_batched vs one backward, the floor)
            rows = [self._param_grads(fake, c, retain_graph=True) for c in cot]
            grads = [torch.stack(g) for g in zip(*rows)]
        else:
            grads = torch.autograd.grad(fake, self.params, grad_outputs=cot, retain_graph=True, allow_unused=True,
                                        is_grads_batched=True)
            grads = [torch.zeros((n, *p.shape), dtype=p.dtype, device=p.device) if g is None else g
                     for p, g in zip(self.params, grads)]
        return terms, grads

    def private_grads(self, fake, y_fake, real, y_real) -> tuple:
        """(the released parameter gradient, one tensor per parameter; the batch loss, not released)."""
        if not self.params:
            raise ValueError("dpsinkhorn_param needs the generator's parameters: call "
                             "method.bind_generator(gen) first (its step does)")
        if self.clip_mode == "per_sample":
            self.last_real_batch = int(real.shape[0])
            terms, grads = self.record_grads(fake, y_fake, real, y_real)
            noisy, self.last_norms = self.mechanism.privatize_sum(grads, generator=self.rng)
            noisy = [g / self.batch_size for g in noisy]  # the expected Poisson batch q N = B
            return noisy, terms.mean()
        s = super().loss(fake, y_fake, real, y_real)
        flat = torch.cat([g.flatten() for g in self._param_grads(s)])
        self.last_grad_norm = flat.detach().norm()  # kept in memory (a tensor: no host sync)
        flat = self.mechanism.privatize(flat, generator=self.rng)
        return [g.view_as(p) for g, p in zip(torch.split(flat, [p.numel() for p in self.params]), self.params)], \
            s.detach()

    def empty_batch_grads(self, device) -> List[torch.Tensor]:
        """An empty Poisson batch: the clean gradient is 0 and the mechanism still releases its noise."""
        if self.clip_mode == "per_sample":
            noisy, _ = self.mechanism.privatize_sum([torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
                                                     for p in self.params], generator=self.rng)
            return [g / self.batch_size for g in noisy]
        flat = self.mechanism.privatize(torch.zeros(sum(p.numel() for p in self.params), device=device),
                                        generator=self.rng)
        return [g.view_as(p) for g, p in zip(torch.split(flat, [p.numel() for p in self.params]), self.params)]

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        """Set the generator's gradients to the released noisy parameter gradient (nothing to publish)."""
        gen = models["generator"]
        self.bind_generator(gen)
        fake, y_fake = gen.sample(batch.size, device=batch.device)
        noisy = (self.empty_batch_grads(batch.device) if batch.real is None else
                 self.private_grads(fake, y_fake, batch.real, batch.y)[0])
        for p, g in zip(self.params, noisy):
            p.grad = g.detach()
        return {}


class FeatureExtractor(nn.Module):
    """Appendix D.3: conv3x3(64)-BN-ReLU-maxpool2, conv3x3(64)-BN-ReLU-maxpool2, conv1x1(32), flattened."""

    def __init__(self, channels: int, hidden: int = 64, out: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, hidden, 3, padding=1), nn.BatchNorm2d(hidden), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(hidden, hidden, 3, padding=1), nn.BatchNorm2d(hidden), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(hidden, out, 1))

    def forward(self, x):
        f = self.net(x).flatten(1)
        return f / f.norm(dim=1, keepdim=True).clamp_min(1e-8)


@register("sinkhorn_adv")
class AdversarialSinkhorn(Sinkhorn):
    """Eq. 6 with one adversarially trained feature extractor (non-private)."""

    private = False

    def __init__(self, cfg, *, image_shape=None, **kw):
        super().__init__(cfg, **kw)
        m = cfg.method
        self.alpha_a = float(m.alpha_a)
        self.feature_lr = float(m.feature_lr)
        self.channels: Optional[int] = int(image_shape[0]) if image_shape else None
        self.num_partitions = 1
        self.extractors: Optional[nn.ModuleList] = None
        self.optimizers: Dict[int, torch.optim.Optimizer] = {}
        self._pending: Optional[Dict[str, Any]] = None
        self._current = 0
        self.device: Optional[torch.device] = None

    # the extractors are built when the image shape is known (first batch or bind_generator)
    def _build(self, channels: int, device) -> None:
        if self.extractors is None:
            self.channels = channels
            self.extractors = nn.ModuleList([FeatureExtractor(channels) for _ in range(self.num_partitions)])
        self.extractors.to(device)
        self.device = torch.device(device)
        if self._pending is not None:
            pend, self._pending = self._pending, None
            self.extractors.load_state_dict(pend["extractors"])
            for k, st in pend["optimizers"].items():
                self._optimizer(int(k)).load_state_dict(st)

    def bind_generator(self, gen: nn.Module) -> None:
        shape = gen.out_shape  # the task's generator: a dpgen.models.base.ConditionalGenerator
        if len(shape) != 3:
            raise ValueError(f"{self.name} needs an image generator (C, H, W), got output shape {shape}")
        self._build(int(shape[0]), next(gen.parameters()).device)

    def _optimizer(self, k: int) -> torch.optim.Optimizer:
        if k not in self.optimizers:
            self.optimizers[k] = torch.optim.Adam(self.extractors[k].parameters(), lr=self.feature_lr,
                                                  betas=(0.5, 0.999))
        return self.optimizers[k]

    def rows_adv(self, x, y, phi) -> torch.Tensor:
        return torch.cat([self.rows(x, y), self.alpha_a * phi(x)], dim=1)

    def divergence_adv(self, fake, y_fake, real, y_real, phi) -> torch.Tensor:
        self._check(fake, real)
        rf = self.rows_adv(fake, y_fake, phi)
        diameter = self.diameter
        if diameter is None and self.backend == "static":  # + the box of alpha_a * unit features
            base = self.rows(fake[:1], y_fake[:1] if y_fake is not None else None)
            feats = rf.shape[1] - base.shape[1]
            diameter = math.hypot(self.schedule_diameter(base), 2 * self.alpha_a * math.sqrt(feats))
        return sinkhorn_divergence(rf, self.rows_adv(real, y_real, phi), self.epsilon_reg, scaling=self.scaling,
                                   backend=self.backend, diameter=diameter, y_mask=self.label_mask(y_real))

    def step(self, models, batch) -> Dict[str, torch.Tensor]:
        """The extractor's ascent step, then the generator's gradient under the updated cost."""
        gen = models["generator"]
        self.bind_generator(gen) if self.extractors is None else None
        fake, y_fake = gen.sample(batch.size, device=batch.device)
        self.ascend(fake.detach(), y_fake, batch.real, batch.y)
        loss = self.loss(fake, y_fake, batch.real, batch.y)
        loss.backward()
        return {"loss": loss.detach()}

    def ascend(self, fake, y_fake, real, y_real) -> None:
        """The current feature extractor ascends the divergence (generated images held fixed)."""
        self._check_images(fake)
        self._build(fake.shape[1], fake.device) if self.extractors is None else None
        phi = self.extractors[self._current]
        phi.train()
        opt = self._optimizer(self._current)
        opt.zero_grad(set_to_none=True)
        (-self.divergence_adv(fake.detach(), y_fake, real, y_real, phi)).backward()
        opt.step()

    def _check_images(self, fake) -> None:
        if fake.dim() != 4:
            raise ValueError(f"{self.name} needs image batches (N, C, H, W), got shape {tuple(fake.shape)}")

    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:
        """The generator's loss under the current extractor; its parameters take no gradient from it."""
        self._check_images(fake)
        self._build(fake.shape[1], fake.device) if self.extractors is None else None
        self.last_real_batch = int(real.shape[0])
        phi = self.extractors[self._current]
        for p_ in phi.parameters():
            p_.requires_grad_(False)
        try:
            s = self.divergence_adv(fake, y_fake, real, y_real, phi)
        finally:
            for p_ in phi.parameters():
                p_.requires_grad_(True)
        return s

    def state_dict(self) -> Dict[str, Any]:
        st = super().state_dict()
        if self.extractors is not None:
            st["extractors"] = self.extractors.state_dict()
            st["optimizers"] = {str(k): o.state_dict() for k, o in self.optimizers.items()}
        return st

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "extractors" in state:
            self._pending = {"extractors": state["extractors"], "optimizers": state.get("optimizers", {})}
            if self.extractors is not None:
                self._build(self.channels, self.device or "cpu")


@register("dpsinkhorn_adv")
class AdversarialDPSinkhorn(_PrivateMixin, AdversarialSinkhorn):
    """Eq. 6 with one extractor per fixed data partition; one partition (record) drawn per step."""

    Settings = DPSinkhornConfig

    private = True
    sampling = "without_replacement"
    accountant_sampling = "without_replacement"
    mechanism_text = ("adversarial cost (Eq. 6), one feature extractor per fixed data partition, one partition "
                      "drawn per step; image gradient clipped to C + N(0, (2 C sigma)^2) (appendix D.4)")


    accounting_relation = PARTITION_RELATION

    @staticmethod
    def partitions(cfg, n_private: int, batch_size: int) -> int:
        """method.num_partitions, or n / B (at least 2) when it is null."""
        k = cfg.method.num_partitions
        return int(k) if k is not None else max(2, int(n_private) // max(int(batch_size), 1))

    @classmethod
    def released(cls, cfg, n_private: int, batch_size: int) -> SubsampledGaussian:
        """One of the fixed partitions per step, drawn without replacement (q = 1 / partitions), accounted
        as the run's ledger does (autodp RDP, without replacement)."""
        k = cls.partitions(cfg, n_private, batch_size)
        return SubsampledGaussian("without_replacement", 1.0 / k, cfg.method.noise_multiplier,
                                  sensitivity=2 * float(cfg.method.clip), units=k, per_step=1, unit="partitions",
                                  label="DP-Sinkhorn (adversarial, one partition per step)")

    def __init__(self, cfg, *, n_private: int = 0, steps: int = 0, batch_size: int = 0, **kw):
        super().__init__(cfg, n_private=n_private, steps=steps, batch_size=batch_size, **kw)
        if cfg.method.clip_mode != "batch":
            raise ValueError(f"method.clip_mode={cfg.method.clip_mode!r}: {self.name} clips the partition's image "
                             "gradient as one vector (appendix D.4); set method.clip_mode=batch")
        self.num_partitions = self.partitions(cfg, n_private, batch_size)
        if self.num_partitions > n_private:
            raise ValueError(f"method.num_partitions={self.num_partitions} exceeds the dataset ({n_private} records)")
        if self.num_partitions < 2:
            raise ValueError(f"method.num_partitions={self.num_partitions}: the private adversarial variant needs "
                             ">= 2 partitions (one is drawn per step; q = 1 / num_partitions)")
        self.sampling = "without_replacement"
        self._setup_privacy(cfg, n_private, batch_size, steps)
        self.partition: Optional[torch.Tensor] = None  # a permutation of the records, fixed at the start

    def sample_batch(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        if self.partition is None:
            self.partition = permutation(n, generator=generator)
        k = int(randint(self.num_partitions, (1,), generator=generator))
        self._current = k
        bounds = torch.linspace(0, n, self.num_partitions + 1).round().long()
        return self.partition[bounds[k]:bounds[k + 1]]

    def _hook(self, grad: torch.Tensor) -> torch.Tensor:
        self.last_grad_norm = grad.detach().flatten().norm()  # kept in memory; a tensor: no host sync
        return self.mechanism.privatize(grad, generator=self.rng)

    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:
        fake.register_hook(self._hook)
        return super().loss(fake, y_fake, real, y_real)

    def state_dict(self) -> Dict[str, Any]:
        st = super().state_dict()
        # the partition must survive a resume: each extractor has only seen its own partition
        st["partition"] = self.partition.tolist() if self.partition is not None else None
        return st

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state.get("partition") is not None:
            self.partition = torch.tensor(state["partition"], dtype=torch.long)


__all__ = ["AdversarialDPSinkhorn", "AdversarialSinkhorn", "DPSinkhorn", "DPSinkhornParamGrad", "FeatureExtractor",
           "Sinkhorn"]
