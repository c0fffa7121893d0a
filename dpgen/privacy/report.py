"""What a run's privacy report says beyond its mechanism: the wording of every guarantee, in one place.

A method reports its mechanism (``privacy_report()``: epsilon, the accountant, the relation); :func:`run_report`
adds what the run itself decides, from plain facts (:class:`RunFacts`) and never from a configuration object (this
library imports nothing above it): how the dataset size n is treated, what the report does not cover (wall-clock
timings, a counted n, your own data's held-out test part and the shape read from its first image, the data checks
that refuse a file, a selection of settings on private data, an evaluation protocol's statistics of the training
records), the validation holdout, where the mechanism's randomness comes from, and the verdict when a ledger ended
above its budget.

:class:`PrivacyReport` is how every reader (tables, run summaries, the release datasheet, ``dpgen collect``) reads
a report back: typed, with the noise multiplier and the noise std as two facts (``sigma`` meant either before
issue 83), and a private report that lacks a fact it must state refused, never read as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

#: what no privacy report covers: the time a step takes depends on its realised (Poisson) batch
WALL_CLOCK_NOT_COVERED = ("wall-clock timings (train_seconds, loop_seconds, steps_per_second, the long-run notice, "
                          "the progress bar's rate, eval_seconds): a step's time grows with the size of its sampled "
                          "batch, so they depend slightly on the private data")

#: what a report does not cover when the record count was counted from the data rather than declared
COUNTED_N_NOT_COVERED = ("the record count n = {n}: counted from dataset.path={path} (dataset.n_train=0), not "
                         "declared, and published as public; a set with one record more or less counts another n. "
                         "Declare dataset.n_train=<n> to keep the count out of the data")

#: your own data without a test split: the part held out as the test split is public by construction
OWN_TEST_NOT_COVERED = ("the test split held out of dataset.path={path} (the records whose public hash, "
                        "dpgen.data.holdout with the test salt, falls below dataset.options.held_out): it is treated as "
                        "public, like a paper's test split: its records, its size (downstream n_test) and every "
                        "accuracy, baseline and spread measured on it leave the run, and epsilon does not cover them")

#: your own data: what is read from the files before any mechanism runs
OWN_DATA_NOT_COVERED = ("the data's format, read from dataset.path={path} before training: the image shape and "
                        "channels (a folder: its first image's size and colour mode, unless dataset.options.size fixes "
                        "the size), and the format checks that refuse a file (an unreadable image, images of several "
                        "sizes without dataset.options.size, an x that does not read as images, floats outside [0, 1]); "
                        "`python -m dpgen.data.own <path>` shows them to the data's owner outside any run")

#: task.protocol=dpimagebench: DPImageBench's fidelity statistics read the private training records
TRAIN_SPLIT_FIDELITY_NOT_COVERED = (
    "the {protocol} protocol's FID, precision and recall (metrics.json's {protocol}: fid, precision, recall): "
    "computed from the private TRAINING records (their Inception features, never written), as DPImageBench publishes "
    "them; a statistic of the private set released without noise, so epsilon does not cover them. Nothing chooses a "
    "setting or stops training on them; task.protocol=papers (or task.fid=false) does not compute them")

#: what a run trained beside a validation split says (dataset.validation)
HOLDOUT_TEXT = ("dataset.validation={f:g}: the records whose public hash (dpgen.data.holdout) falls below {f:g} are "
                "held out and never read by this run; it trains on the rest. A selection mechanism that reads only "
                "the held-out part (scripts/select_on_validation.py) composes with this run in parallel under "
                "add/remove: the pair's epsilon is the larger of the two, which its selection.json states")

RANDOMNESS = {
    "secure": "the OS's cryptographically secure generator (privacy.secure_rng): batch sampling, directions and noise "
              "are unpredictable, and no generator state exists to leak or checkpoint; each Gaussian is the sum of "
              "4 draws over 2, as opacus' secure_mode draws it (dpgen.utils.noise). Not covered: the floating-point "
              "rounding of the noisy sum itself, and entropic-LDP's local release (numpy's generator seeded from OS "
              "entropy)",
    "secret": "OS entropy: batch sampling, directions and noise are unpredictable from the public seed",
    "seeded": "seeded from `seed` (reproducible): the guarantee holds only while the seed stays secret",
}


@dataclass(frozen=True)
class RunFacts:
    """The run's facts a report states (plain values, read by the run from its config)."""

    #: the declared size n (dataset.n_train)
    n: int
    #: Poisson sampling (add/remove one) rather than replace-one
    poisson: bool
    #: dataset.path when dataset.n_train=0 counted the records there, else None
    counted_n_from: Optional[str] = None
    #: dataset.validation
    validation: float = 0.0
    #: dataset.path of your own data, else None
    own_data: Optional[str] = None
    #: your own data without a test split of their own: a part was held out as the test split
    own_test_held_out: bool = False
    #: privacy.selected_on_private (a conf/tuned/ preset chosen on private data), else None
    selected_on_private: Optional[str] = None
    #: privacy.selection_cost: the earlier runs whose released outputs chose the settings, each (noise multiplier,
    #: sample rate, steps), and the pure-DP selections' epsilon; composed with this run's ledger in the report
    selection_trainings: Tuple[Tuple[float, float, int], ...] = ()
    selection_pure_epsilon: float = 0.0
    secret_randomness: bool = True
    secure_rng: bool = False
    #: the evaluation protocol whose statistics read the private training records (task.protocol=dpimagebench:
    #: dpgen.train.loop.Task.reads_training_records), else None
    train_split_fidelity: Optional[str] = None


