"""DP-SWD (dp-swd.txt, Algorithm 1) and the non-private SWD, as generative-modelling methods.

Each record is flattened and combined with its label (``label_mode``: ``concat``, the paper's, or ``tensor``,
x (outer) one_hot(y), dpgen's default); generated samples get the same treatment, so the class-conditional
generator learns the joint distribution of (image, label). Each step draws a uniformly random subset of B rows,
fresh directions (``bound=frame``: stacked orthonormal blocks; the other bounds: i.i.d. as Algorithm 1) and adds
noise of std sigma = noise_multiplier * sqrt(w) (:mod:`dpgen.privacy.projection`) to every projected private (and
generated) sample; one accountant step, sampling without replacement at q = B / N.

Contract: every private row is bounded to ||x|| <= 1/2 (``row_bound=clip`` or ``scale``) without using other
records, as Lemma 2 needs; ``row_bound=none`` (reproduction only) and approximate bounds make the run's metrics say
the guarantee does not hold. The compared rows, the directions, the row bound, the calibration and dpgen's default
against the paper presets: docs/DPSWD.md, "The method".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch

from dpgen.losses.sliced import sliced_wasserstein
from dpgen.methods.base import GenerativeMethod, ledger_for
from dpgen.methods.registry import register
from dpgen.privacy.clipping import clip_rows
from dpgen.privacy.mechanisms import ProjectedGaussian, projected_calibration
from dpgen.privacy.validation import check_positive, check_positive_int
from dpgen.utils.labels import label_in_range, one_hot_or_zero
from dpgen.utils.noise import gaussian
from dpgen.utils.settings import ConfigError, MethodConfig
from dpgen.utils.settings import choice as _choice

# ---- settings (conf/method/<name>.yaml; validated when the config is composed) ----

BOUNDS = ("bernstein", "clt", "chernoff", "frame")
CONVENTIONS = ("paper_text", "authors_code")


@dataclass
class SWDConfig(MethodConfig):
    """Sliced Wasserstein generator loss (non-private) and the compared space DP-SWD shares with it."""

    name: str = "swd"
    private: bool = False
    k: int = 1000
    #: order of the sliced Wasserstein distance (1 or 2)
    order: int = 2
    #: d of the space the distributions are compared in (null: the row's dimension; smaller: a fixed
    #: contraction (subsampled randomized Hadamard), see dpgen.methods.dpswd.OrthoCompression)
    compare_dim: Optional[int] = None
    #: weight of the one-hot label appended to each compared row (0: unconditional; null: 0.5 sqrt(d),
    #: comparable to the norm of a [0, 1] image, so labels weigh as much as pixels)
    label_weight: Optional[float] = None
    #: how labels enter the compared row: concat ([x, label_weight one_hot(y)]) or tensor (x outer
    #: one_hot(y), dimension d x C: class means survive the noise; dpgen's default; see
    #: dpgen/methods/dpswd.py). The paper presets set concat
    label_mode: str = "tensor"
    #: compare images through their keep x keep lowest 2-D DCT frequencies per channel (a fixed
    #: contraction; null: all pixels). See dpgen.methods.dpswd.LowPass
    compare_lowpass: Optional[int] = None
    #: subtract a center from every record before the row bound: none | dp_mean (DP-SWD: the mean
    #: record, released once by a Gaussian mechanism with center_noise_multiplier and composed in the
    #: ledger; SWD: the exact mean, the same compared space without noise). The paper presets set none
    center: str = "dp_mean"
    #: noisy copies of each generated row in the loss (1: Algorithm 1; m > 1 averages the generated
    #: side's smoothing noise over m draws: lower-variance gradients, same privacy)
    fake_copies: int = 1
    #: how private rows are bounded to ||x|| <= 1/2 (Lemma 2): clip (per row) or scale (constant, then clip)
    row_bound: str = "clip"
    #: task=domain_adaptation: how the private target enters the gradient. mechanism (default, covered by
    #: the analysis): the target's noisy projections are released and detached, the gradient flows through
    #: the source side only; through: also back-propagate through g(x_target) as Algorithm 2 line 13
    #: publishes (NOT a post-processing of the mechanism: reproduction only)
    target_grad: str = "mechanism"
    #: task=domain_adaptation: dim multiplies SWD_2^2 by the latent dimension d (a projection on a random
    #: unit direction carries ||z||^2 / d on average, so the distance is in the rows' own units); none: as is
    sliced_scale: str = "dim"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.k = check_positive_int(self.k, "method.k", "the number of random projections")
        _choice(self.order, "method.order", (1, 2))
        if self.compare_dim is not None:
            check_positive_int(self.compare_dim, "method.compare_dim")
        if self.label_weight is not None and self.label_weight < 0:
            raise ConfigError(f"method.label_weight={self.label_weight} is invalid: it must be >= 0.")
        _choice(self.row_bound, "method.row_bound", ("clip", "scale", "none", "batch_max"))
        _choice(self.target_grad, "method.target_grad", ("mechanism", "through"))
        _choice(self.sliced_scale, "method.sliced_scale", ("dim", "none"))
        _choice(self.label_mode, "method.label_mode", ("concat", "tensor"))
        check_positive_int(self.fake_copies, "method.fake_copies")
        _choice(self.center, "method.center", ("none", "dp_mean"))
        if self.compare_lowpass is not None:
            check_positive_int(self.compare_lowpass, "method.compare_lowpass")


@dataclass
class DPSWDConfig(SWDConfig):
    """DP-SWD (dp-swd.txt): k random unit directions, Gaussian noise on every projection."""

    name: str = "dpswd"
    private: bool = True
    #: sensitivity bound: bernstein (Lemma 2, rigorous), clt (section 3.1, approximate),
    #: chernoff (exact Chernoff bound of the Beta sum: rigorous and tighter than Bernstein),
    #: frame (directions drawn as stacked orthonormal blocks: sensitivity sqrt(ceil(k/d)) surely, no delta;
    #: dpgen's default). The paper presets set bernstein or clt
    bound: str = "frame"
    #: bound=frame's directions: structured (random signs + orthonormal Hartley transforms, 3 rounds:
    #: O(d log d) per row; dpgen's default) or haar (dense Haar-random orthonormal blocks, O(d k^2) per
    #: draw). Both are exactly orthonormal blocks: the same sensitivity
    directions: str = "structured"
    #: noisy copies of each generated row (lower-variance gradients, same privacy); the paper: 1
    fake_copies: int = 8
    #: paper_text: Eq. 6 + Prop. 2 as written; authors_code: the published Table 4 convention
    convention: str = "paper_text"
    #: fraction of delta given to the sensitivity bound (Prop. 2 uses 1/2)
    delta_split: float = 0.5
    #: bernstein / chernoff: evaluate the per-step bound at delta_bound / (q T) so that it holds over
    #: every step touching a record (union bound); false: the paper's per-step reading (the report
    #: then says the guarantee does not hold)
    union_bound: bool = True
    #: noise multiplier of the DP mean released once before training (center=dp_mean)
    center_noise_multiplier: float = 5.0
    #: null: calibrated to privacy.(epsilon, delta) for the run's steps; a number fixes the noise
    #: (sigma = noise_multiplier * sqrt(w)) and the run stops when the budget is spent
    noise_multiplier: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")
        _choice(self.bound, "method.bound", BOUNDS)
        _choice(self.directions, "method.directions", ("structured", "haar"))
        _choice(self.convention, "method.convention", CONVENTIONS)
        if not 0.0 < self.delta_split < 1.0:
            raise ConfigError(f"method.delta_split={self.delta_split} is invalid: it must lie in (0, 1).")
        check_positive(self.center_noise_multiplier, "method.center_noise_multiplier")
        if self.row_bound == "none":
            import warnings

            warnings.warn("method.row_bound=none: private rows are not bounded, so the (epsilon, delta) "
                          "guarantee does NOT hold; use it only to reproduce the paper's setting.", stacklevel=2)


def compared_rows(x: torch.Tensor, y, num_classes: int, label_weight: float, label_mode: str = "concat"
                  ) -> torch.Tensor:
    """The row a record contributes: pixels and label, as ``label_mode`` says (see module doc). A record whose
    label lies outside [0, num_classes) gives the zero row (no exception, no host read; dpgen.utils.labels),
    as a record with non-finite values does after :func:`bound_rows`."""
    rows = x.flatten(1)
    if label_mode == "tensor" and num_classes > 0 and y is not None:
        # x (outer) one_hot(y): the pixels land in the block of their class; ||row|| = ||x||; an out-of-range
        # label has an all-zero one-hot, hence the zero row (a non-finite pixel x 0 is NaN: those rows are zeroed)
        onehot = one_hot_or_zero(y, num_classes, rows.dtype)
        ok = label_in_range(y, num_classes).unsqueeze(1)
        rows = torch.where(ok, rows, torch.zeros((), dtype=rows.dtype, device=rows.device))
        return (rows.unsqueeze(2) * onehot.unsqueeze(1)).flatten(1)
    if num_classes > 0 and label_weight > 0 and y is not None:
        rows = torch.cat([rows, label_weight * one_hot_or_zero(y, num_classes, rows.dtype)], dim=1)
        ok = label_in_range(y, num_classes).unsqueeze(1)
        rows = torch.where(ok, rows, torch.zeros((), dtype=rows.dtype, device=rows.device))
    return rows


def bound_rows(rows: torch.Tensor, how: str, max_norm: float = 1.0) -> torch.Tensor:
    """Make every row's l2 norm <= 1/2 (see module doc)."""
    if how not in ("clip", "scale", "none"):
        raise ValueError(f"method.row_bound={how!r} is invalid: choose clip, scale or none")
    if how == "none":  # reproduction only: the sensitivity analysis does not cover these rows
        return rows
    if how == "scale":  # a constant that bounds [0, 1] data; the clip below makes it hold for any data
        rows = rows / (2.0 * max_norm)
    # a row whose norm is not finite (inf / NaN pixels) becomes 0: the bound holds for every input
    return clip_rows(rows, 0.5)


