"""Structured configs (dataclasses) validating the Hydra config tree in ``conf/``.

Each config group has a schema registered in Hydra's ConfigStore (``base_<group>_<name>``) that
the YAML files of ``conf/<group>/`` extend through their defaults list. Hydra composes in struct
mode, so an unknown key stops the run with a message naming the key; an unknown choice stops it
with the list of available ones; and :func:`validate` (called by ``run.py`` before anything runs)
instantiates the dataclasses, whose ``__post_init__`` checks each value and names a bad one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

from dpgen.privacy.validation import (
    PrivacyParameterError,
    check_delta,
    check_epsilon,
    check_positive,
    check_positive_int,
)


class ConfigError(ValueError):
    """A config value is invalid; the message names the key and the fix."""


def _choice(value, name: str, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is invalid: choose one of {', '.join(map(str, choices))}.")


# ------------------------------------------------------------------------------------------------
# method/
# ------------------------------------------------------------------------------------------------

BOUNDS = ("bernstein", "clt", "chernoff", "frame")
CONVENTIONS = ("paper_text", "authors_code")
SAMPLINGS = ("without_replacement", "poisson")


@dataclass
class MethodConfig:
    """A method: its loss, its privacy mechanism, and the sampling scheme its accountant uses."""

    name: str = MISSING
    private: bool = True
    #: sampling scheme of the real batches (decides the accountant's amplification)
    sampling: str = "without_replacement"
    #: dotted path of the method's class (``package.module.Class``); null: dpgen's own method of this
    #: name. A new method is one Python file plus one YAML naming it here (docs/EXTENDING.md)
    target: Optional[str] = None

    def __post_init__(self) -> None:
        _choice(self.sampling, "method.sampling", SAMPLINGS)


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

    def __post_init__(self) -> None:
        super().__post_init__()
        self.k = check_positive_int(self.k, "method.k", "the number of random projections")
        _choice(self.order, "method.order", (1, 2))
        if self.compare_dim is not None:
            check_positive_int(self.compare_dim, "method.compare_dim")
        if self.label_weight is not None and self.label_weight < 0:
            raise ConfigError(f"method.label_weight={self.label_weight} is invalid: it must be >= 0.")
        _choice(self.row_bound, "method.row_bound", ("clip", "scale", "none", "batch_max"))
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
    noise_multiplier: float = 1.1
    #: dpsinkhorn_param only: per_sample (DP-SGD on the record-separable dual bound) | batch (the batch gradient)
    clip_mode: str = "per_sample"

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.clip_mode, "method.clip_mode", ("per_sample", "batch"))
        check_positive(self.clip, "method.clip", "the image-gradient clipping bound C")
        check_positive(self.noise_multiplier, "method.noise_multiplier")


@dataclass
class EntropicLDPConfig(MethodConfig):
    """Entropic-LDP GAN: data privatised once by a local mechanism (epsilon per record)."""

    name: str = "entropic_ldp"
    mechanism: str = "gaussian"
    radius: float = 1.0
    #: diameter (2r, correct under LDP) or radius (the paper's text)
    sensitivity: str = "diameter"
    #: Gaussian calibration: analytic (Balle & Wang, any epsilon) or classic (proven for epsilon < 1)
    calibration: str = "analytic"
    #: project records on the ball (false: the records must already lie in it; checked)
    project: bool = True
    #: training loss (dpgen/losses/entropic.py): entropic (W_{p,lambda}, no debiasing), wasserstein
    #: (exact W_p^p, POT), sinkhorn (debiased Sinkhorn divergence)
    loss: str = "entropic"
    #: order p (null: matched to the mechanism, laplace -> 1, gaussian -> 2)
    p: Optional[int] = None
    #: entropic regularisation lambda (null: matched, laplace b -> b, gaussian s -> 2 s^2)
    reg: Optional[float] = None
    #: allow p not matching the mechanism (a warning instead of an error)
    force: bool = False
    #: Laplace + DCT as section 4.4: DCT of each image, coefficients below the per-image
    #: dct_quantile of |c| set to 0, then the l1 projection; generated images are DCT'd too
    dct: bool = False
    dct_quantile: float = 0.8
    #: geomloss epsilon-scaling ratio in (0, 1) (closer to 1: more accurate, slower)
    scaling: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.mechanism, "method.mechanism", ("laplace", "gaussian"))
        check_positive(self.radius, "method.radius", "the ball the records are projected on")
        _choice(self.sensitivity, "method.sensitivity", ("diameter", "radius"))
        _choice(self.calibration, "method.calibration", ("analytic", "classic"))
        _choice(self.loss, "method.loss", ("entropic", "wasserstein", "sinkhorn"))
        if self.p is not None:
            _choice(self.p, "method.p", (1, 2))
            matched = 1 if self.mechanism == "laplace" else 2
            if self.p != matched:
                msg = (f"method.p={self.p} does not match method.mechanism={self.mechanism} (the paper's rule: "
                       f"laplace -> p = 1, gaussian -> p = 2, so the entropic loss denoises the mechanism)")
                if not self.force:
                    raise ConfigError(msg + f": set method.p={matched} (or null), or method.force=true.")
                import warnings

                warnings.warn(msg + "; method.force=true: going on.", stacklevel=2)
        if self.reg is not None:
            check_positive(self.reg, "method.reg", "the entropic regularisation lambda")
        if not 0.0 < self.dct_quantile < 1.0:
            raise ConfigError(f"method.dct_quantile={self.dct_quantile} is invalid: it must lie in (0, 1).")
        if not 0.0 < self.scaling < 1.0:
            raise ConfigError(f"method.scaling={self.scaling} is invalid: it must lie in (0, 1).")


@dataclass
class DPSGDConfig(MethodConfig):
    """DP-SGD classifier (WDP paper): per-sample clipping at C, noise sigma C."""

    name: str = "dpsgd"
    sampling: str = "poisson"
    clip: float = 1.0
    noise_multiplier: Optional[float] = None
    #: accountants run on the same training (dpgen/methods/dpsgd.py): moments (DP, the ledger, always on),
    #: rdp, opacus_rdp (extra DP ledgers), bdp (Bayesian, Triastcyn & Faltings), wdp (Wasserstein)
    accountants: List[str] = field(default_factory=lambda: ["moments", "bdp", "wdp"])
    bdp_delta: float = 1e-10
    wdp_delta: float = 1e-10
    #: WDP order mu and Theorem 1's beta (the WDP authors' code: 16 and 32)
    wdp_order: float = 16.0
    wdp_beta: float = 32.0
    #: examples per batch whose clipped gradients give the pairs of the bdp/wdp accountants (k(k-1)/2 pairs)
    pair_examples: int = 8
    #: per-example gradients computed this many at a time (null: the whole batch at once; per_sample=func)
    chunk_size: Optional[int] = 32
    #: the clipped per-sample sum: ghost (opacus' fast gradient clipping, default) or func (torch.func, materialised)
    per_sample: str = "ghost"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.clip, "method.clip", "the per-sample gradient clipping bound C")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")
        for a in self.accountants:
            _choice(a, "method.accountants[]", ("moments", "rdp", "opacus_rdp", "bdp", "wdp"))
        _choice(self.per_sample, "method.per_sample", ("ghost", "func"))
        check_delta(self.bdp_delta, "method.bdp_delta")
        check_delta(self.wdp_delta, "method.wdp_delta")
        if not self.wdp_order >= 1:
            raise ConfigError(f"method.wdp_order={self.wdp_order} is invalid: the WDP order mu must be >= 1.")
        check_positive(self.wdp_beta, "method.wdp_beta", "Theorem 1's free parameter beta, e.g. 32")
        if self.pair_examples < 2:
            raise ConfigError(f"method.pair_examples={self.pair_examples} is invalid: the bdp/wdp accountants need "
                              "at least 2 per-example gradients per step (3 for bdp); e.g. 8.")
        if self.chunk_size is not None:
            check_positive_int(self.chunk_size, "method.chunk_size")


@dataclass
class WGANGPConfig(MethodConfig):
    """WGAN-GP (Gulrajani et al. 2017), non-private: the GAN of the entropic-LDP paper's "wavelet
    denoising + WGAN" baseline, trained on an already released (privatised, denoised) set."""

    name: str = "wgan_gp"
    private: bool = False
    #: critic steps per generator step, each on its own batch of real records
    n_critic: int = 5
    gp_weight: float = 10.0
    #: the critic's Adam learning rate (betas 0.5, 0.9 as in the WGAN-GP paper)
    critic_lr: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.n_critic, "method.n_critic")
        check_positive(self.critic_lr, "method.critic_lr")


