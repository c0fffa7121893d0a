"""Choosing one of a few public candidates on private records: the exponential mechanism (McSherry & Talwar 2007).

Each private record contributes to every candidate's score a number in ``[0, bound]`` (:func:`bounded_scores` clips
it there, a non-finite one counts 0), so adding or removing one record moves each score by at most ``bound``: the
sensitivity. :func:`exponential_choice` returns ``argmax_k (s_k + G_k)`` with G_k i.i.d. Gumbel of scale
``2 * bound / epsilon``, which draws candidate k with probability proportional to ``exp(epsilon * s_k / (2 * bound))``
(the Gumbel-max trick): epsilon-DP (pure, delta 0) for any scores of that sensitivity. Only the chosen index leaves
the mechanism; the scores stay in memory.

Used by ``scripts/select_on_validation.py`` on a validation split held out from the private training set
(``dataset.validation``, dpgen.data.holdout), so that the choice composes in parallel with the run that trained on
the rest: :func:`parallel_epsilon`; several runs scored beside one held-out part: :func:`scored_runs_epsilon`.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from dpgen.privacy.validation import PrivacyParameterError, check_epsilon, check_positive


def bounded_scores(contributions, bound: float) -> np.ndarray:
    """Per-candidate scores from a ``[records, candidates]`` array of per-record contributions, each clipped to
    ``[0, bound]`` (NaN and -inf count 0, +inf counts ``bound``): one record moves each score by at most ``bound``."""
    bound = check_positive(bound, "bound")
    c = np.asarray(contributions, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError("contributions must be a [records, candidates] array")
    c = np.nan_to_num(c, nan=0.0, posinf=bound, neginf=0.0)
    return np.clip(c, 0.0, bound).sum(axis=0)


def selection_probabilities(scores: Sequence[float], sensitivity: float, epsilon: float) -> np.ndarray:
    """The probability :func:`exponential_choice` picks each candidate: softmax(epsilon * s / (2 * sensitivity))."""
    epsilon = check_epsilon(epsilon)
    sensitivity = check_positive(sensitivity, "sensitivity")
    s = np.asarray(scores, dtype=np.float64) * (epsilon / (2.0 * sensitivity))
    s -= s.max()
    p = np.exp(s)
    return p / p.sum()


def exponential_choice(scores: Sequence[float], sensitivity: float, epsilon: float,
                       rng: Optional[np.random.Generator] = None) -> int:
    """The index the exponential mechanism draws (Gumbel-max; epsilon-DP for scores of ``sensitivity``).
    ``rng`` None: a generator seeded from OS entropy, so the noise cannot be predicted from any public seed."""
    epsilon = check_epsilon(epsilon)
    sensitivity = check_positive(sensitivity, "sensitivity")
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or len(s) == 0:
        raise ValueError("scores must be a non-empty list, one per candidate")
    if not np.all(np.isfinite(s)):  # bounded_scores never yields one; said without the values
        raise ValueError("a score is not finite: build the scores with bounded_scores")
    rng = rng if rng is not None else np.random.default_rng()
    noisy = s + rng.gumbel(0.0, 2.0 * sensitivity / epsilon, size=len(s))
    return int(np.argmax(noisy))


def parallel_epsilon(run_epsilon: float, selection_epsilon: float) -> float:
    """Epsilon of a run on one part of a hash partition and a selection on the other (add/remove one record: the
    record lies in one part, so the pair costs what that part's mechanism costs): the larger of the two."""
    return float(max(float(run_epsilon), float(selection_epsilon)))


def scored_runs_epsilon(runs: Sequence[Sequence[Sequence[float]]], selection_epsilon: float, delta: float,
                        earlier: Sequence[Sequence[float]] = (), earlier_pure: float = 0.0) -> float:
    """Epsilon of releasing one of several runs chosen by a selection on the held-out part, every run trained on
    the same training part. The draw depends on every scored generator, so for a training record the release
    discloses all of the runs: their Poisson-subsampled Gaussian groups ``(noise multiplier, sample rate, steps)``
    composed under PLD at ``delta``. A held-out record meets the selection only (pure, ``selection_epsilon``). One
    record lies in one part (add/remove one record): the larger of the two. One run: its own PLD epsilon.

    ``earlier`` and ``earlier_pure``: the mechanisms that chose the scored runs' settings on these same records (a
    preset's ``privacy.selection_cost``: earlier trainings, and earlier selections, perhaps on this held-out part).
    The scored runs and this draw then compose with them **sequentially** for every record, whichever part it lies
    in: every training composed under PLD, plus every pure epsilon, this draw's included
    (:func:`carried_epsilon`)."""
    check_epsilon(selection_epsilon, "the selection's epsilon")
    if any(not run for run in runs):
        raise PrivacyParameterError("a scored run records no training groups: give each run's [noise multiplier, "
                                    "sample rate, steps] groups (its privacy report's 'composition')")
    groups = [g for run in runs for g in run]
    if earlier or earlier_pure:
        return carried_epsilon(groups, earlier, float(earlier_pure) + float(selection_epsilon), delta)
    return parallel_epsilon(_trainings_epsilon(groups, delta), selection_epsilon)


def carried_epsilon(this_run: Sequence[Sequence[float]], earlier: Sequence[Sequence[float]], pure_epsilon: float,
                    delta: float) -> float:
    """Epsilon of a run whose settings came out of earlier mechanisms on the same records, all of them counted.

    A setting drawn on a held-out part is a function of the selection run's generator as well as of the held-out
    records: the draw is as private as that run (its training part) and the selection (the held-out part). A later
    run that trains on every record with that setting therefore composes **sequentially** with both, not in
    parallel. ``this_run`` and ``earlier``: Poisson-subsampled Gaussian groups ``(noise multiplier, sample rate,
    steps)`` (this run's ledger; each earlier run whose released output chose a setting); ``pure_epsilon``: the
    pure-DP selections (the exponential mechanism, delta 0) summed. Returns the PLD epsilon of every group composed
    at ``delta`` plus ``pure_epsilon``: an upper bound for every record, whichever part it lay in."""
    if pure_epsilon != 0:
        check_epsilon(pure_epsilon, "the selections' epsilon")
    return _trainings_epsilon((*this_run, *earlier), delta) + float(pure_epsilon)


def _trainings_epsilon(trainings: Sequence[Sequence[float]], delta: float) -> float:
    """The PLD epsilon at ``delta`` of Poisson-subsampled Gaussian groups ``(noise multiplier, sample rate, steps)``
    composed (0 for none); a group that is not one is refused by value."""
    from dpgen.privacy.accountants import pld_epsilon

    groups = []
    for g in trainings:
        z, q, n = (float(g[0]), float(g[1]), int(g[2]))
        check_positive(z, "a noise multiplier")
        if not 0.0 < q <= 1.0 or n < 0:
            raise PrivacyParameterError(f"the training {list(g)!r} is invalid: write [noise multiplier, sample rate in "
                                        "(0, 1], steps >= 0]")
        if n:
            groups.append((z, q, n))
    return float(pld_epsilon(tuple(sorted(groups)), float(delta))) if groups else 0.0


def choice_applies(privacy_cfg, dataset_cfg=None) -> bool:
    """Whether the choice of a run's settings (``privacy.selected_on_private`` and its ``selection_cost``) read this
    run's records: yes unless ``privacy.selected_on`` names a data set whose records are not the run's
    (``dataset_cfg``: its name and path; the held-out register's :func:`dataset_key`, so USPS at 8 x 8 is USPS).
    A choice made on MNIST's records carries nothing to a run of the same preset on USPS or on your own data."""
    chosen_on = getattr(privacy_cfg, "selected_on", None)  # a saved config.yaml before the field: None
    if not chosen_on or dataset_cfg is None:
        return True
    from dpgen.privacy.held_out_registry import dataset_key

    return dataset_key(chosen_on) == dataset_key(getattr(dataset_cfg, "name", ""), getattr(dataset_cfg, "path", None))


def other_records_note(privacy_cfg, dataset_cfg) -> Optional[str]:
    """The line a run's report states (``settings_chosen_on_other_records``) when its settings were chosen on
    another data set's records (:func:`choice_applies` false), else None."""
    if choice_applies(privacy_cfg, dataset_cfg) or not getattr(privacy_cfg, "selected_on_private", None):
        return None
    return (f"the preset's settings were chosen on {privacy_cfg.selected_on}'s records ({privacy_cfg.selected_on_private})"
            f"; this run trains on {getattr(dataset_cfg, 'name', '?')}'s, which that choice did not read: nothing "
            "of its cost is carried")


def selection_cost_groups(privacy_cfg, dataset_cfg=None):
    """``privacy.selection_cost`` of a run's (or preset's) privacy settings as ``(trainings, pure_epsilon)``: each
    earlier training a ``(noise multiplier, sample rate, steps)`` tuple; ``((), 0.0)`` when none is stated (a run
    saved before the field existed included) or when the choice read none of the records of ``dataset_cfg`` (the
    run's dataset settings: :func:`choice_applies`)."""
    cost = getattr(privacy_cfg, "selection_cost", None)  # dpgen.config.PrivacyConfig, or a saved config.yaml's
    if cost is None or not choice_applies(privacy_cfg, dataset_cfg):
        return (), 0.0
    trainings = tuple((float(t[0]), float(t[1]), int(t[2])) for t in (getattr(cost, "trainings", None) or ()))
    return trainings, float(getattr(cost, "pure_epsilon", None) or 0.0)


def choice_ratio_bound(epsilon: float) -> float:
    """The most any candidate's probability may change between neighbouring data sets: exp(epsilon)."""
    return math.exp(float(epsilon))


__all__ = ["bounded_scores", "carried_epsilon", "choice_applies", "choice_ratio_bound", "exponential_choice",
           "other_records_note", "parallel_epsilon", "scored_runs_epsilon", "selection_cost_groups",
           "selection_probabilities"]