def _fwht(x: torch.Tensor) -> torch.Tensor:
    """Fast Walsh-Hadamard transform along the last dimension (a power of 2), unnormalised."""
    n = x.shape[-1]
    h = 1
    y = x
    while h < n:
        y = y.view(*x.shape[:-1], n // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack([a + b, a - b], dim=-2)
        h *= 2
    return y.reshape(x.shape)


class OrthoCompression(torch.nn.Module):
    """A fixed, data-independent linear contraction R^d -> R^m (m < d).

    Subsampled randomized Hadamard transform: zero-pad to N = 2^ceil(log2 d) (an isometry), flip
    signs with a seeded Rademacher diagonal and apply the orthonormal Hadamard transform H / sqrt(N)
    (an orthogonal map), keep m seeded coordinates (a projection). The composition satisfies
    ||P x|| <= ||x||, so rows bounded to 1/2 stay bounded and neighbouring rows stay within 1: the
    DP-SWD analysis holds in the m-dim space.
    This is dpgen's choice for CelebA's "d = 8192" comparison space (section 6.3), where the paper
    used a discriminator's features that are trained on the private data.
    """

    def __init__(self, d_in: int, d_out: int, seed: int = 0):
        super().__init__()
        if not 0 < d_out <= d_in:
            raise ValueError(f"method.compare_dim={d_out} is invalid: it must lie in (0, {d_in}]")
        self.d_in, self.d_out = d_in, d_out
        self.n = 1 << (d_in - 1).bit_length()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("signs", torch.randint(0, 2, (self.n,), generator=g).float() * 2 - 1)
        self.register_buffer("keep", torch.randperm(self.n, generator=g)[:d_out])

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.pad(rows, (0, self.n - self.d_in)) * self.signs.to(rows.dtype)
        return _fwht(x)[:, self.keep] / self.n ** 0.5


class LowPass(torch.nn.Module):
    """A fixed, data-independent contraction of images: the orthonormal 2-D DCT of each channel,
    keeping the ``keep x keep`` lowest frequencies. An orthogonal map followed by a coordinate
    projection, so ||P x|| <= ||x||: bounded rows stay bounded and the DP-SWD analysis holds in the
    smaller space, where the signal of natural images is concentrated and the noise has fewer
    coordinates to spread over (``method.compare_lowpass``).
    """

    def __init__(self, shape, keep: int):
        super().__init__()
        c, h, w = shape
        if not 0 < keep <= min(h, w):
            raise ValueError(f"method.compare_lowpass={keep} is invalid: it must lie in [1, {min(h, w)}] "
                             f"for {h} x {w} images")
        self.shape, self.keep = (c, h, w), keep
        from dpgen.utils.dct import dct_matrix

        self.register_buffer("ch", dct_matrix(h)[:keep].float())
        self.register_buffer("cw", dct_matrix(w)[:keep].float())

    @property
    def out_dim(self) -> int:
        return self.shape[0] * self.keep * self.keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, *self.shape).to(self.ch.dtype)
        return torch.einsum("ih,nchw,jw->ncij", self.ch, x, self.cw).flatten(1)


