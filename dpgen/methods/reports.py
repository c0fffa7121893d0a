"""What a private method's settings spend, from public numbers only (``task=accounting``).

Each method class's ``accounting_report(cfg, info, steps)`` returns ``{"summary", "lines", "relation"}``;
the helpers below are the reports of the built-in mechanisms (subsampled Gaussian, DP-SWD's sensitivity
bound, a one-time release, local DP). ``dpgen.methods.base.Method.accounting_report`` is the default: the
method built from the dataset's size and its own ``privacy_report()``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from dpgen.privacy.accountants import epsilon_for, resolve_accountant
from dpgen.privacy.calibration import calibrate, steps_for_epochs, steps_to_epsilon

#: what the reports of the mechanisms without a PLD ledger say about their accountant, and why
WOR_ACCOUNTANT = ("autodp RDP: the tightest valid accountant for sampling without replacement, which "
                  "dp-accounting's PLD does not analyse")


def steps_of(cfg) -> int:
    t = cfg.trainer
    if t.steps is not None:
        return int(t.steps)
    return steps_for_epochs(cfg.dataset.n_train, t.batch_size, t.epochs)


def _cross_check(cfg, z: float, q: float, steps: int, sampling: str, accountant: str) -> Dict[str, float]:
    out: Dict[str, float] = {}
    if not cfg.task.cross_check:
        return out
    # opacus and the moments accountant model Poisson sampling only: a fixed-size batch is checked by
    # the independent numpy implementation of Wang et al.'s bound (wang_wor) instead
    names = cfg.privacy.cross_check if sampling == "poisson" else ["wang_wor"]
    if accountant != "rdp":  # autodp's RDP bound is printed beside PLD (or any other main accountant)
        names = ["rdp", *[x for x in names if x != "rdp"]]
    for name in names:
        if name != accountant:
            out[name] = epsilon_for(z, q, steps, cfg.privacy.delta, sampling, name)
    return out


def _account_dpswd_method(cfg, steps: int, method_cls) -> Dict[str, Any]:
    """dpgen's DP-SWD variants (tensor rows, DP mean, low-pass): the method object's own calibration,
    so the accounting task and a training run report the same noise."""
    import math


    m, p, t = cfg.method, cfg.privacy, cfg.trainer
    n = cfg.dataset.n_train
    shape = tuple(cfg.dataset.shape) or None
    meth = method_cls(cfg, num_classes=cfg.dataset.num_classes, data_dim=cfg.dataset.dim, n_private=n, steps=steps,
                 batch_size=t.batch_size, image_shape=shape)
    cal = meth.calibration
    eps = meth.ledger.epsilon_of(meth.noise_multiplier, steps)
    res = {**cal, "sensitivity": math.sqrt(cal["squared_sensitivity"]), "steps": steps,
           "sample_rate": meth.sample_rate, "epsilon_reached": eps, "d": meth.compare_dim, "k": m.k, "N": n,
           "label_mode": m.label_mode, "center": m.center}
    lines = [
        f"DP-SWD on {cfg.dataset.name}: N={n}, compared dimension d={meth.compare_dim} (label_mode={m.label_mode}"
        f"{', low-pass ' + str(m.compare_lowpass) if m.compare_lowpass else ''}), k={m.k}, batch={t.batch_size}, "
        f"steps={steps} (q={meth.sample_rate:.5g}, sampling without replacement)",
        f"  budget (epsilon, delta) = ({p.epsilon}, {p.delta:g})",
        f"  delta: {cal['delta_bound']:.3g} to the {m.bound} sensitivity bound, {cal['delta_rdp']:.3g} to the RDP -> DP "
        "conversion",
        f"  squared sensitivity w = {cal['squared_sensitivity']:.6g}",
        f"  noise multiplier z = {meth.noise_multiplier:.6g}; sigma = z * sqrt(w) = {meth.sigma:.6g}",
    ]
    if m.center == "dp_mean":
        lines.append(f"  + one DP mean release before training (noise multiplier {m.center_noise_multiplier}, "
                     "full batch), composed in the same ledger")
    lines.append(f"  epsilon reached = {eps:.4f} ({_ledger_accountant_text(meth.ledger)})")
    return {"summary": res, "lines": lines}


def _ledger_accountant_text(ledger) -> str:
    """The ledger's accountant and why, in a report line."""
    from dpgen.privacy.ledger import ACCOUNTANT_TEXT

    return f"{ACCOUNTANT_TEXT.get(ledger.accountant_name, ledger.accountant_name)}: {ledger.accountant_reason}"


