"""The tasks a run can perform (``task=``), found by the registry itself.

A task module registers itself: a trainable task (a :class:`dpgen.train.loop.Task` run by the one loop) with
``@trainable`` on its class, a task that trains nothing (``accounting``, ``evaluate``) with
``TASKS.register(name, run_function)``. The first lookup imports every module of ``dpgen.tasks``, so a new
task is one new file there.
"""

from __future__ import annotations

from dpgen.utils.registry import Registry

#: ``task=`` -> ``run(cfg, output_dir=...)`` (the trainable ones print their summary)
TASKS = Registry("task", key="task", package="dpgen.tasks")
#: the trainable tasks' :class:`~dpgen.train.loop.Task` classes
TRAINABLE = Registry("trainable task", key="task", package="dpgen.tasks")


def trainable(cls):
    """Class decorator: ``task=<cls.name>`` runs ``cls`` through the one loop."""
    TRAINABLE.register(cls.name, cls)
    TASKS.register(cls.name, cls.run)
    return cls


def run(cfg, output_dir):
    """Run ``cfg``'s task in ``output_dir`` (fresh, or resumed as ``cfg.resume`` says) and return its metrics;
    the trainable tasks through the one loop, without printing their summary."""
    if cfg.task.name in TRAINABLE:
        from dpgen.train.loop import fit

        return fit(cfg, TRAINABLE[cfg.task.name](), output_dir)
    return TASKS[cfg.task.name](cfg, output_dir=output_dir)
