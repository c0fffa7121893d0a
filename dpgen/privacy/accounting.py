"""The accounting report of a declared mechanism (``task=accounting``): plain numbers in, a report out.

A method declares what it releases (:mod:`dpgen.privacy.mechanisms`); :func:`account` turns that mechanism, the
budget (:class:`Budget`) and the public facts of the run (:class:`Setting`) into ``{"summary": {...}, "lines":
[...]}``: the calibrated noise, the epsilon the run reaches under the ledger's accountant, the cross-checks by
independent accountants, and what the guarantee does not cover. Nothing here reads a configuration or knows a
method: a method inside dpgen or outside it is accounted by the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from dpgen.privacy.accountants import epsilon_for, resolve_accountant
from dpgen.privacy.calibration import calibrate, steps_to_epsilon
from dpgen.privacy.ledger import ACCOUNTANT_TEXT, RELATIONS, accountant_reason
from dpgen.privacy.mechanisms import (ONE_SHOT_REASON, LocalRelease, Mechanism, OneShotGaussian, ProjectedGaussian,
                                      SubsampledGaussian, accountant_for, make_ledger, projected_calibration)

#: what the reports of the mechanisms without a PLD ledger say about their accountant, and why
WOR_ACCOUNTANT = ("autodp RDP: the tightest valid accountant for sampling without replacement, which "
                  "dp-accounting's PLD does not analyse")


@dataclass(frozen=True)
class Budget:
    """(``epsilon``, ``delta``), the ledger's ``accountant`` (``auto``: the tightest valid one for the sampling),
    the calibration's ``rel_tol`` and the independent accountants printed beside it (``cross_check``; None:
    none)."""

    epsilon: float
    delta: float
    accountant: str = "auto"
    rel_tol: float = 1e-3
    cross_check: Optional[Tuple[str, ...]] = ()


@dataclass(frozen=True)
class Setting:
    """The public facts of the run a report names: the dataset's name, its declared size ``n``, the steps, the
    batch size."""

    dataset: str
    n: int
    steps: int
    batch_size: int


def account(mechanism: Mechanism, budget: Budget, setting: Setting) -> Dict[str, Any]:
    """``{"summary", "lines", "relation"}``: what ``mechanism`` spends of ``budget`` in ``setting``, and the
    neighbouring relation its accountant analyses (None: the method names it; a one-shot or local release)."""
    for kind, fn in ((SubsampledGaussian, _subsampled_gaussian), (OneShotGaussian, _one_shot),
                     (ProjectedGaussian, _projected), (LocalRelease, _local)):
        if isinstance(mechanism, kind):
            return fn(mechanism, budget, setting)
    raise TypeError(f"account: {mechanism!r} is not a mechanism this library accounts (one of SubsampledGaussian, "
                    "OneShotGaussian, ProjectedGaussian, LocalRelease)")


def _text(accountant: str) -> str:
    return ACCOUNTANT_TEXT.get(accountant, accountant)


def _cross_check(budget: Budget, z: float, q: float, steps: int, sampling: str, accountant: str) -> Dict[str, float]:
    """Epsilon under each independent accountant: ``budget.cross_check`` (Poisson; a fixed-size batch: the numpy
    implementation of Wang et al.'s bound, ``wang_wor``, since opacus and the moments accountant model Poisson
    sampling only), autodp's RDP first when the ledger's accountant is another."""
    if budget.cross_check is None:
        return {}
    names = list(budget.cross_check) if sampling == "poisson" else ["wang_wor"]
    if accountant != "rdp":
        names = ["rdp", *[x for x in names if x != "rdp"]]
    return {name: epsilon_for(z, q, steps, budget.delta, sampling, name) for name in names if name != accountant}


def _subsampled_gaussian(m: SubsampledGaussian, budget: Budget, s: Setting) -> Dict[str, Any]:
    """``per_step`` of ``units`` drawn per step (default: the batch of the n records), Gaussian noise of ``z`` x
    the sensitivity; ``z`` None: calibrated to the budget at the run's steps."""
    units, per_step, steps, sampling = m.units or s.n, m.per_step or s.batch_size, s.steps, m.sampling
    q = per_step / units
    requested, why = accountant_for(budget.accountant, sampling)
    accountant = resolve_accountant(requested, sampling)
    why = why or accountant_reason(requested, sampling)
    lines = [
        f"{m.label} on {s.dataset}: N={s.n}, {per_step} of {units} {m.unit} per step (q={q:.5g}, {sampling} "
        f"sampling), steps={steps}",
        f"  budget (epsilon, delta) = ({budget.epsilon}, {budget.delta:g}); l2 sensitivity {m.sensitivity:g}",
        f"  accountant: {_text(accountant)} ({why})"
        + ("; autodp RDP printed beside it as the cross-check" if accountant != "rdp" else ""),
    ]
    cal = calibrate(budget.epsilon, budget.delta, units, per_step, steps=steps, sampling=sampling,
                    accountant=accountant, sensitivity=m.sensitivity, rel_tol=budget.rel_tol)
    summary: Dict[str, Any] = {"N": s.n, "steps": steps, "sample_rate": q, "sampling": sampling,
                               "sensitivity": m.sensitivity, "accountant": accountant, "accountant_reason": why,
                               "calibrated_noise_multiplier": cal["noise_multiplier"],
                               "calibrated_sigma": cal["sigma"]}
    calibrated = m.noise_multiplier is None  # the run calibrates: this noise
    lines.append(f"  calibrated noise multiplier for these steps = {cal['noise_multiplier']:.6g} "
                 f"(noise std {cal['sigma']:.6g})" + ("" if calibrated else
                                                      "; not used: method.noise_multiplier is given (below)"))
    z = cal["noise_multiplier"] if calibrated else float(m.noise_multiplier)
    eps = epsilon_for(z, q, steps, budget.delta, sampling, accountant)
    checks = _cross_check(budget, z, q, steps, sampling, accountant)
    summary.update({"noise_multiplier": z, "noise_std": z * m.sensitivity, "epsilon": eps,
                    "epsilon_cross_check": checks})
    what = ("method.noise_multiplier=null: the run uses the calibrated noise multiplier" if calibrated else
            "method.noise_multiplier given: the run uses this configured noise multiplier,")
    lines.append(f"  {what} {z:.6g} (noise std {z * m.sensitivity:.6g}): "
                 f"epsilon after {steps} steps = {eps:.4f} ({_text(accountant)})")
    lines += [f"    cross-check {_text(k)}: epsilon = {v:.4f}" for k, v in checks.items()]
    if not calibrated:  # a calibrated noise spends the budget in the requested steps
        max_steps = steps_to_epsilon(budget.epsilon, budget.delta, z, q, sampling, accountant)
        summary["steps_to_budget"] = max_steps
        lines.append(f"  steps until epsilon reaches {budget.epsilon}: {max_steps}"
                     + (f" (the run stops there, before its {steps} steps)" if max_steps < steps else ""))
    return {"summary": summary, "lines": lines, "relation": RELATIONS.get(sampling)}


