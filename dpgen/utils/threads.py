"""CPU thread defaults: one dpgen process uses its share of the cores, not all of them.

torch (and the BLAS behind numpy / scikit-learn) start as many threads as the machine has cores. Two
runs on the same cores then oversubscribe them, and OpenMP's busy-waiting threads make that far worse
than sharing: on the 2-core workplace two default runs took 140 s of training instead of 27 s.

``trainer.threads=auto`` (the default): each dpgen process registers itself in a folder of this user
(``$TMPDIR/dpgen-threads-<uid>``, one file per live process id, holding ``auto`` or the thread count of
a process whose count is fixed) and uses ``max(1, (cores - threads of fixed processes) // live auto
processes)`` threads, where ``cores`` is what this process may run on
(``os.sched_getaffinity``: taskset, cgroups, SLURM's ``--cpus-per-task``). The loop re-reads the share
every few seconds (:meth:`ThreadShare.rebalance`), so a run that started alone gives cores back when a
second one starts. ``OMP_NUM_THREADS`` set in the environment wins over ``auto``; an integer sets the
count.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Optional, Union


def cores_available() -> int:
    """The cores this process may run on (affinity mask; else os.cpu_count())."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


#: the ThreadShare blocks open in this process, innermost last (:func:`rebalance_active`)
_ACTIVE: list = []


def rebalance_active() -> None:
    """Re-read the share of the innermost open :class:`ThreadShare`, if any (rate-limited like
    :meth:`ThreadShare.rebalance`): long work outside the training loop (the downstream classifiers' epochs)
    calls it, so a process that entered while alone gives cores back when another one starts."""
    if _ACTIVE:
        _ACTIVE[-1].rebalance()


class ThreadShare:
    """Registers this process and sets torch's (and the BLAS pools') thread count to its share."""

    def __init__(self, setting: Union[str, int, None] = "auto", folder: Optional[Path] = None,
                 every_s: float = 5.0):
        self.setting = "auto" if setting is None else setting
        if self.setting != "auto":
            try:
                self.setting = int(self.setting)
            except (TypeError, ValueError):
                raise ValueError(f"trainer.threads={setting!r} is invalid: use auto or a positive integer") from None
            if self.setting < 1:
                raise ValueError(f"trainer.threads={setting!r} is invalid: use auto or a positive integer")
        self.env_fixed = self.setting == "auto" and bool(os.environ.get("OMP_NUM_THREADS"))
        self.folder = Path(folder) if folder is not None else (
            Path(tempfile.gettempdir()) / f"dpgen-threads-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
        self.every_s = every_s
        self._mark: Optional[Path] = None
        self._last = 0.0
        self.threads: Optional[int] = None

    @property
    def managed(self) -> bool:
        return self.setting == "auto" and not self.env_fixed

    def live(self) -> "tuple[int, int]":
        """(auto processes, threads held by fixed ones) among the live dpgen processes registered here,
        this one included; marks of dead processes are removed."""
        auto, fixed = 0, 0
        for p in self.folder.glob("*"):
            try:
                pid = int(p.name)
                held = p.read_text().strip()
            except (ValueError, OSError):
                continue
            if not _alive(pid):
                p.unlink(missing_ok=True)
            elif held.isdigit():
                fixed += int(held)
            else:
                auto += 1
        return max(1, auto), fixed

    def share(self) -> int:
        if isinstance(self.setting, int):
            return self.setting
        auto, fixed = self.live()
        return max(1, (cores_available() - fixed) // auto)

    def _held(self) -> str:
        """What this process's mark says: "auto", or the threads it holds whatever the others do."""
        if isinstance(self.setting, int):
            return str(self.setting)
        if self.env_fixed:
            import torch

            return str(torch.get_num_threads())
        return "auto"

    def _apply(self, n: int) -> None:
        import torch

        if n != self.threads:
            torch.set_num_threads(n)
            try:  # numpy / scikit-learn BLAS and OpenMP pools of this process
                from threadpoolctl import threadpool_limits

                threadpool_limits(n)
            except Exception:  # noqa: BLE001 - threadpoolctl is optional
                pass
            self.threads = n

    def __enter__(self) -> "ThreadShare":
        import torch

        from dpgen.utils.allocator import keep_freed_memory

        keep_freed_memory()  # CPU steps stop page-faulting their buffers in again (dpgen/utils/allocator.py)
        self._before = torch.get_num_threads()  # restored at exit: a caller's own setting is left as it was
        try:  # every dpgen process registers: an auto one shares the cores the fixed ones leave
            self.folder.mkdir(parents=True, exist_ok=True)
            self._mark = self.folder / str(os.getpid())
            self._mark.write_text(self._held())
        except OSError:
            self._mark = None
        if self.managed or isinstance(self.setting, int):
            self._apply(self.share())
            self._last = time.monotonic()
        _ACTIVE.append(self)
        return self

    def rebalance(self) -> None:
        """Re-read the share (at most every ``every_s`` seconds; a directory listing, no device work)."""
        if not self.managed:
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._apply(self.share())

    def __exit__(self, *exc) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.threads is not None and self.threads != self._before:
            import torch

            torch.set_num_threads(self._before)
            self.threads = None
        if self._mark is not None:
            self._mark.unlink(missing_ok=True)
            self._mark = None

    def describe(self) -> str:
        import torch

        how = ("OMP_NUM_THREADS" if self.env_fixed else "auto: this process's share of "
               f"{cores_available()} cores" if self.managed else "trainer.threads")
        return f"{torch.get_num_threads()} CPU threads ({how})"


__all__ = ["ThreadShare", "cores_available"]
