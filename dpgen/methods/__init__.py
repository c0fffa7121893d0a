"""Methods: each a small object (loss + privacy mechanism + accountant) in one file.

``conf/method/<name>.yaml`` <-> ``dpgen/methods/<name>.py``.
"""

from dpgen.methods.base import GenerativeMethod
from dpgen.methods.dpswd import DPSWD, SWD

METHODS = {"dpswd": DPSWD, "swd": SWD}

from dpgen.methods.entropic_ldp import EntropicLDP  # noqa: E402

METHODS["entropic_ldp"] = EntropicLDP

from dpgen.methods.dpsinkhorn import (AdversarialDPSinkhorn, AdversarialSinkhorn, DPSinkhorn,  # noqa: E402
                                      DPSinkhornParamGrad, Sinkhorn)

from dpgen.methods.wgan_gp import WGANGP  # noqa: E402
from dpgen.methods.dpmerf import DPMERF  # noqa: E402

METHODS["wgan_gp"] = WGANGP
METHODS["dpmerf"] = DPMERF
METHODS.update({"sinkhorn": Sinkhorn, "dpsinkhorn": DPSinkhorn, "dpsinkhorn_param": DPSinkhornParamGrad,
                "sinkhorn_adv": AdversarialSinkhorn, "dpsinkhorn_adv": AdversarialDPSinkhorn})


def load_class(target: str, key: str = "method.target"):
    """The class a dotted path ``package.module.Class`` names (``hydra.utils.get_object``), or a ValueError
    naming the bad value."""
    from dpgen.utils.objects import import_object

    return import_object(target, key)


def make_method(cfg, **kwargs) -> GenerativeMethod:
    name = cfg.method.name
    if cfg.method.target:  # a method outside dpgen (docs/EXTENDING.md)
        return load_class(cfg.method.target)(cfg, **kwargs)
    if name not in METHODS:
        raise ValueError(
            f"method={name!r} cannot train task={cfg.task.name!r} yet: trainable methods are "
            f"{', '.join(METHODS)} (the others come with their issues; task=accounting works for all)."
        )
    return METHODS[name](cfg, **kwargs)


__all__ = ["GenerativeMethod", "METHODS", "load_class", "make_method"]