def train_split_not_covered(report: Dict[str, Any], protocol: str) -> Dict[str, Any]:
    """``report`` with :data:`TRAIN_SPLIT_FIDELITY_NOT_COVERED` for ``protocol`` under ``not_covered`` (once: a
    report that states it already is returned as it is); a report without a guarantee is returned as it is."""
    if not report.get("private"):
        return report
    line = TRAIN_SPLIT_FIDELITY_NOT_COVERED.format(protocol=protocol)
    nc = report.get("not_covered")
    if (isinstance(nc, list) and line in nc) or (isinstance(nc, str) and line in nc):
        return report
    return add_not_covered(report, line)


def add_not_covered(report: Dict[str, Any], extra: str) -> Dict[str, Any]:
    """``report`` with ``extra`` appended to its ``not_covered`` (a list or a string)."""
    nc = report.get("not_covered")
    if isinstance(nc, list):
        nc = [*nc, extra]
    else:
        nc = f"{nc}; {extra}" if nc else extra
    return {**report, "not_covered": nc}


def size_is_public(report: Dict[str, Any], n: int, poisson: bool) -> Dict[str, Any]:
    """Every private report says how it treats the dataset size n (which its q, steps and noise depend on)."""
    if not report.get("private"):
        return report
    return {**report, "dataset_size": (
        f"n = {int(n)} records, declared as dataset.n_train and treated as public: "
        + ("q = B / n, the epochs, the steps, the noise and every published count use this declared n, never the "
           "size of the loaded set; each loaded record is sampled independently at rate q, which is add/remove-DP "
           "whatever that size is (a set with one record more or less runs the same way)" if poisson else
           "replace-one neighbours have the same n (the relation fixes it; a set of another size is refused); q, "
           "the epochs, the steps and the noise depend on it"))}


def within_budget(report: Dict[str, Any]) -> Dict[str, Any]:
    """A privacy report that says the guarantee does not hold when the ledger ended above its budget (no path
    of the loop lets that happen; this is the last line of defence)."""
    spent, budget = report.get("epsilon_spent"), report.get("epsilon_budget")
    if isinstance(spent, (int, float)) and isinstance(budget, (int, float)) and spent > budget * (1 + 1e-9):
        report = dict(report)
        report["guarantee_holds"] = False
        report["guarantee_caveats"] = [*(report.get("guarantee_caveats") or []),
                                       f"the ledger spent epsilon {spent:.6g}, above the budget {budget:g}"]
    return report