@dataclass
class DPMERFConfig(MethodConfig):
    """DP-MERF (Harder et al. 2021), the reference baseline: the class-conditional mean embedding of the
    private set in random Fourier features, released once (Gaussian mechanism), a generator fitted to it."""

    name: str = "dpmerf"
    private: bool = True
    #: D random features (D / 2 frequencies, cos and sin); DP-MERF's MNIST setting
    n_features: int = 1000
    #: length scale of the Gaussian kernel (null: sqrt(127 d / 784), DP-MERF's MNIST kernel scaled to d pixels)
    length_scale: Optional[float] = None
    #: noise multiplier of the one release, std = z 2 / n (null: calibrated to privacy.epsilon)
    noise_multiplier: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.n_features, "method.n_features", "the number of random features")
        if self.n_features % 2:
            raise ConfigError(f"method.n_features={self.n_features} is invalid: it must be even (cos and sin of "
                              "n_features / 2 frequencies)")
        if self.length_scale is not None:
            check_positive(self.length_scale, "method.length_scale", "the Gaussian kernel's length scale")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")


@dataclass
class DANNConfig(MethodConfig):
    """DANN (Ganin et al. 2016): a domain discriminator trained through gradient reversal (non-private)."""

    name: str = "dann"
    private: bool = False


@dataclass
class DPDANNConfig(MethodConfig):
    """DP-DANN: DANN whose target-dependent gradients are clipped per sample at C and noised (DP-SGD)."""

    name: str = "dpdann"
    sampling: str = "poisson"
    #: per-sample clipping bound C of the target term's gradient
    clip: float = 1.0
    #: null: calibrated to privacy.(epsilon, delta) for the run's steps; a number fixes it
    noise_multiplier: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.clip, "method.clip", "the per-sample gradient clipping bound C")
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")


