"""The time-limit warning of a cluster job: checkpoint at the next step boundary, then hand over.

SLURM sends ``SIGUSR2`` (submitit's ``--signal=USR2@<delay>``) some time before a job's limit or a
preemption. submitit's own handler requeues the job and exits at once, wherever the loop is: the steps
since the last checkpoint were lost and re-run (and re-charged) by the next attempt. While training,
:class:`StopRequest` holds the signal instead: the loop finishes its step, writes a checkpoint (the ledger
on disk first, as always) and then calls the handler that was there before (submitit's: requeue and exit),
or, when there was none, exits with :data:`EXIT_REQUEUE` and a message.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Optional

#: exit status of a run stopped by the signal outside submitit (EX_TEMPFAIL: "try again")
EXIT_REQUEUE = 75


def _signal_number() -> Optional[int]:
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, f"SIG{name}", None) if name else None


class StopRequest:
    """Context manager: while open, the preemption signal only sets :attr:`requested`."""

    def __init__(self) -> None:
        self.requested = False
        self.signum = _signal_number()
        self.previous: Any = None
        self.installed = False

    def _handler(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> "StopRequest":
        if self.signum is not None and threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(self.signum, self._handler)
            self.installed = True
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        if self.installed:
            signal.signal(self.signum, self.previous)
            self.installed = False

    def hand_over(self, step: int, checkpoint_path) -> None:
        """After the checkpoint: the previous handler (submitit requeues and exits), else exit 75."""
        self._restore()
        print(f"[dpgen] {signal.Signals(self.signum).name} received: checkpoint at step {step} written "
              f"({checkpoint_path}); the run continues from it with resume=auto", file=sys.stderr, flush=True)
        if callable(self.previous):
            self.previous(self.signum, None)  # submitit: requeue, then sys.exit
        raise SystemExit(EXIT_REQUEUE)


__all__ = ["EXIT_REQUEUE", "StopRequest"]