def settings_choice(report: Dict[str, Any], facts: RunFacts) -> Dict[str, Any]:
    """``report`` stating how its settings were chosen on the private records (``facts.selected_on_private``) and,
    where that choice was made by DP mechanisms whose cost the preset states (``privacy.selection_cost``), the
    epsilon of this run and that choice together (``epsilon_with_settings_choice``: the PLD composition of this
    run's Poisson-subsampled Gaussian steps with the earlier runs', plus the selections' pure epsilon, at this
    run's delta; dpgen.privacy.selection.carried_epsilon). The ledger charges this run only, so the number is stated
    beside it; a choice with no stated cost says that no bound covers it."""
    from dpgen.privacy.ledger import RELATIONS
    from dpgen.privacy.selection import carried_epsilon

    groups = report.get("composition")
    own = isinstance(groups, list) and isinstance(report.get("delta"), (int, float)) and all(
        isinstance(g, (list, tuple)) and len(g) == 3 for g in groups)
    costed = bool(facts.selection_trainings) or facts.selection_pure_epsilon > 0
    # the ledger's history under add/remove (Poisson sampling), the relation of the earlier runs and of PLD here
    if costed and own and report.get("neighbouring_relation") == RELATIONS["poisson"]:
        eps = carried_epsilon(groups, facts.selection_trainings, facts.selection_pure_epsilon, float(report["delta"]))
        line = (f"the choice of this run's settings: {facts.selected_on_private}. This run's ledger charges this run "
                "only. With the mechanisms that made the choice (privacy.selection_cost: the earlier trainings whose "
                "output chose it, composed sequentially under PLD, plus the selections' epsilon), the epsilon is "
                f"epsilon_with_settings_choice = {eps:.4g} at delta {float(report['delta']):g}")
        return {**add_not_covered(report, line), "settings_selected_on_private_data": facts.selected_on_private,
                "epsilon_with_settings_choice": eps}
    why = ("no DP mechanism made it, so no bound covers it" if not costed else
           "its cost is stated but could not be composed with this run's ledger (not a Poisson-subsampled Gaussian "
           "ledger)")
    return {**add_not_covered(report, f"the choice of this run's settings: {facts.selected_on_private} (charged to no "
                                      f"ledger: {why})"),
            "settings_selected_on_private_data": facts.selected_on_private}


def run_report(report: Dict[str, Any], facts: RunFacts) -> Dict[str, Any]:
    """The method's ``report`` with the run's ``facts`` stated (module doc)."""
    report = size_is_public(report, facts.n, facts.poisson)
    if report.get("private"):
        report = add_not_covered(report, WALL_CLOCK_NOT_COVERED)
        if facts.counted_n_from:
            report = add_not_covered(report, COUNTED_N_NOT_COVERED.format(n=int(facts.n), path=facts.counted_n_from))
        if facts.own_data:
            if facts.own_test_held_out:
                report = add_not_covered(report, OWN_TEST_NOT_COVERED.format(path=facts.own_data))
            report = add_not_covered(report, OWN_DATA_NOT_COVERED.format(path=facts.own_data))
        if facts.validation > 0:
            report = {**report, "validation_holdout": HOLDOUT_TEXT.format(f=facts.validation)}
        if facts.train_split_fidelity:
            report = train_split_not_covered(report, facts.train_split_fidelity)
        if facts.selected_on_private:
            report = settings_choice(report, facts)
    kind = "secure" if facts.secure_rng else "secret" if facts.secret_randomness else "seeded"
    return {**within_budget(report), "mechanism_randomness": RANDOMNESS[kind]}


# ---- the typed report every reader reads -------------------------------------------------------------------------

