"""Tasks a run can perform (``task=`` in the config).

Each trainable task is a :class:`dpgen.train.loop.Task` (data, models, batches, evaluation,
summary) run by the one loop; ``TASKS[name](cfg, output_dir=...)`` runs it in a run folder.
``accounting`` trains nothing: it reports what a private method's settings spend; ``evaluate``
trains the downstream classifiers on a released synthetic set (``dpgen sample``).
"""

from dpgen.tasks.accounting import run_accounting
from dpgen.tasks.classification import ClassificationTask
from dpgen.tasks.domain_adaptation import DomainAdaptationTask
from dpgen.tasks.evaluate import run_evaluate
from dpgen.tasks.generation import GenerationTask

TASKS = {"accounting": run_accounting, "evaluate": run_evaluate, **{t.name: t.run for t in (GenerationTask, ClassificationTask,
                                                                   DomainAdaptationTask)}}