def _one_shot(m: OneShotGaussian, budget: Budget, s: Setting) -> Dict[str, Any]:
    """One full-batch Gaussian release (replace one, sensitivity ``m.sensitivity``), post-processing after."""
    from dpgen.privacy.wdp import gaussian_dp_epsilon

    from dpgen.privacy.accountants import autodp_epsilon

    ledger = make_ledger(m, epsilon=budget.epsilon, delta=budget.delta)  # calibrates, or refuses a noise over budget
    z = ledger.prefix[0]
    eps = ledger.epsilon_of(z, 0)
    exact = gaussian_dp_epsilon(z, budget.delta)
    rdp = autodp_epsilon(((z, 1.0, 1),), budget.delta, "without_replacement")
    what = "calibrated noise multiplier" if m.noise_multiplier is None else "noise multiplier"
    lines = [
        f"{m.label} on {s.dataset}: released once (N = {s.n})",
        f"  replace-one sensitivity {m.sensitivity:.6g}; {what} {z:.6g} (noise std {z * m.sensitivity:.6g})",
        f"  epsilon = {eps:.4f} at delta {budget.delta:g} (dp-accounting PLD of one Gaussian release calibrates and "
        f"keeps the ledger: {ONE_SHOT_REASON}); the analytic Gaussian mechanism, exact for one release: "
        f"{exact:.4f}; cross-check autodp RDP: {rdp:.4f}",
        "  the guarantee does not depend on the number of training steps (post-processing of the release)",
    ]
    return {"summary": {"N": s.n, "sensitivity": m.sensitivity, "noise_multiplier": z,
                        "noise_std": z * m.sensitivity, "epsilon": eps,
                        "epsilon_cross_check": {"analytic_gaussian": exact, "rdp": rdp}}, "lines": lines,
            "relation": RELATIONS["one_shot"]}


