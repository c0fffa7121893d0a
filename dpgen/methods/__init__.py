"""Methods: each a small object (loss + privacy mechanism + accountant) in one file.

``conf/method/<name>.yaml`` <-> ``dpgen/methods/<name>.py``. Each class registers itself with
``@register("<name>", tasks=(...))`` (``dpgen.methods.registry``); a run builds it with
``registry.build(cfg, info, steps)``. Importing this package registers every built-in method.
"""

from dpgen.methods.base import GenerativeMethod, Method
from dpgen.methods.registry import DataInfo, build, method_class, methods_for, register

import importlib

for _module in ("dpswd", "da_dpswd", "dann", "dpdann", "dpmerf", "dpsgd", "dpsinkhorn", "entropic_ldp", "wgan_gp"):
    importlib.import_module(f"dpgen.methods.{_module}")  # each registers its classes


def load_class(target: str, key: str = "method.target"):
    """The class a dotted path ``package.module.Class`` names (``hydra.utils.get_object``), or a ValueError
    naming the bad value."""
    from dpgen.utils.objects import import_object

    return import_object(target, key)


__all__ = ["DataInfo", "GenerativeMethod", "Method", "build", "load_class", "method_class", "methods_for",
           "register"]
