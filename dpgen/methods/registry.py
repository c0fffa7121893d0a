"""One registry and one construction call for every method of every task.

A method class says which tasks it trains with ``@register("name", tasks=(...))``; a run builds it with
``build(cfg, info, steps)``, where ``info`` (:class:`DataInfo`) holds the public facts of the data the
task loaded (the number of private records, one record's shape, the class count, the DA feature size).
A method outside dpgen (``method.target: package.module.Class``) is built the same way, without
registering. Each base class turns ``(cfg, info, steps)`` into its constructor's arguments in
``from_config``; a method overrides it when it needs more (DP-SGD's ledger).

``task=accounting`` asks the class what it releases (``Method.declare``: a mechanism of
``dpgen.privacy.mechanisms``) and lets the privacy library account it; a method that declares nothing is built
with the same call, from the dataset's size alone, and prints its own ``privacy_report()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from dpgen.utils.registry import Registry

#: the tasks that train a method: named here because methods sit below dpgen.tasks (which may not be imported from
#: here); tests/utils/test_one_registry.py holds them equal to dpgen.tasks.TRAINABLE's entries
TASK_NAMES = ("generation", "domain_adaptation", "classification")

#: task name -> its methods (method name -> class); the first lookup imports every module of dpgen.methods, so
#: a new file there that registers a class needs nothing else (no import list to extend)
REGISTRY: Dict[str, Registry] = {t: Registry(f"method of task={t}", key="method", package="dpgen.methods")
                                 for t in TASK_NAMES}


@dataclass(frozen=True)
class DataInfo:
    """Public facts about a task's data that a method is built from (never the records themselves)."""

    n_private: int  #: private records (the sample rate's denominator; treated as public)
    shape: Tuple[int, ...] = ()  #: one record's shape (C, H, W) for images, (d,) for vectors
    num_classes: int = 0  #: 0: unconditional
    feat_dim: int = 0  #: domain adaptation: the feature extractor's output size
    dim: int = 0  #: values per record (default: the product of ``shape``)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if not self.dim and self.shape:
            object.__setattr__(self, "dim", int(math.prod(self.shape)))


def register(name: str, tasks: Tuple[str, ...] = ("generation",)):
    """Class decorator: ``method=<name>`` builds this class for each task in ``tasks``; the class's ``name`` is
    set from it (stated once)."""
    for t in tasks:
        if t not in TASK_NAMES:
            raise ValueError(f"register({name!r}, tasks={tasks!r}): unknown task {t!r}; tasks are {', '.join(TASK_NAMES)}")

    def deco(cls):
        # the name is stated here once: the class takes it (a class body that says another is refused)
        own = cls.__dict__.get("name")
        if own is not None and own != name:
            raise ValueError(f"{cls.__qualname__} says name={own!r} but registers as {name!r}: state it once, in "
                             "@register")
        cls.name = name
        for t in tasks:
            REGISTRY[t].register(name, cls)
        return cls

    return deco


def methods_for(task: str) -> Dict[str, type]:
    """The registered methods of one task (name -> class)."""
    return dict(REGISTRY[task]) if task in REGISTRY else {}


def tasks_of(name: str) -> Tuple[str, ...]:
    return tuple(t for t in TASK_NAMES if name in REGISTRY[t])


def method_class(cfg, task: Optional[str] = None) -> type:
    """The class ``cfg.method`` names for ``task`` (default ``cfg.task.name``), or a ValueError that says
    which task the method trains."""
    if cfg.method.target:  # a method outside dpgen (docs/EXTENDING.md)
        from dpgen.utils.objects import import_object

        return import_object(cfg.method.target, "method.target")
    task = task or cfg.task.name
    name = cfg.method.name
    known = methods_for(task)
    if name in known:
        return known[name]
    other = tasks_of(name)
    if other:
        raise ValueError(f"method={name} trains task={' or task='.join(other)}, not task={task}: add "
                         f"task={other[0]} (or pick one of {', '.join(known)} for task={task}).")
    raise ValueError(f"method={name!r} cannot train task={task!r}: the methods of task={task} are "
                     f"{', '.join(known)} (task=accounting covers every private method; a method outside "
                     "dpgen is given by method.target, docs/EXTENDING.md).")


def method_settings() -> Dict[str, type]:
    """Each registered method's settings dataclass (``Settings`` on its class), by method name: the schemas
    ``dpgen.config.register_configs`` stores as ``schema/method/<name>``."""
    out: Dict[str, type] = {}
    for task in TASK_NAMES:
        for name, cls in REGISTRY[task].items():
            settings = cls.Settings
            if settings is None:
                continue
            if out.setdefault(name, settings) is not settings:
                raise ValueError(f"method {name!r}: its classes declare different settings ({out[name].__qualname__}, "
                                 f"{settings.__qualname__}); one name has one schema")
    return out


def build(cfg, info: DataInfo, steps: int, task: Optional[str] = None, **extra: Any):
    """The method object of a run: ``cls.from_config(cfg, info, steps, **extra)``."""
    cls = method_class(cfg, task)
    return cls.from_config(cfg, info, int(steps), **extra)