def _local(m: LocalRelease, budget: Budget, s: Setting) -> Dict[str, Any]:
    """Each record privatised once: the noise follows from (epsilon, delta) in closed form."""
    from dpgen.privacy.local import gaussian_sigma, laplace_scale

    if m.kind == "laplace":
        scale = laplace_scale(budget.epsilon, m.radius, m.sensitivity)
        what = f"Laplace scale b = {scale:.6g} on the l1 ball of radius {m.radius} (epsilon-LDP)"
    else:
        scale = gaussian_sigma(budget.epsilon, budget.delta, m.radius, m.sensitivity)
        what = f"Gaussian std s = {scale:.6g} on the l2 ball of radius {m.radius} ((epsilon, delta)-LDP)"
    lines = [
        f"{m.label} on {s.dataset}: each record privatised once, locally",
        f"  budget per record (epsilon, delta) = ({budget.epsilon}, {budget.delta:g}); sensitivity = {m.sensitivity}",
        f"  {what}",
        "  the guarantee does not depend on the number of training steps (post-processing, Remark 1)",
        "  accountant: none (privacy.accountant does not apply): each record is privatised once by a local "
        "mechanism whose noise follows from (epsilon, delta) in closed form, with no composition or subsampling",
    ]
    return {"summary": {"mechanism": m.kind, "scale": scale, "radius": m.radius, "sensitivity": m.sensitivity},
            "lines": lines, "relation": RELATIONS["local"]}


def _projected(m: ProjectedGaussian, budget: Budget, s: Setting) -> Dict[str, Any]:
    return _projected_paper(m, budget, s) if m.reading == "paper" else _projected_run(m, budget, s)


def _projected_run(m: ProjectedGaussian, budget: Budget, s: Setting) -> Dict[str, Any]:
    """The training run's own calibration (its ledger, the union bound over the run)."""
    ledger = make_ledger(m, epsilon=budget.epsilon, delta=budget.delta, accountant=budget.accountant,
                         rel_tol=budget.rel_tol)
    cal = projected_calibration(m, ledger, budget.delta)
    z, q = float(ledger.noise_multiplier), ledger.sample_rate
    eps = ledger.epsilon_of(z, m.steps)
    res = {**cal, "sensitivity": math.sqrt(cal["squared_sensitivity"]), "steps": m.steps, "sample_rate": q,
           "epsilon_reached": eps, "d": m.d, "k": m.k, "N": m.n}
    lines = [
        f"{m.label} on {s.dataset}: N={m.n}, compared dimension d={m.d}, k={m.k}, batch={m.batch_size}, "
        f"steps={m.steps} (q={q:.5g}, sampling without replacement)",
        f"  budget (epsilon, delta) = ({budget.epsilon}, {budget.delta:g})",
        f"  delta: {cal['delta_bound']:.3g} to the {m.bound} sensitivity bound, {cal['delta_rdp']:.3g} to the RDP -> "
        "DP conversion",
        f"  squared sensitivity w = {cal['squared_sensitivity']:.6g}",
        f"  noise multiplier z = {z:.6g}; sigma = z * sqrt(w) = {cal['sigma']:.6g}",
    ]
    if m.prefix:
        lines.append(f"  + one DP mean release before training (noise multiplier {m.prefix[0]}, full batch), "
                     "composed in the same ledger")
    lines.append(f"  epsilon reached = {eps:.4f} ({_text(ledger.accountant_name)}: {ledger.accountant_reason})")
    return {"summary": res, "lines": lines, "relation": RELATIONS["without_replacement"]}