# ------------------------------------------------------------------------------------------------
# dataset/
# ------------------------------------------------------------------------------------------------


@dataclass
class DatasetConfig:
    name: str = MISSING
    #: number of private training records N
    n_train: int = MISSING
    n_test: int = 0
    #: dimension of one record (flattened)
    dim: int = MISSING
    shape: List[int] = field(default_factory=list)
    num_classes: int = 0
    #: where the files are looked for (null: $DPGEN_DATA_ROOT, else <repo>/data; see docs/DATA.md)
    data_root: Optional[str] = "${oc.env:DPGEN_DATA_ROOT,null}"
    #: extra loader options (e.g. {domain: amazon}, {resize: 28}); see docs/DATA.md
    options: Dict[str, Any] = field(default_factory=dict)
    #: let torchvision download the files (needs network)
    download: bool = False
    description: str = ""
    #: a loader outside dpgen, ``package.module.function(data_root, split, download, **options)``
    #: returning an ArrayDataset (docs/EXTENDING.md); null: dpgen's loader for ``name``
    loader: Optional[str] = None

    def __post_init__(self) -> None:
        check_positive_int(self.n_train, "dataset.n_train")
        check_positive_int(self.dim, "dataset.dim")


@dataclass
class DADatasetConfig(DatasetConfig):
    """A domain-adaptation problem: a public labelled source and a private unlabelled target.

    ``n_train`` is N of the private target (Table 4), ``dim`` the input dimension of one record.
    """

    #: the problem's short name (U-M, M-U, VisDA, D-W, ...), the row of DP-SWD Table 1
    problem: str = MISSING
    source: str = MISSING
    target: str = MISSING
    source_split: str = "train"
    target_split: str = "train"
    source_options: Dict[str, Any] = field(default_factory=dict)
    target_options: Dict[str, Any] = field(default_factory=dict)
    #: size of the public source (checked against the files; null: not checked)
    n_source: Optional[int] = None
    #: the delta of Table 1's caption for this problem (privacy.delta is what the run uses)
    paper_delta: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_source is not None:
            check_positive_int(self.n_source, "dataset.n_source")