def account_dpswd(cfg, method_cls) -> Dict[str, Any]:
    from dpgen.privacy.projection import calibrate_dpswd_sigma

    m, p, t = cfg.method, cfg.privacy, cfg.trainer
    n = cfg.dataset.n_train
    d = m.compare_dim or cfg.dataset.dim
    steps = steps_of(cfg)
    # epochs when the run is given in epochs (each convention turns them into steps its own way)
    length = {"steps": int(t.steps)} if t.steps is not None else {"epochs": t.epochs}
    if m.label_mode == "tensor" or m.center != "none" or m.compare_lowpass:
        return _account_dpswd_method(cfg, steps, method_cls)
    res = calibrate_dpswd_sigma(
        epsilon=p.epsilon,
        delta=p.delta,
        k=m.k,
        d=d,
        n=n,
        batch_size=t.batch_size,
        bound=m.bound,
        convention=m.convention,
        delta_split=m.delta_split,
        **length,
    )
    res = dict(res)
    res.update({"d": d, "k": m.k, "N": n, "bound": m.bound, "convention": m.convention})
    lines = [
        f"DP-SWD on {cfg.dataset.name}: N={n}, d={d}, k={m.k}, batch={t.batch_size}, "
        f"steps={res.get('steps', steps)} (q={res.get('sample_rate', t.batch_size / n):.5g}, "
        f"sampling without replacement)",
        f"  budget (epsilon, delta) = ({p.epsilon}, {p.delta:g})",
        f"  delta split: {res.get('delta_bound'):.3g} to the {m.bound} sensitivity bound (w holds with "
        f"prob. 1 - delta_bound), {res.get('delta_rdp'):.3g} to the RDP -> DP conversion",
        f"  squared sensitivity w(k, delta_bound) = {res.get('sensitivity') ** 2:.6g}  "
        f"(sensitivity {res.get('sensitivity'):.6g})",
        f"  noise multiplier z = {res.get('noise_multiplier'):.6g}",
        f"  calibrated sigma = z * sqrt(w) = {res.get('sigma'):.6g}",
    ]
    if "epsilon_reached" in res:
        lines.append(f"  epsilon reached = {res['epsilon_reached']:.4f} ({WOR_ACCOUNTANT}; {m.convention})")
    lines += _per_step_bound_caveat(res, m, d)
    return {"summary": res, "lines": lines}


def _per_step_bound_caveat(res: Dict[str, Any], m, d: int) -> List[str]:
    """What the sigma above guarantees: the paper's per-step bound holds per step only; a training run
    (method.union_bound=true) evaluates it at delta_bound / (q T) so it holds over the run."""
    import math

    from dpgen.privacy.projection import sensitivity_bound

    if m.bound == "clt":
        res["guarantee_holds"] = False
        return ["  bound=clt is a normal approximation, not a bound: the delta above is not guaranteed"]
    if m.bound not in ("bernstein", "chernoff"):
        return []
    touches = max(1.0, res["sample_rate"] * res["steps"])
    w = sensitivity_bound(m.k, d, res["delta_bound"] / touches, bound=m.bound, convention=m.convention)
    res["sigma_union_bound"] = res["noise_multiplier"] * math.sqrt(w)
    res["guarantee_holds"] = False  # for the sigma above; sigma_union_bound is the one a run uses
    return [f"  the sigma above applies the bound per step (the paper's reading): over the ~qT = {touches:.4g} "
            "steps that touch a record its delta is not guaranteed",
            f"  with the union bound (delta_bound / qT per step; method.union_bound=true, what a training run "
            f"uses): w = {w:.6g}, sigma = {res['sigma_union_bound']:.6g}"]


