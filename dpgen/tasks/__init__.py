"""Tasks a run can perform (``task=`` in the config).

Each trainable task is a :class:`dpgen.train.loop.Task` (data, models, batches, evaluation,
summary) run by the one loop; ``TASKS[name](cfg, output_dir=...)`` runs it in a run folder.
``run(cfg, out)`` is the one way to run a config without printing its summary (the table drivers'
way). ``accounting`` trains nothing: it reports what a private method's settings spend; ``evaluate``
trains the downstream classifiers on a released synthetic set (``dpgen sample``).
"""

from dpgen.tasks.accounting import run_accounting
from dpgen.tasks.classification import ClassificationTask
from dpgen.tasks.domain_adaptation import DomainAdaptationTask
from dpgen.tasks.evaluate import run_evaluate
from dpgen.tasks.generation import GenerationTask

TASKS = {"accounting": run_accounting, "evaluate": run_evaluate, **{t.name: t.run for t in (GenerationTask, ClassificationTask,
                                                                   DomainAdaptationTask)}}


def run(cfg, output_dir):
    """Run ``cfg``'s task in ``output_dir`` (fresh, or resumed as ``cfg.resume`` says) and return its metrics;
    the trainable tasks through the one loop, without printing their summary."""
    from dpgen.train.loop import fit

    trainable = {t.name: t for t in (GenerationTask, ClassificationTask, DomainAdaptationTask)}
    if cfg.task.name in trainable:
        return fit(cfg, trainable[cfg.task.name](), output_dir)
    return TASKS[cfg.task.name](cfg, output_dir=output_dir)