def row_dim_of(m, data_dim: int, num_classes: int) -> int:
    """The length of a compared row (method settings ``m``, ``data_dim`` values per record after any low-pass):
    the record and its labels by ``m.label_mode`` (a label of weight 0 adds nothing)."""
    if m.label_mode == "tensor" and num_classes > 0:
        return data_dim * num_classes
    weighted = m.label_weight is None or float(m.label_weight) > 0
    return data_dim + (num_classes if (num_classes and weighted) else 0)


def compare_dim_of(m, data_dim: int, num_classes: int, image_shape=()) -> int:
    """The dimension of the rows SWD compares (method settings ``m``): the record (low-passed when
    ``m.compare_lowpass``), its labels by ``m.label_mode``, compressed to ``m.compare_dim``."""
    if m.compare_lowpass and image_shape and len(image_shape) == 3:
        data_dim = LowPass(tuple(image_shape), int(m.compare_lowpass)).out_dim
    row_dim, cd = row_dim_of(m, data_dim, num_classes), m.compare_dim
    return int(cd) if cd and int(cd) < row_dim else row_dim


@register("swd")
class SWD(GenerativeMethod):
    """Non-private sliced Wasserstein generator loss (same compared space, no noise)."""

    Settings = SWDConfig

    private = False

    def __init__(self, cfg, num_classes: int = 0, data_dim: int = 0, n_private: int = 0, steps: int = 0,
                 batch_size: int = 0, image_shape=None, **_):
        super().__init__()
        m = cfg.method
        self.k = int(m.k)
        self.order = int(m.order)
        self.num_classes = int(num_classes)
        lw = m.label_weight
        # default: 0.5 sqrt(d), the norm of a half-lit [0, 1] image, so the label weighs like the pixels
        self.label_weight = 0.5 * math.sqrt(max(data_dim, 1)) if lw is None else float(lw)
        self.row_bound = m.row_bound
        self.label_mode = m.label_mode
        tensor = self.label_mode == "tensor" and num_classes > 0
        self.max_norm = math.sqrt(max(data_dim, 1) + (self.label_weight ** 2 if num_classes and not tensor else 0.0))
        self.sigma = 0.0
        self.frame = self.private and m.bound == "frame"  # DP-SWD only (SWD's config has no bound)
        # bound=frame: structured | haar (a DP-SWD setting; SWD's and the other bounds draw i.i.d. directions)
        self.directions = m.directions if self.frame else "structured"
        lp = m.compare_lowpass
        self.lowpass = None
        if lp:
            if not image_shape or len(image_shape) != 3:
                raise ValueError(f"method.compare_lowpass={lp} needs image data; this dataset's rows are flat: "
                                 "set method.compare_lowpass=null")
            self.lowpass = LowPass(tuple(image_shape), int(lp))
            data_dim = self.lowpass.out_dim
        self.fake_copies = int(m.fake_copies)
        self.center_mode = m.center
        self.center_noise_multiplier = float(m.center_noise_multiplier) if self.private else 0.0  # DP-SWD only
        self.center = None  # set by prepare_data (dp_mean) or load_state_dict
        self.needs_whole_set = self.center_mode not in (None, "none")
        self.center_info: Dict[str, Any] = {}
        row_dim = row_dim_of(m, data_dim, num_classes)
        cd = m.compare_dim
        self.compress = OrthoCompression(row_dim, int(cd), seed=0) if cd and int(cd) < row_dim else None
        if cd and int(cd) > row_dim:
            raise ValueError(f"method.compare_dim={cd} is larger than the rows ({row_dim}): lower it or set null")
        self.compare_dim = int(cd) if self.compress is not None else row_dim

    def rows(self, x, y):
        if self.center is not None:  # a released (DP) constant: the same map for every record
            x = x - self.center.to(x.device, x.dtype).view(1, *x.shape[1:])
        if self.lowpass is not None:  # a contraction, applied before the row bound
            x = self.lowpass.to(x.device)(x)
        r = bound_rows(compared_rows(x, y, self.num_classes, self.label_weight, self.label_mode),
                       self.row_bound, self.max_norm)
        if self.compress is not None:
            r = self.compress.to(r.device)(r)  # a contraction: the bound survives
        return r

    def prepare_data(self, x, y, output_dir=None):
        if self.center_mode == "dp_mean" and self.center is None:
            self.center = self._release_center(x)
        return x, y

    def _release_center(self, x: torch.Tensor) -> torch.Tensor:
        """The mean record (non-private baseline: exact; DPSWD overrides it with a Gaussian mechanism)."""
        self.center_info = {"center": "exact mean of the training records (non-private)"}
        return x.mean(0).detach().cpu()

    def state_dict(self) -> Dict[str, Any]:
        s = super().state_dict()
        s["center"] = self.center
        return s

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state.get("center") is not None:
            self.center = state["center"]  # released once: never re-drawn (or re-accounted) on resume

    def loss(self, fake, y_fake, real, y_real) -> torch.Tensor:
        r_real, r_fake = self.rows(real, y_real).detach(), self.rows(fake, y_fake)
        u = None
        if self.frame:  # stacked orthonormal blocks: the exact sensitivity of bound=frame
            from dpgen.privacy.projection import frame_directions

            u = frame_directions(r_real.shape[1], self.k, self.rng, kind=self.directions, dtype=r_real.dtype,
                                 device=r_real.device)
        # m noisy copies of each generated row: the generated side's smoothing N(0, sigma^2) is
        # averaged over m draws instead of one (less gradient variance). The private side and its
        # release are unchanged, so the privacy analysis is too.
        copies = self.fake_copies if self.fake_copies > 1 and self.sigma > 0 else 1
        return sliced_wasserstein(r_real, r_fake, n_projections=self.k, p=self.order, sigma=self.sigma,
                                  projections=u, generator=self.rng, y_copies=copies)


