"""Training: the one loop (:func:`dpgen.train.loop.fit`) and what it is built from.

``train_generative``, ``train_classifier`` and ``train_domain_adaptation`` run that loop on the
generation, classification and domain-adaptation tasks (``dpgen.tasks``) in a given folder.
"""

from dpgen.train.trainer import TrainingError


def train_generative(cfg, output_dir):
    """``fit`` on the generation task in ``output_dir``: returns its metrics."""
    from dpgen.tasks.generation import GenerationTask
    from dpgen.train.loop import fit

    return fit(cfg, GenerationTask(), output_dir)


__all__ = ["TrainingError", "train_generative"]