# ------------------------------------------------------------------------------------------------
# privacy/, task/, logger/, trainer
# ------------------------------------------------------------------------------------------------

ACCOUNTANT_NAMES = ("rdp", "opacus_rdp", "opacus_prv", "moments", "pld")


@dataclass
class PrivacyConfig:
    epsilon: float = 10.0
    delta: float = 1e-5
    #: main accountant: rdp (autodp, both samplings); opacus_rdp, opacus_prv, moments and pld (Google's
    #: dp-accounting PLD, the tightest) need Poisson sampling. The ledger of a Poisson method (DP-Sinkhorn
    #: and its variants, DP-DANN) calibrates with it; autodp stays its cross-check
    accountant: str = "rdp"
    #: independent accountants reported beside the main one
    cross_check: List[str] = field(default_factory=lambda: ["moments", "opacus_rdp"])
    #: relative precision of the noise calibration
    rel_tol: float = 1e-3
    #: draw the mechanism's randomness (batch sampling, directions, noise) from OS entropy, never from
    #: the public seed (false: reproducible from `seed`, private only while the seed stays secret)
    secret_randomness: bool = True
    #: how this run's settings were chosen, when that looked at the private data or its test split (a
    #: conf/tuned/ preset says so): the privacy report lists it under not_covered. null: not tuned on them
    selected_on_private: Optional[str] = None

    def __post_init__(self) -> None:
        try:
            check_epsilon(self.epsilon, "privacy.epsilon")
            check_delta(self.delta, "privacy.delta")
        except PrivacyParameterError as e:
            raise ConfigError(str(e)) from None
        _choice(self.accountant, "privacy.accountant", ACCOUNTANT_NAMES)
        for name in self.cross_check:
            _choice(name, "privacy.cross_check[]", ACCOUNTANT_NAMES)
        check_positive(self.rel_tol, "privacy.rel_tol")


@dataclass
class TaskConfig:
    name: str = MISSING


@dataclass
class AccountingTaskConfig(TaskConfig):
    name: str = "accounting"
    #: also report epsilon under the cross-check accountants (can be slow for PRV)
    cross_check: bool = True


@dataclass
class GenerationTaskConfig(TaskConfig):
    """Train a generator, then evaluate it on the real test split."""

    name: str = "generation"
    #: synthetic samples for the downstream classifiers (null: min(60,000, 10 x N); the papers use 60,000)
    n_synthetic: Optional[int] = None
    #: downstream classifiers: logreg, mlp, cnn
    eval_models: List[str] = field(default_factory=lambda: ["logreg", "mlp"])
    eval_max_epochs: int = 30
    #: FID of `fid_samples` generated images vs the test split (pytorch-fid Inception weights from
    #: $DPGEN_FID_WEIGHTS or the torch hub cache; without them metrics.json says why FID is missing)
    fid: bool = False
    fid_samples: int = 10000

    def __post_init__(self) -> None:
        if self.n_synthetic is not None:
            check_positive_int(self.n_synthetic, "task.n_synthetic")
        for m in self.eval_models:
            _choice(m, "task.eval_models[]", ("logreg", "mlp", "cnn"))


