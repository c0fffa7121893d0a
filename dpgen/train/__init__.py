"""Training: the one loop (:func:`dpgen.train.loop.fit`) and what it is built from.

``dpgen.tasks`` runs that loop on its tasks in a given folder: ``train_generative``,
``train_classifier`` and ``train_domain_adaptation`` (one per task module). This package imports
nothing from the tasks above it.
"""

from dpgen.train.state import TrainingError

__all__ = ["TrainingError"]