class DPSWDAccounting:
    """The DP-SWD methods' privacy accounting (a mixin of ``DPSWD`` and ``DADPSWD``): a
    :class:`dpgen.privacy.ledger.Ledger` (subsampled Gaussian without replacement) plus the random
    directions' sensitivity bound.

    ``_setup_ledger`` needs ``k`` (directions) and sets ``ledger``, ``accountant``, ``calibration``,
    ``sigma``, ``noise_multiplier``, ``sample_rate``, ``delta_bound``, ``delta_rdp``,
    ``epsilon_budget`` and ``max_steps``.
    """

    @staticmethod
    def projected_mechanism(m, k: int, d: int, n: int, batch_size: int, steps: int, prefix=(),
                            reading: str = "run", label: str = "DP-SWD", epochs=None) -> ProjectedGaussian:
        """What a DP-SWD run releases (method settings ``m``, ``k`` directions in ``d`` dimensions, batches of
        ``batch_size`` of ``n``), declared to the privacy library (``dpgen.privacy.mechanisms``)."""
        return ProjectedGaussian(k=int(k), d=int(d), n=int(n), batch_size=int(batch_size), steps=int(steps or 0),
                                 bound=str(m.bound), convention=str(m.convention), delta_split=float(m.delta_split),
                                 epochs=epochs, noise_multiplier=m.noise_multiplier, prefix=tuple(prefix),
                                 union_bound=bool(m.union_bound), reading=reading, label=label)

    def _setup_ledger(self, method_cfg, privacy_cfg, d: int, n_private: int, batch_size: int, steps: int,
                      prefix=()) -> None:
        m, p = method_cfg, privacy_cfg
        if batch_size > n_private:
            raise ValueError(f"trainer.batch_size={batch_size} is larger than the private set ({n_private} records): "
                             "lower trainer.batch_size.")
        # null: calibrated for the run's steps; a number fixes the noise and the budget decides the steps; the
        # ledger's delta is the RDP share of the split (the directions' bound takes the rest)
        mech = self.projected_mechanism(m, self.k, d, n_private, batch_size, steps, prefix)
        self.ledger = ledger_for(mech, p, steps)
        self.sample_rate = self.ledger.sample_rate
        self.max_steps = self.ledger.max_steps()
        self.calibration = projected_calibration(mech, self.ledger, p.delta, self.max_steps)
        self.sigma, self.noise_multiplier = float(self.calibration["sigma"]), float(self.ledger.noise_multiplier)
        self.delta_bound, self.delta_rdp = float(self.calibration["delta_bound"]), float(self.calibration["delta_rdp"])
        self.epsilon_budget = float(p.epsilon)
        self.union_bound = bool(m.union_bound)
        self.bound_name = str(m.bound)

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
            "noise_std": self.sigma,  # z sqrt(w), the std on each projection
            "sensitivity": math.sqrt(self.calibration["squared_sensitivity"]),
            "squared_sensitivity_bound": self.calibration["squared_sensitivity"],
            "bound": self.calibration["bound"],
            "convention": self.calibration["convention"],
            "max_steps_in_budget": self.max_steps,
        }