@dataclass
class ClassificationTaskConfig(TaskConfig):
    """Train a classifier with DP-SGD (method=dpsgd), test it once on the real test split (WDP Table 2)."""

    name: str = "classification"
    #: the CNN (dpgen/models/classifiers.py): auto (by channels), triastcyn_mnist, triastcyn_cifar
    model: str = "auto"
    #: normalisation layers: group (per example; batch norm would break per-example clipping) or none
    norm: str = "group"
    #: examples per forward pass when testing
    eval_batch_size: int = 1000

    def __post_init__(self) -> None:
        _choice(self.model, "task.model", ("auto", "triastcyn_mnist", "triastcyn_cifar"))
        _choice(self.norm, "task.norm", ("group", "none"))
        check_positive_int(self.eval_batch_size, "task.eval_batch_size")


@dataclass
class DomainAdaptationTaskConfig(TaskConfig):
    """Train a feature extractor + classifier on a public labelled source so that it works on a
    private unlabelled target (dp-swd.txt section 4, Algorithm 2); accuracy on the target."""

    name: str = "domain_adaptation"
    #: weight of the adaptation term (sliced distance for dpswd/swd, domain loss for dann/dpdann)
    adapt_weight: float = 1.0
    #: random projections of the sliced distances (dpswd, swd); null: method.k
    k: Optional[int] = None
    #: DP-SWD: how the target enters the gradient. mechanism (default, covered by the analysis): the
    #: target's noisy projections are released and detached, the gradient flows through the source
    #: side only; through: also back-propagate through g(x_target) as Algorithm 2 line 13 publishes
    #: (that gradient is NOT a post-processing of the mechanism: reproduction only)
    target_grad: str = "mechanism"
    #: dann/dpdann: Ganin et al.'s schedule 2 / (1 + exp(-10 p)) - 1 of the reversal weight
    grl_schedule: bool = True
    #: dpswd/swd: dim multiplies SWD_2^2 by the latent dimension d (a projection on a random unit
    #: direction carries ||z||^2 / d on average, so the distance is in the rows' own units); none: as is
    sliced_scale: str = "dim"
    #: evaluate the target accuracy every this many steps (null: only at the end; never used for selection)
    eval_every: Optional[int] = None

    def __post_init__(self) -> None:
        check_positive(self.adapt_weight, "task.adapt_weight")
        if self.k is not None:
            check_positive_int(self.k, "task.k", "the number of random projections")
        _choice(self.target_grad, "task.target_grad", ("mechanism", "through"))
        _choice(self.sliced_scale, "task.sliced_scale", ("dim", "none"))
        if self.eval_every is not None:
            check_positive_int(self.eval_every, "task.eval_every")


@dataclass
class ModelConfig:
    #: auto (from the data shape: merf_conv for 28x28, dcgan64 for 64x64, else mlp), mlp, merf_conv, dcgan64,
    #: mlp256_uniform, fc500, dcgan28, dcgan, biggan32, dct (an MLP emitting low-frequency DCT coefficients,
    #: fixed inverse DCT after them: DP-Sinkhorn's hook then sits on the coefficients)
    generator: str = "auto"
    code_dim: int = 10
    #: generator=dct only: k, the k x k lowest-frequency DCT coefficients per channel it outputs
    dct_size: int = 10

    def __post_init__(self) -> None:
        _choice(self.generator, "model.generator", ("auto", "mlp", "merf_conv", "dcgan64",
                                                    "mlp256_uniform", "fc500", "dcgan28",
                                                    "dcgan", "biggan32", "dct"))
        check_positive_int(self.code_dim, "model.code_dim")
        check_positive_int(self.dct_size, "model.dct_size")


@dataclass
class LoggerConfig:
    name: str = "none"
    #: wandb: offline by default, so no account or network is needed
    mode: str = "offline"
    project: str = "dpgen"

    def __post_init__(self) -> None:
        _choice(self.name, "logger.name", ("none", "csv", "wandb", "tensorboard"))
        _choice(self.mode, "logger.mode", ("offline", "online", "disabled"))


