"""The base of every method's settings (``conf/method/<name>.yaml``) and the error a bad value raises.

A method's settings are a dataclass subclassing :class:`MethodConfig`, defined beside the method's class
(``Settings = <dataclass>`` on the class); ``dpgen.config.register_configs`` registers each one as
Hydra's schema ``schema/method/<name>``, and its ``__post_init__`` names a bad value and the fix.
Imports nothing of dpgen (it sits under both ``dpgen.config`` and ``dpgen.methods``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

SAMPLINGS = ("without_replacement", "poisson")


class ConfigError(ValueError):
    """A config value is invalid; the message names the key and the fix."""


def choice(value, name: str, choices) -> None:
    """Refuse ``value`` unless it is one of ``choices``, naming the key, the choices and the nearest one."""
    if value not in choices:
        import difflib

        near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        raise ConfigError(f"{name}={value!r} is invalid: choose one of {', '.join(map(str, choices))}."
                          + (f" Did you mean {near[0]}?" if near else ""))


@dataclass
class MethodConfig:
    """A method: its loss, its privacy mechanism, and the sampling scheme its accountant uses."""

    name: str = MISSING
    private: bool = True
    #: sampling scheme of the real batches (decides the accountant's amplification)
    sampling: str = "without_replacement"
    #: dotted path of the method's class (``package.module.Class``); null: dpgen's own method of this
    #: name. A new method is one Python file plus one YAML naming it here (docs/EXTENDING.md)
    target: Optional[str] = None

    def __post_init__(self) -> None:
        choice(self.sampling, "method.sampling", SAMPLINGS)


__all__ = ["SAMPLINGS", "ConfigError", "MethodConfig", "choice"]
