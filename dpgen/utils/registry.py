"""One way to map a name to an object: :class:`Registry` (timm's ``register_model`` / ``create_model`` /
``list_models`` in one small class).

Every named thing of dpgen lives in one: methods (one registry per task), datasets, generators, downstream
classifiers, loggers, accountants, tasks and tables. Each has the same four calls::

    GENERATORS = Registry("generator", key="model.generator", package="dpgen.models")

    @GENERATORS.register("dct")          # or GENERATORS.register("dct", DCTGenerator)
    class DCTGenerator(...): ...

    GENERATORS.names()                   # ('biggan32', 'dcgan', ..., 'dct')
    GENERATORS.lookup("dct")             # the class, or one clear error naming the choices
    GENERATORS.build("dct", code_dim=...)  # lookup(name)(**kwargs)

``package`` makes the registry find its built-in entries itself: the first lookup imports every module of that
package (``pkgutil``), so a module that registers something needs no hand-kept import list. A registry is a
read-only mapping (``name in R``, ``R[name]``, ``list(R)``) in registration order.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, Type


class Registry(Mapping):
    """Names -> objects of one kind, with one error for an unknown name.

    ``kind`` names the thing in messages ("generator"); ``key`` is the config key a user sets ("model.generator");
    ``package`` (optional) is imported module by module on first lookup; ``finder`` (optional) instead yields
    the ``(name, object)`` entries found elsewhere (the YAML files of a config folder), also on first lookup;
    ``error`` is the exception type raised for an unknown name (a ``ValueError`` subclass); ``extra`` lists
    accepted names that are not entries (e.g. ``auto``), for the message only."""

    def __init__(self, kind: str, key: Optional[str] = None, package: Optional[str] = None,
                 error: Type[ValueError] = ValueError, extra: Tuple[str, ...] = (),
                 finder: Optional[Callable[[], Iterable[Tuple[str, Any]]]] = None):
        self.kind, self.key, self.package, self.error, self.extra = kind, key or kind, package, error, tuple(extra)
        self.finder = finder
        self._entries: Dict[str, Any] = {}
        self._discovered = package is None and finder is None

    # ---- filling -------------------------------------------------------------------------------------------
    def register(self, name: str, obj: Any = None, *, replace: bool = False):
        """Register ``obj`` under ``name`` (returns it), or, without ``obj``, a decorator that does. A second,
        different object under one name is an error unless ``replace``."""

        def add(o):
            old = self._entries.get(name)
            if old is not None and old is not o and not replace:
                raise ValueError(f"{self.kind} {name!r} is registered twice: {_label(old)} and {_label(o)}")
            self._entries[name] = o
            return o

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> Any:
        """Remove ``name`` (a test's temporary entry); returns what it held."""
        return self._entries.pop(name)

    def discover(self) -> "Registry":
        """Import every module of ``package`` once (each registers its entries when imported)."""
        if not self._discovered:
            self._discovered = True  # first: a module that looks itself up while importing must not recurse
            if self.finder is not None:
                for name, obj in self.finder():
                    self.register(name, obj)
                return self
            pkg = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{self.package}."):  # a package: it has one
                if not info.name.rsplit(".", 1)[-1].startswith("_"):
                    importlib.import_module(info.name)
        return self

    # ---- reading -------------------------------------------------------------------------------------------
    def names(self) -> Tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self.discover()._entries)

    def choices(self) -> str:
        """``"a, b or c"``: what a user may write for ``key``."""
        names = [*self.extra, *self.names()]
        if len(names) < 2:
            return names[0] if names else "(none registered)"
        return ", ".join(names[:-1]) + " or " + names[-1]

    def unknown(self, name: Any) -> ValueError:
        """The one error for a name that is not registered: the bad value, the choices, the closest name."""
        from dpgen.utils.suggest import closest

        close = closest(str(name), [*self.extra, *self.names()])
        hint = f" (did you mean {close}?)" if close else ""
        return self.error(f"{self.key}={name!r} is not a known {self.kind}{hint}: choose one of {self.choices()}.")

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get, kept for `name in` style lookups
        return self.discover()._entries.get(name, default)

    def __getitem__(self, name: str) -> Any:
        entries = self.discover()._entries
        if name not in entries:
            raise self.unknown(name)
        return entries[name]

    def lookup(self, name: str) -> Any:
        """``self[name]``: the object, or :meth:`unknown`'s error."""
        return self[name]

    def build(self, name: str, *args, **kwargs) -> Any:
        """``lookup(name)(*args, **kwargs)``."""
        return self.lookup(name)(*args, **kwargs)

    def __contains__(self, name: object) -> bool:
        return name in self.discover()._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"


def _label(obj: Any) -> str:
    return obj.__qualname__ if isinstance(obj, type) else repr(obj)