@dataclass
class TrainerConfig:
    epochs: Optional[float] = 100
    #: if set, overrides epochs: the number of optimisation steps
    steps: Optional[int] = None
    batch_size: int = 100
    lr: float = 1e-4
    device: str = "auto"
    log_every: int = 50
    checkpoint_every: int = 500
    #: tqdm progress bar
    progress: bool = True
    #: generator optimizer: adam (betas, weight_decay) | sgd (momentum, weight_decay) | rmsprop
    optimizer: str = "adam"
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    momentum: float = 0.0
    #: decay of an exponential moving average of the trained weights (the generator; DA's g and h; the
    #: classifier), evaluated and released instead of the last iterate (null: off). Post-processing of
    #: the released iterates: no privacy cost.
    ema: Optional[float] = None
    #: CPU threads: auto (this process's share of the cores it may use, shared with the other dpgen runs on
    #: the machine and re-read while training; OMP_NUM_THREADS wins) or a positive integer (dpgen/utils/threads.py)
    threads: str = "auto"

    def __post_init__(self) -> None:
        if str(self.threads) != "auto" and not (str(self.threads).isdigit() and int(self.threads) > 0):
            raise ConfigError(f"trainer.threads={self.threads} is invalid: use auto or a positive integer (e.g. 1).")
        if self.ema is not None and not 0.0 < self.ema < 1.0:
            raise ConfigError(f"trainer.ema={self.ema} is invalid: give a decay in (0, 1) (e.g. 0.99) or null.")
        _choice(self.optimizer, "trainer.optimizer", ("adam", "sgd", "rmsprop"))
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"trainer.betas={list(self.betas)} is invalid: give two numbers in [0, 1).")
        if self.weight_decay < 0 or self.momentum < 0:
            raise ConfigError(f"trainer.weight_decay={self.weight_decay} / trainer.momentum={self.momentum} "
                              "is invalid: both must be >= 0.")
        check_positive_int(self.batch_size, "trainer.batch_size")
        if self.steps is None and self.epochs is None:
            raise ConfigError("trainer.epochs and trainer.steps are both null: set one of them.")
        if self.steps is not None:
            check_positive_int(self.steps, "trainer.steps")
        if self.epochs is not None:
            check_positive(self.epochs, "trainer.epochs")
        check_positive(self.lr, "trainer.lr")
        check_positive_int(self.log_every, "trainer.log_every")
        check_positive_int(self.checkpoint_every, "trainer.checkpoint_every")
        _choice(self.device, "trainer.device", ("auto", "cpu", "cuda"))


@dataclass
class Config:
    #: a method's YAML extends its schema (``/schema/method/<name>@_here_``); an outside method's YAML may
    #: instead give its own keys, validated by its class's ``Settings`` dataclass (``validate``)
    method: Any = MISSING
    dataset: DatasetConfig = MISSING
    task: TaskConfig = MISSING
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    seed: int = 0
    #: continue from the run folder's last checkpoint (give the folder with hydra.run.dir=...):
    #: false | true | auto (continue when the folder holds a checkpoint, else start; what a job
    #: requeued after a time limit or preemption needs: the SLURM presets set it)
    resume: Any = False
    #: name of the experiment preset (set by experiment=...)
    experiment_name: str = "default"

    def __post_init__(self) -> None:
        if self.resume not in (True, False, "auto"):
            raise ConfigError(f"resume={self.resume!r} is invalid: choose false, true or auto")


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="schema/method", name="base", node=MethodConfig)  # a new method's YAML extends this
    for name, node in [
        ("dpswd", DPSWDConfig),
        ("swd", SWDConfig),
        ("dpsinkhorn", DPSinkhornConfig),
        ("sinkhorn", SinkhornConfig),
        ("entropic_ldp", EntropicLDPConfig),
        ("dpsgd", DPSGDConfig),
    ]:
        cs.store(group="schema/method", name=name, node=node)
    cs.store(group="schema/dataset", name="dataset", node=DatasetConfig)
    cs.store(group="schema/privacy", name="privacy", node=PrivacyConfig)
    cs.store(group="schema/task", name="accounting", node=AccountingTaskConfig)
    cs.store(group="schema/task", name="generation", node=GenerationTaskConfig)
    cs.store(group="schema/task", name="classification", node=ClassificationTaskConfig)
    # domain adaptation (dpgen/tasks/domain_adaptation.py)
    cs.store(group="schema/method", name="dann", node=DANNConfig)
    cs.store(group="schema/method", name="wgan_gp", node=WGANGPConfig)
    cs.store(group="schema/method", name="dpmerf", node=DPMERFConfig)
    cs.store(group="schema/method", name="dpdann", node=DPDANNConfig)
    cs.store(group="schema/dataset", name="domain_adaptation", node=DADatasetConfig)
    cs.store(group="schema/task", name="domain_adaptation", node=DomainAdaptationTaskConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)


