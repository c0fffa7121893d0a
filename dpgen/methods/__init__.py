"""Methods: each a small object (loss + privacy mechanism + accountant) in one file.

``conf/method/<name>.yaml`` <-> ``dpgen/methods/<name>.py``. Each class registers itself with
``@register("<name>", tasks=(...))`` (``dpgen.methods.registry``); a run builds it with
``registry.build(cfg, info, steps)``. The registry finds the built-in methods itself: its first lookup imports
every module of this package (``dpgen.utils.registry.Registry``), so a new method is one new file here.
"""

from dpgen.methods.base import GenerativeMethod, Method
from dpgen.methods.registry import DataInfo, build, method_class, methods_for, register


def load_class(target: str, key: str = "method.target"):
    """The class a dotted path ``package.module.Class`` names (``hydra.utils.get_object``), or a ValueError
    naming the bad value."""
    from dpgen.utils.objects import import_object

    return import_object(target, key)


__all__ = ["DataInfo", "GenerativeMethod", "Method", "build", "load_class", "method_class", "methods_for",
           "register"]
