"""glibc malloc settings for CPU work: freed memory stays in the process instead of going back to the kernel.

A training step or a classifier epoch on CPU allocates and frees the same large activation buffers every
step. glibc's defaults return them to the kernel (``munmap`` for blocks above its mmap threshold, heap
trimming for the rest), so every step page-faults the same memory in again: on the 2-core workplace the
non-private Sinkhorn step (DCGAN, batch 500) spent 17 of its 48 CPU seconds in the kernel. Keeping up to
:data:`KEEP_MB` of freed memory in the heap (``M_TRIM_THRESHOLD``, ``M_TOP_PAD``) and serving blocks up to
32 MiB from it (``M_MMAP_THRESHOLD``) took 20 of those steps from 23.5 to 13.8 s on 2 idle cores (``make bench``,
part ``allocator``, times both settings).

The cost is resident memory: a process may hold up to about ``2 x KEEP_MB`` it has freed.
``DPGEN_MALLOC_KEEP_MB=0`` turns this off; the user's own glibc tuning in the environment (any ``MALLOC_*``
variable, or ``GLIBC_TUNABLES`` with ``glibc.malloc.*``) also leaves malloc as it is. Only glibc (Linux) is
touched; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

KEEP_MB = 1024
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit systems
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3

_applied: Optional[int] = None


def _libc():
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only
        return libc
    except (OSError, AttributeError):
        return None


def user_tuned() -> bool:
    """The environment already tunes glibc's malloc (``MALLOC_*`` variables or ``GLIBC_TUNABLES=glibc.malloc.*``)."""
    return (any(k.startswith("MALLOC_") for k in os.environ)
            or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""))


def keep_freed_memory() -> int:
    """Apply the settings once per process; returns the MiB kept (0: left as it was)."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = 0
    raw = os.environ.get("DPGEN_MALLOC_KEEP_MB", str(KEEP_MB)).strip()
    try:
        keep = int(raw)
    except ValueError:
        raise ValueError(f"DPGEN_MALLOC_KEEP_MB={raw!r} is invalid: give the MiB of freed memory a process may "
                         f"keep (default {KEEP_MB}), or 0 to leave glibc's malloc as it is") from None
    if keep <= 0 or user_tuned():
        return 0
    libc = _libc()
    if libc is None:
        return 0
    keep_bytes = min(keep * 1024 * 1024, 2**31 - 1)  # mallopt takes an int
    ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
          and libc.mallopt(_M_TRIM_THRESHOLD, keep_bytes) == 1
          and libc.mallopt(_M_TOP_PAD, keep_bytes) == 1)
    _applied = keep if ok else 0
    return _applied


__all__ = ["keep_freed_memory", "user_tuned", "KEEP_MB"]