def _outside_method_settings(values: Any) -> MethodConfig:
    """A method YAML that extends no schema: its class (``target``) declares its settings as a dataclass
    ``Settings`` subclassing :class:`MethodConfig`, which validates them here (unknown keys named)."""
    if not isinstance(values, dict) or not values.get("target"):
        raise ConfigError("method: a method YAML extends its schema (defaults: [/schema/method/base@_here_]) or "
                          "names its class in target: with the class's Settings dataclass (docs/EXTENDING.md)")
    from dpgen.utils.objects import import_object

    cls = import_object(values["target"], "method.target")
    schema = getattr(cls, "Settings", MethodConfig)
    if not (isinstance(schema, type) and issubclass(schema, MethodConfig)):
        raise ConfigError(f"method.target={values['target']}: {cls.__qualname__}.Settings must be a dataclass "
                          "subclassing dpgen.config.MethodConfig")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"method (target {values['target']}, settings {schema.__qualname__}): {e}") from None


def validate(cfg: DictConfig) -> Any:
    """Instantiate the dataclasses (running every ``__post_init__`` check) and return the object.

    Raises :class:`ConfigError` naming the bad key.
    """
    try:
        obj = OmegaConf.to_object(cfg)
        if isinstance(obj, Config) and not isinstance(obj.method, MethodConfig):
            obj.method = _outside_method_settings(obj.method)
        return obj
    except ConfigError:
        raise
    except PrivacyParameterError as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # omegaconf's own validation errors (wrong type, missing value)
        raise ConfigError(f"invalid config: {e}") from None


#: the Hydra config tree (``dpgen/conf``: a link to the checkout's ``conf/``, a copy in an installed package)
CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def compose_config(overrides=(), config_name: str = "config") -> Any:
    """The validated config ``python run.py <overrides>`` would run, for code that calls dpgen
    without the command line (table drivers, the privacy audit, notebooks)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return validate(compose(config_name=config_name, overrides=list(overrides)))


def compose_preset(preset: str, overrides=()) -> Any:
    """The validated config of ``experiment=<preset>`` plus ``overrides`` (what a table driver runs)."""
    return compose_config([f"experiment={preset}", *overrides])


#: the scales every table driver may offer (``make <table> SCALE=...``), one file each in conf/scale/
TABLE_SCALES = ("smoke", "cpu", "paper")


def table_scales(table: str) -> Dict[str, Dict[str, Any]]:
    """``{scale: settings}`` of the table driver ``table`` (``dpgen/tables/<table>.py``), read from
    ``conf/scale/<scale>.yaml``: the overrides it puts on top of its presets and its own sizes. A
    scale whose file has no entry for the table is not offered by it."""
    import yaml

    out: Dict[str, Dict[str, Any]] = {}
    for scale in TABLE_SCALES:
        entries = yaml.safe_load((CONFIG_DIR / "scale" / f"{scale}.yaml").read_text()) or {}
        if table in entries:
            out[scale] = entries[table]
    if not out:
        raise ValueError(f"no scale in {CONFIG_DIR / 'scale'} has an entry for table {table!r}: add one to "
                         f"{', '.join(s + '.yaml' for s in TABLE_SCALES)}")
    return out