#: methods whose reports, before issue 83, wrote ``sigma`` for the noise MULTIPLIER z (DP-Sinkhorn's Algorithm 1
#: names z sigma; its noise std is 2 C z, or C z per record)
LEGACY_SIGMA_IS_MULTIPLIER = frozenset({"dpsinkhorn", "dpsinkhorn_param", "dpsinkhorn_adv"})
#: methods whose reports wrote ``sigma`` for the noise STANDARD DEVIATION (z x the release's sensitivity)
LEGACY_SIGMA_IS_STD = frozenset({"dpmerf", "dpswd", "dpdann", "dpsgd"})
#: what a private report must state: nothing stands in for a missing one (a 0 would read as perfect privacy)
REQUIRED_PRIVATE = ("epsilon_spent", "delta")
#: how a table writes a fact the report does not state (never 0)
NOT_STATED = "n/a"


class PrivacyReportError(ValueError):
    """A privacy report that lacks a fact it must state, or states one that is not a number."""


def _number(d: Mapping[str, Any], key: str, who: str) -> Optional[float]:
    """``d[key]`` as a float; None when absent or null; an error naming the key when it is not a number."""
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PrivacyReportError(f"the privacy report of {who} states {key}={v!r}, which is not a number: the report "
                                 "was edited or written by another program; re-run the run to write it again")
    return float(v)


def _cell(x: Optional[float]) -> Any:
    """A noise fact as a table cell: 4 significant digits (a std of 2e-5 stays 2e-5), or n/a."""
    return NOT_STATED if x is None else float(f"{x:.4g}")


