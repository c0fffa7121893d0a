"""Training: the one loop (:func:`dpgen.train.loop.fit`) and what it is built from.

``dpgen.tasks.run(cfg, output_dir)`` runs that loop on the config's task in a given folder (the one
way to run a config: the table drivers and the tests use it; ``python run.py`` runs
``dpgen.tasks.TASKS[name]``, the same loop followed by the printed summary). This package imports nothing
from the tasks above it.
"""

from dpgen.train.state import TrainingError

__all__ = ["TrainingError"]
