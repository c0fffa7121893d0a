"""Tasks a run can perform (``task=`` in the config): ``dpgen.tasks.registry``.

Each trainable task is a :class:`dpgen.train.loop.Task` (data, models, batches, evaluation, summary) run by the
one loop; ``TASKS[name](cfg, output_dir=...)`` runs it in a run folder and prints its summary. ``run(cfg, out)``
is the one way to run a config without printing its summary (the table drivers' way). ``accounting`` trains
nothing: it reports what a private method's settings spend; ``evaluate`` trains the downstream classifiers on a
released synthetic set (``dpgen sample``).
"""

from dpgen.tasks.registry import TASKS, TRAINABLE, run, trainable

__all__ = ["TASKS", "TRAINABLE", "run", "trainable"]