@dataclass(frozen=True)
class PrivacyReport:
    """What a run's privacy report guarantees, typed: what tables, datasheets, run summaries and ``dpgen collect``
    read (:meth:`of`), so that no reader guesses a missing fact. ``noise_multiplier`` is z, the Gaussian's std
    over the release's l2 sensitivity; ``noise_std`` is that std in the units of the released quantity (z x the
    sensitivity); either is None when the report does not state it (never 0). A non-private run has epsilon
    inf, no delta and no noise."""

    private: bool
    #: the neighbouring relation the epsilon is stated for (add/remove one record, replace one record, ...)
    relation: Optional[str]
    #: the accountant that keeps the ledger and why (the report's ``accountant`` text)
    accountant: Optional[str]
    noise_multiplier: Optional[float]
    noise_std: Optional[float]
    #: q, the probability that a step reads a given record (1 for a full-batch release)
    sample_rate: Optional[float]
    #: the private steps the ledger charged
    steps: Optional[int]
    #: the epsilon spent (inf when not private)
    epsilon: float
    delta: Optional[float]
    epsilon_budget: Optional[float]
    not_covered: Tuple[str, ...] = ()
    guarantee_holds: bool = False

    @classmethod
    def of(cls, d: Optional[Mapping[str, Any]], method: Optional[str] = None) -> "PrivacyReport":
        """The report ``d`` (metrics.json's ``privacy``, a checkpoint's record) typed. A private report without
        ``epsilon_spent`` or ``delta`` is refused (:class:`PrivacyReportError`, naming the key). ``method``: the
        run's method name, which maps the ``sigma`` of reports written before issue 83 (the multiplier in
        DP-Sinkhorn's, the std in the other methods'); an unknown method's ``sigma`` is not read, and a noise fact
        that cannot be known is None."""
        who = f"method={method}" if method else "this run"
        if not isinstance(d, Mapping):
            raise PrivacyReportError(f"{who} has no privacy report (got {type(d).__name__}): read metrics.json's "
                                     "'privacy' or the checkpoint's record of a finished run")
        if not isinstance(d.get("private"), bool):  # whether a guarantee is claimed at all is never guessed
            raise PrivacyReportError(f"the privacy report of {who} does not say whether the run is private (its "
                                     f"'private' is {d.get('private')!r}, not true or false): it was not written by a "
                                     "method's privacy_report(); re-run the run to write it again")
        nc = d.get("not_covered")
        not_covered = (() if not nc else (str(nc),) if isinstance(nc, str) else tuple(str(x) for x in nc))
        if not d["private"]:
            return cls(private=False, relation=d.get("neighbouring_relation"), accountant=d.get("accountant"),
                       noise_multiplier=None, noise_std=None, sample_rate=None, steps=None, epsilon=math.inf,
                       delta=None, epsilon_budget=None, not_covered=not_covered, guarantee_holds=False)
        missing = [k for k in REQUIRED_PRIVATE if d.get(k) is None]
        if missing:
            raise PrivacyReportError(
                f"the privacy report of {who} is private but states no {' and no '.join(missing)}: a report must "
                "state every fact of its guarantee (nothing is read as 0). Re-run or resume the run with this "
                "dpgen to write its report again")
        z, std = _number(d, "noise_multiplier", who), _number(d, "noise_std", who)
        sens = d.get("sensitivity")
        sens = float(sens) if isinstance(sens, (int, float)) and not isinstance(sens, bool) and sens > 0 else None
        sigma = _number(d, "sigma", who) if "sigma" in d else None  # written by dpgen before issue 83
        if sigma is not None and method in LEGACY_SIGMA_IS_MULTIPLIER and z is None:
            z = sigma
        if sigma is not None and method in LEGACY_SIGMA_IS_STD and std is None:
            std = sigma
        if std is None and z is not None and sens is not None:
            std = z * sens
        if z is None and std is not None and sens is not None:
            z = std / sens
        eps, budget = _number(d, "epsilon_spent", who), _number(d, "epsilon_budget", who)
        holds = d.get("guarantee_holds")
        if not isinstance(holds, bool):  # a report that does not say: it holds unless the ledger overspent
            holds = budget is None or eps <= budget * (1 + 1e-9)
        steps = d.get("private_steps", d.get("steps_accounted"))
        return cls(private=True, relation=d.get("neighbouring_relation"), accountant=d.get("accountant"),
                   noise_multiplier=z, noise_std=std, sample_rate=_number(d, "sample_rate", who),
                   steps=int(steps) if isinstance(steps, (int, float)) and not isinstance(steps, bool) else None,
                   epsilon=eps, delta=_number(d, "delta", who), epsilon_budget=budget, not_covered=not_covered,
                   guarantee_holds=holds)

    def cells(self) -> Dict[str, Any]:
        """The table columns of the guarantee: ``epsilon_spent`` (4 decimals; ``inf`` when not private),
        ``noise_multiplier`` and ``noise_std`` (4 significant digits; n/a when not stated)."""
        return {"epsilon_spent": round(self.epsilon, 4) if self.private else "inf",
                "noise_multiplier": _cell(self.noise_multiplier), "noise_std": _cell(self.noise_std)}

    def noise_text(self) -> str:
        """The noise in words, for a summary line."""
        parts = ([f"noise multiplier {self.noise_multiplier:.4g}"] if self.noise_multiplier is not None else []) + \
                ([f"noise std {self.noise_std:.4g}"] if self.noise_std is not None else [])
        return ", ".join(parts) or "noise: not stated by the report"


__all__ = ["COUNTED_N_NOT_COVERED", "HOLDOUT_TEXT", "LEGACY_SIGMA_IS_MULTIPLIER", "LEGACY_SIGMA_IS_STD", "NOT_STATED",
           "OWN_DATA_NOT_COVERED", "OWN_TEST_NOT_COVERED", "PrivacyReport", "PrivacyReportError", "REQUIRED_PRIVATE",
           "RunFacts", "TRAIN_SPLIT_FIDELITY_NOT_COVERED", "WALL_CLOCK_NOT_COVERED", "add_not_covered", "run_report",
           "settings_choice", "size_is_public", "train_split_not_covered", "within_budget"]