class DPSWDMethod(DPSWDAccounting):
    """What DP-SWD is for every task (generation here, domain adaptation in da_dpswd.py): its settings, its
    sampling and relation, its accounting report (the generative mechanism's: the DA one spends the same)."""

    Settings = DPSWDConfig
    private = True
    sampling = "without_replacement"

    @classmethod
    def declare(cls, cfg, info, steps: int) -> ProjectedGaussian:
        """The generative mechanism (the domain-adaptation one spends the same). The paper's rows (plain rows,
        no centre, no low-pass) are accounted as the paper calibrates them (its per-step bound, its step count
        for a run given in epochs); dpgen's variants as their training run's ledger does."""
        m, t = cfg.method, cfg.trainer
        if m.label_mode == "tensor" or m.center != "none" or m.compare_lowpass:
            prefix = (float(m.center_noise_multiplier),) if m.center == "dp_mean" else ()
            lp = f", low-pass {m.compare_lowpass}" if m.compare_lowpass else ""
            d = compare_dim_of(m, info.dim, info.num_classes, info.shape)
            return cls.projected_mechanism(m, m.k, d, info.n_private, t.batch_size, steps, prefix,
                                           label=f"DP-SWD (label_mode={m.label_mode}{lp})")
        epochs = None if t.steps is not None else t.epochs
        return cls.projected_mechanism(m, m.k, m.compare_dim or info.dim, info.n_private, t.batch_size, steps,
                                       reading="paper", epochs=epochs)


