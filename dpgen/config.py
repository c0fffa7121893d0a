"""Structured configs (dataclasses) validating the Hydra config tree in ``conf/``.

Each config group has a schema registered in Hydra's ConfigStore (``base_<group>_<name>``) that
the YAML files of ``conf/<group>/`` extend through their defaults list. Hydra composes in struct
mode, so an unknown key stops the run with a message naming the key; an unknown choice stops it
with the list of available ones; and :func:`validate` (called by ``run.py`` before anything runs)
instantiates the dataclasses, whose ``__post_init__`` checks each value and names a bad one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

from dpgen.privacy.validation import (
    PrivacyParameterError,
    _is_number,
    check_delta,
    check_epsilon,
    check_positive,
    check_positive_int,
)
# method settings live beside their classes (dpgen/methods/<name>.py, ``Settings``); their base is here too
from dpgen.utils.settings import ConfigError, MethodConfig  # noqa: F401  (re-exported)
from dpgen.utils.settings import choice as _choice



# ------------------------------------------------------------------------------------------------
# method/
# ------------------------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------------
# dataset/
# ------------------------------------------------------------------------------------------------


@dataclass
class DatasetConfig:
    #: a domain-adaptation pair (:class:`DADatasetConfig`: a public source and a private target), the data of
    #: task=domain_adaptation; a fact of the schema, not a key a YAML sets
    domain_pair: ClassVar[bool] = False

    name: str = MISSING
    #: number of private training records N
    n_train: int = MISSING
    n_test: int = 0
    #: dimension of one record (flattened), its shape and the class count: for dpgen's own datasets read from
    #: their loader's entry (dpgen.data.DATASETS, one place; a value given here must agree with it); a dataset
    #: with its own ``loader`` gives them here (under a dpgen dataset's name, a shape it leaves out is that one's;
    #: its class count comes from its loader or from here)
    dim: int = 0
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
    #: your own data: the folder of class sub-folders (dataset=folder) or the .npz file (dataset=npz)
    path: Optional[str] = None
    #: set by dpgen when dataset.n_train=0 made it count the records at ``path`` (the report says so)
    n_train_counted: bool = False
    #: the fraction of the private training records held out, by a public hash of each record, as a validation split
    #: for a selection mechanism under its own accounting (dpgen.data.holdout; 0: none). The run trains on the rest
    #: and keeps q = B / n_train: each remaining record is sampled at the rate the ledger charges
    validation: float = 0.0

    def __post_init__(self) -> None:
        self.fill_facts()
        check_positive_int(self.n_train, "dataset.n_train")
        check_positive_int(self.dim, "dataset.dim")
        from dpgen.data.holdout import check_fraction

        try:
            self.validation = check_fraction(self.validation)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.warn_declared_size()

    def warn_declared_size(self) -> None:
        """A warning (never a refusal: the run's guarantee does not depend on it) when ``n_train`` differs from
        the number of training records a dpgen dataset ships with, a public fact (MNIST: 60,000). Compared here,
        when the config is read, never with the loaded set: a check against the private data would itself tell
        a set from the same set plus one record."""
        name, options = self._facts_of()
        from dpgen.data import DATASETS

        spec = DATASETS.get(name)
        if (spec is None or spec.n_train is None or self.loader is not None or self._private_split() != "train"
                or any(k in spec.count_options for k in (options or {}))):
            return
        if int(self.n_train) != int(spec.n_train):
            import sys

            print(f"[dpgen] WARNING: dataset.n_train={self.n_train}, but {name}'s training split ships with "
                  f"{spec.n_train:,} records. The run takes the declared n as public (q = B / n, the epochs, the "
                  f"noise): set dataset.n_train={spec.n_train} unless your files hold another number of records.",
                  file=sys.stderr)

    def _facts_of(self):
        """(the dpgen dataset whose loader gives the records, its options)."""
        return self.name, {**dict(self.options or {}), **({"path": self.path} if self.path else {})}

    def _private_split(self) -> str:
        """The split the private records are read from."""
        return "train"

    def fill_facts(self) -> None:
        """shape, num_classes and dim of a dpgen dataset from its loader's entry in dpgen.data.DATASETS."""
        name, options = self._facts_of()
        from dpgen.data import DATASETS

        spec = DATASETS.get(name)
        if spec is None:
            return
        shape = [int(s) for s in spec.shape_for(dict(options or {}))]
        dim = 1
        for s in shape:
            dim *= s
        if spec.count_fn is not None and not self.path and self.loader is None:
            raise ConfigError(f"dataset={name} reads your own data: give dataset.path=<"
                              f"{'folder of class sub-folders' if name == 'folder' else 'file.npz'}> "
                              "(README \"Your own data\")")
        # the fields of this schema the loader's entry names (an npz's num_classes), those that are set
        declared = {k: getattr(self, k) for k in spec.declared_options if getattr(self, k, None)}
        classes = spec.classes_for({**declared, **dict(options or {})})
        if classes is None and not self.num_classes and self.loader is None:
            raise ConfigError(f"dataset={name} needs dataset.num_classes=K, the number of classes: a public fact you "
                              "declare (it is never read from the private labels)")
        if spec.count_fn is not None and self.n_train == 0 and self.path:  # your own data, counted once
            # counted here, said by the run once its data and method are set up (dpgen.train.run): a run refused
            # before then prints no count
            self.n_train = int(spec.count_fn({**declared, **dict(options or {})}))
            self.n_train_counted = True
        for key, value in (("shape", shape), ("num_classes", classes), ("dim", dim)):
            if key == "num_classes" and (self.loader is not None or value is None):
                continue  # a loader of one's own gives its class count (or dataset.num_classes does)
            given = getattr(self, key)  # shape, num_classes or dim of this schema, filled in place below
            if given in (None, 0) or (key == "shape" and len(given) == 0):
                setattr(self, key, value)
            elif self.loader is None and (list(given) if key == "shape" else given) != value:
                raise ConfigError(f"dataset.{key}={list(given) if key == 'shape' else given} disagrees with {name}'s "
                                  f"loader, whose records have {key} {value} (with options {dict(options or {})}): "
                                  f"leave dataset.{key} out (it is read from the loader), or give a dataset.loader "
                                  "of your own.")


@dataclass
class DADatasetConfig(DatasetConfig):
    """A domain-adaptation problem: a public labelled source and a private unlabelled target.

    ``n_train`` is N of the private target (Table 4), ``dim`` the input dimension of one record.
    """

    domain_pair: ClassVar[bool] = True

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

    def _facts_of(self):
        return self.target, self.target_options

    def _private_split(self) -> str:
        return self.target_split

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_source is not None:
            check_positive_int(self.n_source, "dataset.n_source")


# ------------------------------------------------------------------------------------------------
# privacy/, task/, logger/, trainer
# ------------------------------------------------------------------------------------------------

def delta_n_ln_n(n: int) -> float:
    """1 / (n ln n): the delta DPImageBench sets for n training records (their MNIST: 55,000 -> 1.67e-6; dpgen's,
    60,000 -> 1.52e-6), below 1 / n as a delta must be. In a config: ``privacy.delta=${dpgen.delta_n_ln_n:
    ${dataset.n_train}}`` (the declared n; the run's delta is then a number like any other)."""
    n = check_positive_int(n, "dataset.n_train", "1 / (n ln n) needs the declared number of records")
    if n < 2:
        raise ConfigError(f"dataset.n_train={n}: 1 / (n ln n) needs n >= 2 (ln 1 = 0); give privacy.delta a number")
    return 1.0 / (n * math.log(n))


@dataclass
class SelectionCostConfig:
    """What choosing a preset's settings cost on these same records (``privacy.selection_cost``), composed with the
    run's own ledger in its privacy report (``epsilon_with_settings_choice``: dpgen.privacy.selection.carried_epsilon).
    A setting drawn on a held-out part is a function of the selection run's generator too, so a run that trains on
    every record with it composes sequentially with that run and with the selection."""

    #: each earlier run whose released output chose a setting of this preset: [noise multiplier, Poisson sample
    #: rate, steps]
    trainings: List[Any] = field(default_factory=list)
    #: the pure-DP selections on these records (the exponential mechanism's epsilon), summed
    pure_epsilon: float = 0.0


@dataclass
class PrivacyConfig:
    epsilon: float = 10.0
    #: a number, or ${dpgen.delta_n_ln_n:${dataset.n_train}} for DPImageBench's 1 / (N ln N) (:func:`delta_n_ln_n`)
    delta: float = 1e-5
    #: the ledger's accountant: auto (default: the tightest valid accountant for the method's sampling,
    #: dpgen.privacy.accountants.AUTO_ACCOUNTANT: dp-accounting's PLD for Poisson sampling, autodp's RDP for
    #: sampling without replacement, which dp-accounting's PLD does not analyse); rdp (autodp, both samplings);
    #: opacus_rdp, opacus_prv, moments and pld need Poisson sampling. The ledger of a Poisson method (DP-Sinkhorn
    #: and its variants, DP-SGD, DP-DANN) calibrates with it; autodp's RDP stays its cross-check. Presets whose
    #: results were measured under another accountant pin it (conf/experiment/*.yaml)
    accountant: str = "auto"
    #: independent accountants reported beside the main one
    cross_check: List[str] = field(default_factory=lambda: ["moments", "opacus_rdp"])
    #: relative precision of the noise calibration
    rel_tol: float = 1e-3
    #: draw the mechanism's randomness (batch sampling, directions, noise) from OS entropy, never from
    #: the public seed (false: reproducible from `seed`, private only while the seed stays secret)
    secret_randomness: bool = True
    #: draw it from the operating system's cryptographically secure generator (os.urandom: Linux getrandom,
    #: ChaCha20) instead of torch's generators, each Gaussian a sum of 4 draws / 2, which resists the floating-point
    #: attack (dpgen.utils.noise; opacus' secure_mode). Slower (make bench, part secure_noise); secret by
    #: construction, so it needs secret_randomness=true, and it is never checkpointed
    secure_rng: bool = False
    #: how this run's settings were chosen, when that looked at the private data or its test split (a
    #: conf/tuned/ preset says so): the privacy report lists it under not_covered. null: not tuned on them
    selected_on_private: Optional[str] = None
    #: the data set whose records made that choice (a dataset.name, e.g. mnist). A run on other records (the preset
    #: on USPS, or on your own data) states it under settings_chosen_on_other_records and carries nothing: the
    #: choice read none of its records. null: the choice counts for every data set the preset runs on
    selected_on: Optional[str] = None
    #: what that choice cost, where a DP mechanism made it (the report composes it with the run's ledger)
    selection_cost: SelectionCostConfig = field(default_factory=SelectionCostConfig)

    def __post_init__(self) -> None:
        try:
            check_epsilon(self.epsilon, "privacy.epsilon")
            check_delta(self.delta, "privacy.delta")
        except PrivacyParameterError as e:
            raise ConfigError(str(e)) from None
        # the accountant registry's ledger accountants (imported here: scipy, about 1 s, which a private run
        # imports anyway); privacy.accountant may also be auto (the tightest valid one for the method's sampling)
        from dpgen.privacy.accountants import ledger_accountant_names

        names = ledger_accountant_names()
        _choice(self.accountant, "privacy.accountant", ("auto", *names))
        for name in self.cross_check:
            _choice(name, "privacy.cross_check[]", names)
        check_positive(self.rel_tol, "privacy.rel_tol")
        if self.secure_rng and not self.secret_randomness:
            raise ConfigError("privacy.secure_rng=true with privacy.secret_randomness=false: the OS generator cannot "
                              "be seeded, so the run cannot be reproducible from `seed`; set "
                              "privacy.secret_randomness=true (secure noise) or privacy.secure_rng=false "
                              "(reproducible noise)")
        cost = self.selection_cost
        if self.selected_on is not None and not self.selected_on_private:
            raise ConfigError(f"privacy.selected_on={self.selected_on!r} is set but privacy.selected_on_private is not: "
                              "say in words how the settings were chosen on that data set's records")
        if cost.trainings or cost.pure_epsilon:
            if not self.selected_on_private:
                raise ConfigError("privacy.selection_cost is set but privacy.selected_on_private is not: say in words "
                                  "how the settings were chosen (privacy.selected_on_private=\"...\")")
            if not _is_number(cost.pure_epsilon) or cost.pure_epsilon < 0:
                raise ConfigError(f"privacy.selection_cost.pure_epsilon={cost.pure_epsilon!r}: write the selections' "
                                  "epsilon, a number >= 0")
            for t in cost.trainings:
                t = list(t)
                if (len(t) != 3 or not all(_is_number(v) for v in t) or t[0] <= 0 or not 0 < t[1] <= 1 or t[2] < 0
                        or t[2] != int(t[2])):
                    raise ConfigError(f"privacy.selection_cost.trainings has {t!r}: write each earlier run as "
                                      "[noise multiplier > 0, sample rate in (0, 1], steps (a whole number >= 0)]")


@dataclass
class TaskConfig:
    name: str = MISSING


@dataclass
class AccountingTaskConfig(TaskConfig):
    name: str = "accounting"
    #: also report epsilon under the cross-check accountants (can be slow for PRV)
    cross_check: bool = True
    # The training tasks' settings (generation, classification, domain adaptation, evaluate), accepted so that
    # every training preset is accountable as it stands: ``task=accounting experiment=<preset>`` (the preset sets
    # e.g. task.n_synthetic). The accounting reads none of them except task.k, domain adaptation's projections per
    # step (null: method.k), which changes DP-SWD's mechanism. tests/privacy/test_pld_default.py checks that this
    # list covers every field of those schemas.
    n_synthetic: Optional[int] = None
    eval_models: Optional[List[str]] = None
    eval_max_epochs: Optional[int] = None
    logreg_solver: Optional[str] = None
    fid: Any = None
    fid_samples: Optional[int] = None
    fidelity: Optional[str] = None
    fid_real: Optional[int] = None
    synthetic: Optional[str] = None
    run: Optional[str] = None
    generations: Optional[int] = None
    sharpen: Optional[float] = None
    sharpen_at: Optional[float] = None
    restorer: Optional[str] = None
    model: Optional[str] = None
    norm: Optional[str] = None
    eval_batch_size: Optional[int] = None
    adapt_weight: Optional[float] = None
    k: Optional[int] = None
    eval_every: Optional[int] = None
    protocol: Optional[str] = None
    dpimagebench: "DPImageBenchConfig" = field(default_factory=lambda: DPImageBenchConfig())

    def __post_init__(self) -> None:
        if self.k is not None:
            check_positive_int(self.k, "task.k", "the number of random projections")


#: task.logreg_solver's choices (dpgen/eval/downstream.py::fit_logreg)
LOGREG_SOLVERS = ("fused", "sklearn")
#: task.fidelity: dpgen.tasks.generation.fid_counts says what each means
FIDELITY_PROTOCOLS = ("auto", "quick", "full")
#: images a side for FID and KID at least (KID's 10-group jackknife needs 12)
FIDELITY_MIN_IMAGES = 12
#: task.protocol: papers (the papers' evaluation: FID vs the test split, task.eval_models) or dpimagebench (that, and
#: DPImageBench's beside it: dpgen/eval/dpimagebench.py)
TASK_PROTOCOLS = ("papers", "dpimagebench")


@dataclass
class DPImageBenchConfig:
    """``task.dpimagebench``: the counts of DPImageBench's protocol (task.protocol=dpimagebench), theirs by default;
    smaller ones run on a CPU, and the run's summary says which are below theirs."""

    #: synthetic images for every metric of the protocol (theirs: 60,000; 1 / 12 of them validate the ResNet)
    n_synthetic: int = 60000
    #: private training records FID and precision / recall compare with (null: all of them, theirs; fewer: a seeded
    #: subset)
    fid_real: Optional[int] = None
    #: the ResNet's training epochs (theirs: 50)
    epochs: int = 50
    #: the ResNet's depth, 6 m + 2 (theirs: 110)
    depth: int = 110

    def __post_init__(self) -> None:
        for key in ("n_synthetic", "epochs", "depth"):  # getattr: one check over the fields it names
            check_positive_int(getattr(self, key), f"task.dpimagebench.{key}")
        for key in ("n_synthetic", "fid_real"):
            v = getattr(self, key)  # as above
            if v is not None and int(v) < FIDELITY_MIN_IMAGES:
                raise ConfigError(f"task.dpimagebench.{key}={v}: FID and precision / recall need at least "
                                  f"{FIDELITY_MIN_IMAGES} images a side; use task.dpimagebench.{key}>="
                                  f"{FIDELITY_MIN_IMAGES} (theirs: {'60000' if key == 'n_synthetic' else 'null, all'})")
        if (self.depth - 2) % 6 or self.depth < 8:
            raise ConfigError(f"task.dpimagebench.depth={self.depth}: the ResNet's depth is 6 m + 2 with m >= 1 "
                              "(8, 14, 20, ..., 110; theirs: 110)")


@dataclass
class GenerationTaskConfig(TaskConfig):
    """Train a generator, then evaluate it on the real test split."""

    name: str = "generation"
    #: synthetic samples for the downstream classifiers (null: min(60,000, 10 x N); the papers use 60,000)
    n_synthetic: Optional[int] = None
    #: downstream classifiers: logreg, mlp, cnn (the papers'), resnet (DPImageBench's ResNet-110 and its own recipe,
    #: for task.eval_max_epochs epochs; dpgen/eval/dpimagebench.py)
    eval_models: List[str] = field(default_factory=lambda: ["logreg", "mlp"])
    eval_max_epochs: int = 30
    #: LogReg's fit: fused (scikit-learn's objective and L-BFGS call, the loss and gradient in fused float32
    #: products; dpgen/eval/logreg.py) or sklearn (scikit-learn's own fit); the same model to L-BFGS's tolerance
    logreg_solver: str = "fused"
    #: FID with precision / recall / density / coverage of `fid_samples` generated images vs the whole test split
    #: (pytorch-fid's Inception weights from $DPGEN_FID_WEIGHTS or the torch hub cache: `make fid-weights`):
    #: auto (computed when the weights are installed, else n/a), true (a warning when they are not), false
    fid: Any = "auto"
    #: the fidelity protocol (dpgen.tasks.generation.fid_counts; FID, KID and precision / recall on one feature
    #: pass): quick (KID headline: 300 generated vs at most 1,000 real test images), full (FID headline:
    #: min(10,000, 5 x the test split) generated vs the whole test split), auto (full on a GPU or with
    #: fid_samples set, else quick)
    fidelity: str = "auto"
    #: generated images for FID and KID (null: the protocol's count; the DP-Sinkhorn paper: 60,000)
    fid_samples: Optional[int] = None
    #: real test images they are compared with (null: the protocol's; a seeded subset when fewer than the split)
    fid_real: Optional[int] = None
    #: the evaluation protocol: papers (the keys above only) or dpimagebench (the papers' evaluation, then
    #: DPImageBench's beside it in metrics.json's ``dpimagebench``: FID and precision / recall against the PRIVATE
    #: training split, listed under the privacy report's not_covered, and their ResNet with the epoch kept on
    #: synthetic validation; dpgen/eval/dpimagebench.py, docs/FIDELITY.md)
    protocol: str = "papers"
    #: the dpimagebench protocol's counts (:class:`DPImageBenchConfig`; theirs by default)
    dpimagebench: DPImageBenchConfig = field(default_factory=DPImageBenchConfig)

    def __post_init__(self) -> None:
        _choice(self.protocol, "task.protocol", TASK_PROTOCOLS)
        if self.n_synthetic is not None:
            check_positive_int(self.n_synthetic, "task.n_synthetic")
        for m in self.eval_models:
            _choice(m, "task.eval_models[]", ("logreg", "mlp", "cnn", "resnet"))
        _choice(self.logreg_solver, "task.logreg_solver", LOGREG_SOLVERS)
        if self.fid not in (True, False, "auto"):
            raise ValueError(f"task.fid={self.fid!r}: use true, false or auto (auto: FID when the Inception weights "
                             "are installed)")
        _choice(self.fidelity, "task.fidelity", FIDELITY_PROTOCOLS)
        for key, v in (("fid_samples", self.fid_samples), ("fid_real", self.fid_real)):
            if v is not None:
                check_positive_int(v, f"task.{key}")
                if v < FIDELITY_MIN_IMAGES:
                    raise ValueError(f"task.{key}={v}: FID and KID need at least {FIDELITY_MIN_IMAGES} images a side "
                                     f"(KID's jackknife); use task.{key}>={FIDELITY_MIN_IMAGES} or task.fid=false")


def curve_problem(slope, at) -> str:
    """What is wrong with a contrast curve's slope and centre (model.sharpen / sharpen_at), "" when nothing: a
    finite slope >= 0 (0: off) and a centre strictly inside (0, 1)."""
    if slope is not None and not (math.isfinite(float(slope)) and float(slope) >= 0):
        return "the slope must be finite and >= 0 (null or 0: no curve)"
    if not 0.0 < float(at) < 1.0:
        return "the centre must lie strictly between 0 and 1 (pixels are in [0, 1]; 0.5 is the default)"
    return ""


@dataclass
class EvaluateTaskConfig(TaskConfig):
    """The papers' downstream protocol on a released synthetic set (``dpgen sample`` writes one):
    classifiers trained on ``synthetic``, tested on ``dataset``'s real test split (dpgen/tasks/evaluate.py)."""

    name: str = "evaluate"
    #: the released set: an .npz with x (samples) and y (labels), e.g. <run>/release/synthetic.npz
    synthetic: Optional[str] = None
    #: or a finished generation run: ``generations`` synthetic sets of its generator, evaluated by its own protocol
    run: Optional[str] = None
    generations: int = 1
    #: null: the run's own classifiers (``task.run``) or [logreg, mlp] (``task.synthetic``)
    eval_models: Optional[List[str]] = None
    #: ``task.run`` only: another contrast curve (model.sharpen's slope; 0: none) in place of the run's own; null:
    #: the run's own (a task setting: the composed ``model`` group is the default dataset's, not the run's)
    sharpen: Optional[float] = None
    sharpen_at: float = 0.5
    eval_max_epochs: int = 30
    #: LogReg's fit, as ``task=generation``'s
    logreg_solver: str = "fused"
    #: ``task.run`` only: a restorer learnt on a PUBLIC set (dpgen.models.restorer; ``make restorer``) through which the
    #: generator's band samples pass in place of its curve: results "with public data", as ``dpgen sample restorer=``
    restorer: Optional[str] = None
    #: ``task.run`` only: the fidelity pass's generated images (the full protocol, against the whole test split), in
    #: place of the run's own counts; null: the run's own
    fid_samples: Optional[int] = None
    #: ``task.run`` only: papers, or dpimagebench (DPImageBench's protocol beside the papers', with the counts of
    #: ``dpimagebench``; it reads the private training split: not covered by the weights' guarantee); null: the run's
    protocol: Optional[str] = None
    dpimagebench: DPImageBenchConfig = field(default_factory=lambda: DPImageBenchConfig())

    def __post_init__(self) -> None:
        if self.synthetic is not None:
            for key in ("restorer", "fid_samples", "protocol"):  # getattr: one check over the fields it names
                if getattr(self, key) is not None:
                    raise ConfigError(f"task.{key}={getattr(self, key)} applies to task.run=<run folder> (a "
                                      "generator to draw from), not to a released set (task.synthetic)")
        if self.restorer is not None and self.sharpen is not None:
            raise ConfigError(f"task.restorer={self.restorer} and task.sharpen={self.sharpen}: a restorer replaces the "
                              "contrast curve; give one of the two")
        if self.fid_samples is not None and int(self.fid_samples) < FIDELITY_MIN_IMAGES:
            raise ConfigError(f"task.fid_samples={self.fid_samples}: FID needs at least {FIDELITY_MIN_IMAGES} images")
        if self.protocol is not None:
            _choice(self.protocol, "task.protocol", TASK_PROTOCOLS)
        if (self.synthetic is None) == (self.run is None):
            raise ConfigError("task=evaluate evaluates a released set (task.synthetic=<file.npz>) or a finished "
                              "generation run's generator (task.run=<folder> task.generations=<G>): give one of the two")
        check_positive_int(self.generations, "task.generations")
        if self.sharpen is not None and curve_problem(self.sharpen, self.sharpen_at):
            raise ConfigError(f"task.sharpen={self.sharpen} task.sharpen_at={self.sharpen_at}: "
                              f"{curve_problem(self.sharpen, self.sharpen_at)}")
        if self.eval_models is not None and not list(self.eval_models):
            raise ConfigError("task.eval_models=[]: name at least one of logreg, mlp, cnn, or leave it null (the "
                              "run's own classifiers, or [logreg, mlp] for task.synthetic)")
        for m in self.eval_models or ():
            _choice(m, "task.eval_models[]", ("logreg", "mlp", "cnn"))
        _choice(self.logreg_solver, "task.logreg_solver", LOGREG_SOLVERS)
        check_positive_int(self.eval_max_epochs, "task.eval_max_epochs")


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
    #: (the method's own DA settings are method.target_grad, method.sliced_scale for dpswd/swd and
    #: method.grl_schedule for dann/dpdann; k stays here: Table 4 gives it per problem, for every method)
    #: evaluate the target accuracy every this many steps (null: only at the end; never used for selection)
    eval_every: Optional[int] = None

    def __post_init__(self) -> None:
        check_positive(self.adapt_weight, "task.adapt_weight")
        if self.k is not None:
            check_positive_int(self.k, "task.k", "the number of random projections")
        if self.eval_every is not None:
            check_positive_int(self.eval_every, "task.eval_every")


@dataclass
class ModelConfig:
    #: auto (from the data shape: merf_conv for 28x28, dcgan64 for 64x64, else mlp), mlp, merf_conv, dcgan64,
    #: mlp256_uniform, fc500, dcgan28, dcgan, biggan32, dct (an MLP emitting low-frequency DCT coefficients,
    #: fixed inverse DCT after them: DP-Sinkhorn's hook then sits on the coefficients)
    generator: str = "auto"
    code_dim: int = 10
    #: generator=dct, or dct_project=true: k, the k x k lowest-frequency DCT coefficients per channel (0: by the
    #: image's size, min(10, H, W): the own-data recipe's choice)
    dct_size: int = 10
    #: any other image generator (e.g. dcgan): project its output onto the dct_size x dct_size lowest DCT
    #: frequencies, decoded as dct decodes; DP-Sinkhorn's hook and per-record gradient then sit on the coefficients
    dct_project: bool = False
    #: generator=dct, or dct_project=true: a (any finite number), the fixed decode weights the band's coefficient
    #: of frequency (u, v) by (1 + sqrt(u^2 + v^2))^(-a) (dpgen.models.generators.dct_weights): with a > 0
    #: DP-Sinkhorn's per-record gradient spends its clipped norm mostly on the low frequencies (a < 0: on the
    #: high ones), and the noise reaches frequency (u, v) scaled by the same weight. 0: no taper (every measured
    #: row before 2026-12-08). The mechanism does not change (the decode stays fixed and parameter-free)
    dct_taper: float = 0.0
    #: merf_conv's two x2 upsamplings: nearest (dpgen's default, every measured Table 2 row) or bilinear
    #: (corners aligned: DP-MERF's own generator, which DP-SWD's Table 3 says it reused)
    upsample: str = "nearest"
    #: the generator's initial weights: torch (PyTorch's layer defaults: every measured row before 2026-12-02) or
    #: dcgan (Radford et al. 2016: convolution and linear weights from N(0, 0.02), biases 0, batch-norm gains
    #: from N(1, 0.02)). With torch's default, dcgan's last transposed convolution starts with weights up to
    #: 1/3 (PyTorch takes its fan-in from the one output channel): pixels saturate the tanh within 50 steps
    #: and stay at 1 (experiments/fidelity/2026-12-02_dcgan_init_dot_grid.md)
    init: str = "torch"
    #: the generator's memory layout: auto (channels-last on a CPU for the generators that offer it, dcgan:
    #: about 10 % off a DP-Sinkhorn paper-recipe step on 2 cores; contiguous on a GPU), channels_last, contiguous.
    #: The same function either way: only the speed differs
    memory_format: str = "auto"
    #: a contrast curve on the released samples (dpgen.models.generators.sharpen): a logistic of this slope
    #: centred at sharpen_at, 0 and 1 kept. null: off. Post-processing of the generator's output: training never
    #: sees it, every evaluation and release of the run does. In task=evaluate task.run=<run>: null keeps the
    #: run's own setting, a number replaces it (0: off)
    sharpen: Optional[float] = None
    sharpen_at: float = 0.5

    def __post_init__(self) -> None:
        from dpgen.models.generators import GENERATORS

        if curve_problem(self.sharpen, 0.5):
            raise ValueError(f"model.sharpen={self.sharpen}: {curve_problem(self.sharpen, 0.5)} (the measured picks "
                             "are in docs/SETTINGS.md)")
        if curve_problem(None, self.sharpen_at):
            raise ValueError(f"model.sharpen_at={self.sharpen_at}: {curve_problem(None, self.sharpen_at)}")

        _choice(self.generator, "model.generator", ("auto", *GENERATORS))
        check_positive_int(self.code_dim, "model.code_dim")
        if self.dct_size != 0:  # 0: min(10, H, W), set by the images' size
            check_positive_int(self.dct_size, "model.dct_size")
        _choice(self.upsample, "model.upsample", ("nearest", "bilinear"))
        _choice(self.init, "model.init", ("torch", "dcgan"))
        _choice(self.memory_format, "model.memory_format", ("auto", "channels_last", "contiguous"))


@dataclass
class LoggerConfig:
    name: str = "none"
    #: wandb: offline by default, so no account or network is needed
    mode: str = "offline"
    project: str = "dpgen"

    def __post_init__(self) -> None:
        from dpgen.train.loggers import LOGGERS

        _choice(self.name, "logger.name", tuple(LOGGERS))
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
    #: pad each Poisson batch to one capacity (mean + 10 std + 30 of its declared size) with a mask of its
    #: records: the same loss and gradient (padding weighs 0), in the fixed shapes a CUDA graph of the step needs
    #: (dpgen.data.private.PrivateData.static_batch; dpsinkhorn with method.clip_mode=batch)
    static_shapes: bool = False
    #: capture the whole step (method, optimizer, EMA) in a CUDA graph and replay it (dpgen/train/cuda_graph.py):
    #: needs a CUDA device, static_shapes=true, adam, privacy.secure_rng=false. Not yet measured on a GPU.
    cuda_graph: bool = False

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


#: what :func:`register_configs` stored last (the ConfigStore and the method settings it held)
_REGISTERED: Any = None


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore and dpgen's resolvers (idempotent)."""
    from hydra.core.config_store import ConfigStore

    from dpgen.slurm import basename

    # ${dpgen.basename:${hydra.sweep.dir}}: SLURM job names after the sweep's folder
    OmegaConf.register_new_resolver("dpgen.basename", basename, replace=True)
    # privacy.delta=${dpgen.delta_n_ln_n:${dataset.n_train}}: DPImageBench's delta for the declared n
    OmegaConf.register_new_resolver("dpgen.delta_n_ln_n", lambda n: delta_n_ln_n(int(n)), replace=True)

    cs = ConfigStore.instance()
    from dpgen.methods.registry import method_settings

    settings = method_settings()
    # storing a schema converts its dataclass (about 80 ms for all of them): only when something changed
    # (a method registered since, or a ConfigStore cleared by someone else)
    key = (id(cs), tuple((name, id(node)) for name, node in settings.items()))
    global _REGISTERED
    if _REGISTERED == key and "base_config.yaml" in cs.repo:
        return
    cs.store(name="base_config", node=Config)
    cs.store(group="schema/method", name="base", node=MethodConfig)  # a new method's YAML extends this
    for name, node in settings.items():  # each method's Settings, defined beside its class
        cs.store(group="schema/method", name=name, node=node)
    cs.store(group="schema/dataset", name="dataset", node=DatasetConfig)
    cs.store(group="schema/privacy", name="privacy", node=PrivacyConfig)
    cs.store(group="schema/task", name="accounting", node=AccountingTaskConfig)
    cs.store(group="schema/task", name="generation", node=GenerationTaskConfig)
    cs.store(group="schema/task", name="classification", node=ClassificationTaskConfig)
    cs.store(group="schema/task", name="evaluate", node=EvaluateTaskConfig)
    cs.store(group="schema/dataset", name="domain_adaptation", node=DADatasetConfig)
    cs.store(group="schema/task", name="domain_adaptation", node=DomainAdaptationTaskConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)
    _REGISTERED = key


def _outside_method_settings(values: Any) -> MethodConfig:
    """A method YAML that extends no schema: its class (``target``) declares its settings as a dataclass
    ``Settings`` subclassing :class:`MethodConfig`, which validates them here (unknown keys named)."""
    if not isinstance(values, dict) or not values.get("target"):
        raise ConfigError("method: a method YAML extends its schema (defaults: [/schema/method/base@_here_]) or "
                          "names its class in target: with the class's Settings dataclass (docs/EXTENDING.md)")
    from dpgen.utils.objects import import_object

    cls = import_object(values["target"], "method.target")
    # a class outside dpgen, read before anything checks it is a Method (which declares Settings = None)
    schema = getattr(cls, "Settings", None) or MethodConfig
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
    from dpgen.utils.suggest import undeclared_key_error

    if isinstance(cfg, DictConfig):
        why = undeclared_key_error(cfg)  # `+trainer.stepz=1`: a key no schema declares, added with +
        if why:
            raise ConfigError(why)
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


def compose_raw(overrides=(), config_name: str = "config") -> DictConfig:
    """The composed config before validation (a DictConfig)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


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

