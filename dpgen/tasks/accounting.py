"""``task=accounting``: calibrate the noise for a budget and print how the budget splits.

Needs no dataset (only its size N and shape from ``dataset/``). The method is found in the registry (or by
``method.target``) and declares what it releases (``Method.declare``: a mechanism of
``dpgen.privacy.mechanisms``); the privacy library accounts it (``dpgen.privacy.accounting.account``), so this
task holds no code of any method's. A method that declares nothing is built as a run builds it and prints its own
``privacy_report()``. Writes ``accounting.json`` in the run's output folder.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict

from dpgen.config import Config
from dpgen.privacy.selection import choice_applies, other_records_note, selection_cost_groups
from dpgen.tasks.registry import TASKS


def _home_task(cfg: Config) -> str:
    """The task the method trains (domain adaptation when the dataset is a source/target pair)."""
    from dpgen.methods.registry import tasks_of

    if cfg.method.target:
        return cfg.task.name
    tasks = tasks_of(cfg.method.name)
    if "domain_adaptation" in tasks and cfg.dataset.domain_pair:
        return "domain_adaptation"
    return tasks[0] if tasks else "generation"


def steps_of(cfg: Config) -> int:
    """The run's steps: trainer.steps, or trainer.epochs of the declared n at the batch size (the rule a run
    uses: dpgen.privacy.calibration.requested_steps)."""
    from dpgen.privacy.calibration import requested_steps

    t = cfg.trainer
    return requested_steps(t.steps, t.epochs, cfg.dataset.n_train, t.batch_size)


def budget_of(cfg: Config):
    """The privacy library's :class:`~dpgen.privacy.accounting.Budget` of ``cfg.privacy`` (cross-checks when
    ``task.cross_check``)."""
    from dpgen.privacy.accounting import Budget

    p = cfg.privacy
    checks = tuple(p.cross_check) if cfg.task.cross_check else None
    return Budget(float(p.epsilon), float(p.delta), str(p.accountant), float(p.rel_tol), checks)


def _own_report(cls, cfg: Config, info, steps: int) -> Dict[str, Any]:
    """A method that declares no mechanism: built as a run builds it, its own ``privacy_report()``."""
    from dpgen.methods.registry import build

    method = build(cfg, info, steps, _home_task(cfg))
    rep = dict(method.privacy_report())
    ledger, z = method.ledger, method.noise_multiplier
    if ledger is not None and z is not None:
        rep.setdefault("epsilon", ledger.epsilon_of(z, steps))
    label = cfg.method.name  # the name the user chose (an outside method's class inherits "base")
    lines = [f"{label} on {cfg.dataset.name}: N={info.n_private}, steps={steps} (the method's own privacy_report)"]
    lines += [f"  {k}: {v}" for k, v in rep.items() if k not in ("neighbouring_relation",)]
    return {"summary": rep, "lines": lines, "relation": rep.get("neighbouring_relation")}


def _private_report(cfg: Config) -> Dict[str, Any]:
    from dpgen.methods.registry import DataInfo, method_class
    from dpgen.privacy.accounting import Setting, account

    cls = method_class(cfg, _home_task(cfg))
    ds, steps = cfg.dataset, steps_of(cfg)
    info = DataInfo(int(ds.n_train), tuple(ds.shape or ()), int(ds.num_classes or 0), dim=int(ds.dim or 0))
    mechanism = cls.declare(cfg, info, steps)
    if mechanism is None:
        out = _own_report(cls, cfg, info, steps)
    else:
        if not mechanism.label:  # the name the user chose
            mechanism = replace(mechanism, label=cfg.method.name)
        out = account(mechanism, budget_of(cfg), Setting(str(ds.name), info.n_private, steps,
                                                         int(cfg.trainer.batch_size)))
    # every privacy report names its neighbouring relation and how it treats n
    out["relation"] = cls.accounting_relation or out.get("relation")
    if not out["relation"]:
        raise ValueError(f"method={cfg.method.name}: {cls.__qualname__}'s accounting report names no neighbouring "
                         "relation (set accounting_relation on the class or neighbouring_relation in privacy_report())")
    out["lines"].append(f"  neighbouring relation: {out['relation']}; computed from public numbers only "
                        f"(dataset.n_train = {ds.n_train}, treated as public)")
    return _settings_choice(cfg, out)


def _settings_choice(cfg: Config, out: Dict[str, Any]) -> Dict[str, Any]:
    """The preset's choice of settings on the private records, as a run's report states it
    (dpgen.privacy.report.settings_choice): with privacy.selection_cost, the epsilon of a run and that choice
    together beside the run's own (the planned steps at the calibrated noise)."""
    from dpgen.privacy.ledger import RELATIONS
    from dpgen.privacy.report import RunFacts, settings_choice

    elsewhere = other_records_note(cfg.privacy, cfg.dataset)
    if elsewhere:
        out["summary"] = {**out["summary"], "settings_chosen_on_other_records": elsewhere}
        out["lines"].append(f"  {elsewhere}")
    if not cfg.privacy.selected_on_private or not choice_applies(cfg.privacy, cfg.dataset):
        return out
    sm = out["summary"]
    z, q, steps = sm.get("noise_multiplier"), sm.get("sample_rate"), sm.get("steps")
    planned = {"private": True, "delta": float(cfg.privacy.delta), "neighbouring_relation": out["relation"],
               "composition": [[float(z), float(q), int(steps)]] if None not in (z, q, steps) else None}
    earlier, earlier_pure = selection_cost_groups(cfg.privacy, cfg.dataset)
    facts = RunFacts(n=int(cfg.dataset.n_train), poisson=out["relation"] == RELATIONS["poisson"],
                     selected_on_private=cfg.privacy.selected_on_private,
                     selection_trainings=earlier, selection_pure_epsilon=earlier_pure)
    rep = settings_choice(planned, facts)
    eps = rep.get("epsilon_with_settings_choice")
    out["summary"] = {**sm, "settings_selected_on_private_data": cfg.privacy.selected_on_private,
                      **({"epsilon_with_settings_choice": eps} if eps is not None else {})}
    out["lines"].append(f"  settings chosen on these records: {cfg.privacy.selected_on_private}")
    out["lines"].append(f"  with that choice (privacy.selection_cost): epsilon {eps:.4f} at delta {cfg.privacy.delta:g}"
                        if eps is not None else "  that choice is charged to no ledger, and no bound covers it")
    return out


@TASKS.register("accounting")
def run_accounting(cfg: Config, output_dir: Path | None = None) -> Dict[str, Any]:
    from dpgen.utils.io import write_json

    name = cfg.method.name
    if not cfg.method.private:
        out = {"summary": {"epsilon": float("inf")},
               "lines": [f"{name} is non-private: epsilon = inf (no noise to calibrate)."]}
    else:
        out = _private_report(cfg)
    for line in out["lines"]:
        print(line)
    record = {"task": "accounting", "method": name, "dataset": cfg.dataset.name,
              "epsilon_budget": cfg.privacy.epsilon, "delta": cfg.privacy.delta, **out["summary"]}
    if out.get("relation") is not None:
        record.update({"neighbouring_relation": out["relation"],
                       "dataset_size": f"n = {cfg.dataset.n_train} from dataset.n_train, treated as public"})
    if output_dir is not None:
        from dpgen.utils.run_dir import start_run_dir

        path = write_json(start_run_dir(cfg, output_dir, "accounting") / "accounting.json", record)
        print(f"[dpgen] wrote {path}")
    return record
