"""``import_object``: the object a dotted path names (a method class, a dataset loader), by Hydra's
``hydra.utils.get_object``, with an error that names the config key, the bad value and the fix."""

from __future__ import annotations

import logging
from typing import Any


def import_object(path: str, key: str, what: str = "package.module.Class") -> Any:
    """``hydra.utils.get_object(path)``, or a ValueError naming ``key``, ``path`` and what to give."""
    from hydra.utils import get_object

    log = logging.getLogger("hydra.utils")  # Hydra logs the failure too; our message says it once
    disabled, log.disabled = log.disabled, True
    try:
        return get_object(str(path))
    except Exception as e:  # ImportError, or ValueError for a path without a dot
        reason = " ".join(str(e).split())
        raise ValueError(f"{key}={path!r} cannot be imported ({reason}): give {what} of a module on the "
                         "Python path") from None
    finally:
        log.disabled = disabled