def account_subsampled_gaussian(cfg, sensitivity: float, label: str, units: int = 0,
                                per_step: int = 0, sampling: Optional[str] = None,
                                accountant: Optional[str] = None, reason: Optional[str] = None) -> Dict[str, Any]:
    """A subsampled Gaussian ledger: ``per_step`` of ``units`` drawn per step (default: the batch of the
    N records; DP-Sinkhorn's adversarial variant: one of its partitions). ``accountant`` (and why: ``reason``):
    the one the method's ledger uses, when it is not privacy.accountant (``auto`` resolved for the sampling)."""
    m, p, t = cfg.method, cfg.privacy, cfg.trainer
    n = cfg.dataset.n_train
    steps = steps_of(cfg)
    units, per_step = units or n, per_step or t.batch_size
    q = per_step / units
    z = m.noise_multiplier
    sampling = sampling or m.sampling
    # privacy.accountant, ``auto`` resolved for the sampling (dp-accounting PLD for Poisson sampling), unless the
    # method's ledger uses another
    from dpgen.privacy.ledger import ACCOUNTANT_TEXT, accountant_reason

    requested = accountant or p.accountant
    accountant = resolve_accountant(requested, sampling)
    why = reason or accountant_reason(requested, sampling)
    lines = [
        f"{label} on {cfg.dataset.name}: N={n}, {per_step} of {units} {'records' if units == n else 'partitions'} "
        f"per step (q={q:.5g}, {sampling} sampling), steps={steps}",
        f"  budget (epsilon, delta) = ({p.epsilon}, {p.delta:g}); l2 sensitivity {sensitivity:g}",
        f"  accountant: {ACCOUNTANT_TEXT.get(accountant, accountant)} ({why})"
        + ("; autodp RDP printed beside it as the cross-check" if accountant != "rdp" else ""),
    ]
    summary: Dict[str, Any] = {"N": n, "steps": steps, "sample_rate": q, "sampling": sampling,
                               "sensitivity": sensitivity, "accountant": accountant, "accountant_reason": why}
    cal = calibrate(p.epsilon, p.delta, units, per_step, steps=steps, sampling=sampling,
                    accountant=accountant, sensitivity=sensitivity, rel_tol=p.rel_tol)
    summary["calibrated_noise_multiplier"] = cal["noise_multiplier"]
    summary["calibrated_sigma"] = cal["sigma"]
    lines.append(
        f"  calibrated noise multiplier for these steps = {cal['noise_multiplier']:.6g} "
        f"(noise std {cal['sigma']:.6g})"
    )
    calibrated = z is None  # method.noise_multiplier=null: the run calibrates (this noise)
    if calibrated:
        z = cal["noise_multiplier"]
    eps = epsilon_for(z, q, steps, p.delta, sampling, accountant)
    checks = _cross_check(cfg, z, q, steps, sampling, accountant)
    summary.update({"noise_multiplier": z, "noise_std": z * sensitivity, "epsilon": eps,
                    "epsilon_cross_check": checks})
    what = ("method.noise_multiplier=null: the run uses the calibrated noise multiplier" if calibrated else
            "configured noise multiplier")
    lines.append(f"  {what} {z:.6g} (noise std {z * sensitivity:.6g}): "
                 f"epsilon after {steps} steps = {eps:.4f} ({ACCOUNTANT_TEXT.get(accountant, accountant)})")
    for k, v in checks.items():
        lines.append(f"    cross-check {ACCOUNTANT_TEXT.get(k, k)}: epsilon = {v:.4f}")
    if not calibrated:  # a calibrated noise spends the budget in the requested steps
        max_steps = steps_to_epsilon(p.epsilon, p.delta, z, q, sampling, accountant)
        summary["steps_to_budget"] = max_steps
        lines.append(f"  steps until epsilon reaches {p.epsilon}: {max_steps}")
    return {"summary": summary, "lines": lines}


def account_entropic_ldp(cfg) -> Dict[str, Any]:
    from dpgen.privacy.local import gaussian_sigma, laplace_scale

    m, p = cfg.method, cfg.privacy
    if m.mechanism == "laplace":
        scale = laplace_scale(p.epsilon, m.radius, m.sensitivity)
        what = f"Laplace scale b = {scale:.6g} on the l1 ball of radius {m.radius} (epsilon-LDP)"
    else:
        scale = gaussian_sigma(p.epsilon, p.delta, m.radius, m.sensitivity)
        what = f"Gaussian std s = {scale:.6g} on the l2 ball of radius {m.radius} ((epsilon, delta)-LDP)"
    lines = [
        f"Entropic-LDP on {cfg.dataset.name}: each record privatised once, locally",
        f"  budget per record (epsilon, delta) = ({p.epsilon}, {p.delta:g}); sensitivity = {m.sensitivity}",
        f"  {what}",
        "  the guarantee does not depend on the number of training steps (post-processing, Remark 1)",
        "  accountant: none (privacy.accountant does not apply): each record is privatised once by a local "
        "mechanism whose noise follows from (epsilon, delta) in closed form, with no composition or subsampling",
    ]
    return {"summary": {"mechanism": m.mechanism, "scale": scale, "radius": m.radius,
                        "sensitivity": m.sensitivity}, "lines": lines}


def account_dpmerf(cfg, method_cls) -> Dict[str, Any]:
    """DP-MERF: one Gaussian release of the mean embedding (sensitivity 2 / n), whatever the training length."""
    from dpgen.privacy.wdp import gaussian_dp_epsilon

    ds, p = cfg.dataset, cfg.privacy
    m = method_cls(cfg, num_classes=ds.num_classes or 0, data_dim=ds.dim, n_private=ds.n_train)
    eps = m.ledger.epsilon_of(m.noise_multiplier, 0)
    exact = gaussian_dp_epsilon(m.noise_multiplier, p.delta)
    lines = [
        f"DP-MERF on {ds.name}: the mean embedding in {m.n_features} random features released once (N = {ds.n_train})",
        f"  replace-one sensitivity 2 / N = {m.sensitivity:.6g}; noise multiplier {m.noise_multiplier:.6g} "
        f"(noise std {m.noise_std:.6g})",
        f"  epsilon = {eps:.4f} at delta {p.delta:g} (autodp RDP of one Gaussian release keeps the ledger: "
        "privacy.accountant applies to the subsampled-Gaussian ledgers, and DP-MERF's single full-batch release is "
        "calibrated with RDP as in its measured results); the analytic Gaussian mechanism, exact for one release: "
        f"{exact:.4f}",
        "  the guarantee does not depend on the number of training steps (post-processing of the release)",
    ]
    return {"summary": {"N": ds.n_train, "sensitivity": m.sensitivity, "noise_multiplier": m.noise_multiplier,
                        "noise_std": m.noise_std, "epsilon": eps,
                        "epsilon_cross_check": {"analytic_gaussian": exact}}, "lines": lines}
