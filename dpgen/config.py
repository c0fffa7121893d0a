"""Structured configs (dataclasses) validating the Hydra config tree in ``conf/``.

Each config group has a schema registered in Hydra's ConfigStore (``base_<group>_<name>``) that
the YAML files of ``conf/<group>/`` extend through their defaults list. Hydra composes in struct
mode, so an unknown key stops the run with a message naming the key; an unknown choice stops it
with the list of available ones; and :func:`validate` (called by ``run.py`` before anything runs)
instantiates the dataclasses, whose ``__post_init__`` checks each value and names a bad one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

BOUNDS = ("bernstein", "clt", "chernoff")
CONVENTIONS = ("paper_text", "authors_code")
SAMPLINGS = ("without_replacement", "poisson")


@dataclass
class MethodConfig:
    """A method: its loss, its privacy mechanism, and the sampling scheme its accountant uses."""

    name: str = MISSING
    private: bool = True
    #: sampling scheme of the real batches (decides the accountant's amplification)
    sampling: str = "without_replacement"

    def __post_init__(self) -> None:
        _choice(self.sampling, "method.sampling", SAMPLINGS)


@dataclass
class DPSWDConfig(MethodConfig):
    """DP-SWD (dp-swd.txt): k random unit directions, Gaussian noise on every projection."""

    name: str = "dpswd"
    k: int = 1000
    #: sensitivity bound: bernstein (Lemma 2, rigorous), clt (section 3.1, approximate),
    #: chernoff (exact Chernoff bound of the Beta sum: rigorous and tighter than Bernstein)
    bound: str = "bernstein"
    #: paper_text: Eq. 6 + Prop. 2 as written; authors_code: the published Table 4 convention
    convention: str = "paper_text"
    #: fraction of delta given to the sensitivity bound (Prop. 2 uses 1/2)
    delta_split: float = 0.5
    #: order of the sliced Wasserstein distance (1 or 2)
    order: int = 2
    #: d of the space the distributions are compared in (null: the row's dimension; smaller: a fixed
    #: contraction (subsampled randomized Hadamard), see dpgen.methods.dpswd.OrthoCompression)
    compare_dim: Optional[int] = None
    #: weight of the one-hot label appended to each compared row (0: unconditional; null: 0.5 sqrt(d),
    #: comparable to the norm of a [0, 1] image, so labels weigh as much as pixels)
    label_weight: Optional[float] = None
    #: how private rows are bounded to ||x|| <= 1/2 (Lemma 2): clip (per row) or scale (constant)
    row_bound: str = "clip"
    #: null: calibrated to privacy.(epsilon, delta) for the run's steps; a number fixes the noise
    #: (sigma = noise_multiplier * sqrt(w)) and the run stops when the budget is spent
    noise_multiplier: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "method.noise_multiplier")
        self.k = check_positive_int(self.k, "method.k", "the number of random projections")
        _choice(self.bound, "method.bound", BOUNDS)
        _choice(self.convention, "method.convention", CONVENTIONS)
        if not 0.0 < self.delta_split < 1.0:
            raise ConfigError(f"method.delta_split={self.delta_split} is invalid: it must lie in (0, 1).")
        _choice(self.order, "method.order", (1, 2))
        if self.compare_dim is not None:
            check_positive_int(self.compare_dim, "method.compare_dim")
        if self.label_weight is not None and self.label_weight < 0:
            raise ConfigError(f"method.label_weight={self.label_weight} is invalid: it must be >= 0.")
        _choice(self.row_bound, "method.row_bound", ("clip", "scale", "none"))
        if self.row_bound == "none":
            import warnings

            warnings.warn("method.row_bound=none: private rows are not bounded, so the (epsilon, delta) "
                          "guarantee does NOT hold; use it only to reproduce the paper's setting.", stacklevel=2)


@dataclass
class SWDConfig(MethodConfig):
    name: str = "swd"
    private: bool = False
    k: int = 1000
    order: int = 2
    compare_dim: Optional[int] = None
    label_weight: Optional[float] = None
    row_bound: str = "clip"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.k, "method.k", "the number of random projections")
        _choice(self.order, "method.order", (1, 2))
        _choice(self.row_bound, "method.row_bound", ("clip", "scale", "none"))


@dataclass
class DPSinkhornConfig(MethodConfig):
    """DP-Sinkhorn (dp-sinkhorn.txt): image-gradient clip C and noise 2 C sigma, Poisson batches."""

    name: str = "dpsinkhorn"
    sampling: str = "poisson"
    clip: float = 0.5
    noise_multiplier: float = 1.1
    #: entropy regularisation of the Sinkhorn divergence (0.05 MNIST, 5 CelebA)
    entropy_reg: float = 0.05
    alpha_c: float = 15.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.clip, "method.clip", "the image-gradient clipping bound C")
        check_positive(self.noise_multiplier, "method.noise_multiplier")
        check_positive(self.entropy_reg, "method.entropy_reg")


@dataclass
class SinkhornConfig(MethodConfig):
    name: str = "sinkhorn"
    private: bool = False
    sampling: str = "poisson"
    entropy_reg: float = 0.05
    alpha_c: float = 15.0


@dataclass
class EntropicLDPConfig(MethodConfig):
    """Entropic-LDP GAN: data privatised once by a local mechanism (epsilon per record)."""

    name: str = "entropic_ldp"
    mechanism: str = "gaussian"
    radius: float = 1.0
    #: diameter (2r, correct under LDP) or radius (the paper's text)
    sensitivity: str = "diameter"

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.mechanism, "method.mechanism", ("laplace", "gaussian"))
        check_positive(self.radius, "method.radius", "the ball the records are projected on")
        _choice(self.sensitivity, "method.sensitivity", ("diameter", "radius"))


@dataclass
class DPSGDConfig(MethodConfig):
    """DP-SGD classifier (WDP paper): per-sample clipping at C, noise sigma C."""

    name: str = "dpsgd"
    sampling: str = "poisson"
    clip: float = 1.0
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

    def __post_init__(self) -> None:
        check_positive_int(self.n_train, "dataset.n_train")
        check_positive_int(self.dim, "dataset.dim")


# ------------------------------------------------------------------------------------------------
# privacy/, task/, logger/, trainer
# ------------------------------------------------------------------------------------------------

ACCOUNTANT_NAMES = ("rdp", "opacus_rdp", "opacus_prv", "moments")


@dataclass
class PrivacyConfig:
    epsilon: float = 10.0
    delta: float = 1e-5
    #: main accountant (rdp: autodp; opacus_rdp, opacus_prv and moments need Poisson sampling)
    accountant: str = "rdp"
    #: independent accountants reported beside the main one
    cross_check: List[str] = field(default_factory=lambda: ["moments", "opacus_rdp"])
    #: relative precision of the noise calibration
    rel_tol: float = 1e-3
    #: draw the mechanism's randomness (batch sampling, directions, noise) from OS entropy, never from
    #: the public seed (false: reproducible from `seed`, private only while the seed stays secret)
    secret_randomness: bool = True

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
class ModelConfig:
    #: auto (from the data shape: merf_conv for 28x28, dcgan64 for 64x64, else mlp), mlp, merf_conv, dcgan64
    generator: str = "auto"
    code_dim: int = 10

    def __post_init__(self) -> None:
        _choice(self.generator, "model.generator", ("auto", "mlp", "merf_conv", "dcgan64"))
        check_positive_int(self.code_dim, "model.code_dim")


@dataclass
class LoggerConfig:
    name: str = "none"
    #: wandb: offline by default, so no account or network is needed
    mode: str = "offline"
    project: str = "dpgen"

    def __post_init__(self) -> None:
        _choice(self.name, "logger.name", ("none", "csv", "wandb"))
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

    def __post_init__(self) -> None:
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
    method: MethodConfig = MISSING
    dataset: DatasetConfig = MISSING
    task: TaskConfig = MISSING
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    seed: int = 0
    #: continue from the run folder's last checkpoint (give the folder with hydra.run.dir=...)
    resume: bool = False
    #: name of the experiment preset (set by experiment=...)
    experiment_name: str = "default"


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
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
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)


def validate(cfg: DictConfig) -> Any:
    """Instantiate the dataclasses (running every ``__post_init__`` check) and return the object.

    Raises :class:`ConfigError` naming the bad key.
    """
    try:
        return OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except PrivacyParameterError as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # omegaconf's own validation errors (wrong type, missing value)
        raise ConfigError(f"invalid config: {e}") from None
