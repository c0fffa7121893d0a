"""``task=accounting``: calibrate the noise for a budget and print how the budget splits.

Needs no dataset (only its size N and shape from ``dataset/``). The method is found in the registry
(or by ``method.target``) and prints its own ``accounting_report`` (``dpgen.methods.base.Method``), so a
method outside dpgen is accounted the same way. Writes ``accounting.json`` in the run's output folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from dpgen.config import Config
from dpgen.tasks.registry import TASKS


def _home_task(cfg: Config) -> str:
    """The task the method trains (domain adaptation when the dataset is a source/target pair)."""
    from dpgen.methods.registry import tasks_of

    if cfg.method.target:
        return cfg.task.name
    tasks = tasks_of(cfg.method.name)
    if "domain_adaptation" in tasks and hasattr(cfg.dataset, "target"):
        return "domain_adaptation"
    return tasks[0] if tasks else "generation"


@TASKS.register("accounting")
def run_accounting(cfg: Config, output_dir: Path | None = None) -> Dict[str, Any]:
    from dpgen.methods.registry import DataInfo, method_class
    from dpgen.methods.reports import steps_of
    from dpgen.utils.io import write_json

    name = cfg.method.name
    relation = None
    if not cfg.method.private:
        out = {"summary": {"epsilon": float("inf")},
               "lines": [f"{name} is non-private: epsilon = inf (no noise to calibrate)."]}
    else:
        cls = method_class(cfg, _home_task(cfg))
        ds = cfg.dataset
        info = DataInfo(int(ds.n_train), tuple(ds.shape or ()), int(ds.num_classes or 0), dim=int(ds.dim or 0))
        out = cls.accounting_report(cfg, info, steps_of(cfg))
        # every privacy report names its neighbouring relation and how it treats n
        relation = out.get("relation") or cls.accounting_relation
        if not relation:
            raise ValueError(f"method={name}: {cls.__qualname__}'s accounting report names no neighbouring relation "
                             "(set accounting_relation on the class or neighbouring_relation in privacy_report())")
        out["lines"].append(f"  neighbouring relation: {relation}; computed from public numbers only "
                            f"(dataset.n_train = {ds.n_train}, treated as public)")
    for line in out["lines"]:
        print(line)
    record = {"task": "accounting", "method": name, "dataset": cfg.dataset.name,
              "epsilon_budget": cfg.privacy.epsilon, "delta": cfg.privacy.delta, **out["summary"]}
    if relation is not None:
        record.update({"neighbouring_relation": relation,
                       "dataset_size": f"n = {cfg.dataset.n_train} from dataset.n_train, treated as public"})
    if output_dir is not None:
        from dpgen.utils.run_dir import start_run_dir

        path = write_json(start_run_dir(cfg, output_dir, "accounting") / "accounting.json", record)
        print(f"[dpgen] wrote {path}")
    return record