def _projected_paper(m: ProjectedGaussian, budget: Budget, s: Setting) -> Dict[str, Any]:
    """The paper's calibration (Proposition 2 with its per-step bound), and what a run's union bound adds."""
    from dpgen.privacy.projection import calibrate_dpswd_sigma

    length = {"steps": int(m.steps)} if m.epochs is None else {"epochs": m.epochs}
    res = dict(calibrate_dpswd_sigma(epsilon=budget.epsilon, delta=budget.delta, k=m.k, d=m.d, n=m.n,
                                     batch_size=m.batch_size, bound=m.bound, convention=m.convention,
                                     delta_split=m.delta_split, **length))
    res.update({"d": m.d, "k": m.k, "N": m.n, "bound": m.bound, "convention": m.convention})
    lines = [
        f"{m.label} on {s.dataset}: N={m.n}, d={m.d}, k={m.k}, batch={m.batch_size}, "
        f"steps={res.get('steps', m.steps)} (q={res.get('sample_rate', m.batch_size / m.n):.5g}, "
        f"sampling without replacement)",
        f"  budget (epsilon, delta) = ({budget.epsilon}, {budget.delta:g})",
        f"  delta split: {res['delta_bound']:.3g} to the {m.bound} sensitivity bound (w holds with "
        f"prob. 1 - delta_bound), {res['delta_rdp']:.3g} to the RDP -> DP conversion",
        f"  squared sensitivity w(k, delta_bound) = {res['sensitivity'] ** 2:.6g}  "
        f"(sensitivity {res['sensitivity']:.6g})",
        f"  noise multiplier z = {res['noise_multiplier']:.6g}",
        f"  calibrated sigma = z * sqrt(w) = {res['sigma']:.6g}",
    ]
    if "epsilon_reached" in res:
        lines.append(f"  epsilon reached = {res['epsilon_reached']:.4f} ({WOR_ACCOUNTANT}; {m.convention})")
    return {"summary": res, "lines": lines + _per_step_caveat(res, m), "relation": RELATIONS["without_replacement"]}


def _per_step_caveat(res: Dict[str, Any], m: ProjectedGaussian) -> List[str]:
    """What the paper's sigma guarantees: its per-step bound holds per step only; a training run
    (``union_bound``) evaluates it at delta_bound / (q T) so it holds over the run."""
    from dpgen.privacy.projection import sensitivity_bound

    if m.bound == "clt":
        res["guarantee_holds"] = False
        return ["  bound=clt is a normal approximation, not a bound: the delta above is not guaranteed"]
    if m.bound not in ("bernstein", "chernoff"):
        return []
    touches = max(1.0, res["sample_rate"] * res["steps"])
    w = sensitivity_bound(m.k, m.d, res["delta_bound"] / touches, bound=m.bound, convention=m.convention)
    res["sigma_union_bound"] = res["noise_multiplier"] * math.sqrt(w)
    res["guarantee_holds"] = False  # for the sigma above; sigma_union_bound is the one a run uses
    return [f"  the sigma above applies the bound per step (the paper's reading): over the ~qT = {touches:.4g} "
            "steps that touch a record its delta is not guaranteed",
            f"  with the union bound (delta_bound / qT per step; method.union_bound=true, what a training run "
            f"uses): w = {w:.6g}, sigma = {res['sigma_union_bound']:.6g}"]


__all__ = ["Budget", "Setting", "WOR_ACCOUNTANT", "account"]