@register("dpswd")
class DPSWD(DPSWDMethod, SWD):

    def __init__(self, cfg, num_classes: int = 0, data_dim: int = 0, n_private: int = 0, steps: int = 0,
                 batch_size: int = 0, image_shape=None, **_):
        super().__init__(cfg, num_classes=num_classes, data_dim=data_dim, image_shape=image_shape)
        self.n_private = n_private
        # a DP mean released once before training (center=dp_mean) is one more Gaussian mechanism:
        # full batch, noise multiplier center_noise_multiplier, composed in the same ledger
        self.prefix = self.center_noise_multiplier if self.center_mode == "dp_mean" else None
        self._setup_ledger(cfg.method, cfg.privacy, self.compare_dim, n_private, batch_size, steps,
                           prefix=(self.prefix,) if self.prefix is not None else ())

    def _release_center(self, x: torch.Tensor) -> torch.Tensor:
        """Gaussian mechanism on the mean record: rows clipped to norm R = sqrt(d) (the largest norm
        of [0, 1] data; a no-op there), replace-one sensitivity 2R / N, noise std z * 2R / N; one
        full-batch step in the ledger."""
        flat = x.flatten(1).double()
        r = math.sqrt(flat.shape[1])
        clipped = clip_rows(flat, r)  # a record with a non-finite value contributes 0
        std = self.center_noise_multiplier * 2 * r / flat.shape[0]
        noise = gaussian(flat.shape[1], generator=self.rng, device=self.rng.device if self.rng is not None
                            else None, dtype=torch.float64).to(flat.device)
        self.ledger.release_prefix()
        self.center_info = {"center": "DP mean record, released once before training (Gaussian mechanism, "
                                      "accounted as one full-batch step)",
                            "center_clip_norm": r, "center_noise_std": std,
                            "center_noise_multiplier": self.center_noise_multiplier}
        return (clipped.mean(0) + std * noise).float().view(x.shape[1:]).cpu()

    def prepare_data(self, x, y, output_dir=None):
        if self.center_mode == "dp_mean" and self.center is None:
            if self.rng is None:
                raise RuntimeError("DPSWD.prepare_data needs the mechanism's random generator (method.rng)")
            self.center = self._release_center(x)
        return x, y

    def privacy_report(self) -> Dict[str, Any]:
        return {
            "private": True,
            "mechanism": "Gaussian noise on k random projections of each private row (DP-SWD Algorithm 1)",
            **self._ledger_report(),
            "k": self.k,
            "compare_dim": self.compare_dim,
            "sampling": "without_replacement (uniform random subset of batch_size rows per step)",
            **self.center_info,
            "directions": (f"stacked random orthonormal blocks ({self.directions}; bound=frame: exact sensitivity)"
                           if self.frame else "i.i.d. uniform on the sphere (Algorithm 1)"),
            "label_mode": self.label_mode,
            "compare_lowpass": (f"{self.lowpass.keep} x {self.lowpass.keep} lowest 2-D DCT frequencies per channel "
                                "(a fixed contraction, applied before the row bound)" if self.lowpass is not None
                                else None),
            "row_bound": (
                f"{self.row_bound}: every compared row ("
                + ("pixels (outer) one-hot label" if self.label_mode == "tensor"
                   else f"pixels + {self.label_weight} x one-hot label") + ") has "
                "l2 norm <= 1/2, so neighbouring rows differ by <= 1 (Lemma 2)"
                if self.row_bound != "none" else
                "none: rows are NOT bounded; the noise assumes sensitivity 1 but rows can differ by up to "
                f"{2 * self.max_norm:.3g}, so the (epsilon, delta) above does NOT hold (reproduction only)"
            ),
            "not_covered": "anything the run writes beyond the generator, its samples, the losses (computed from "
                           "the released noisy projections) and this report",
            "guarantee_holds": not self.caveats(),
            "guarantee_caveats": self.caveats(),
        }

    def caveats(self) -> list:
        rows = ([] if self.row_bound != "none" else
                ["method.row_bound=none: private rows are not bounded (Lemma 2 does not apply)"])
        return rows + self.bound_caveats()
