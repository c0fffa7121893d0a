"""The time-limit warning of a cluster job: checkpoint at the next step boundary, then hand over.

SLURM sends ``SIGUSR2`` (submitit's ``--signal=USR2@<delay>``) some time before a job's limit or a
preemption. submitit's own handler requeues the job and exits at once, wherever the loop is: the steps
since the last checkpoint were lost and re-run (and re-charged) by the next attempt. While training,
:class:`StopRequest` holds the signal instead: the loop finishes its step, writes a checkpoint (the ledger
on disk first, as always) and then calls the handler that was there before (submitit's: requeue and exit),
or, when there was none, exits with :data:`EXIT_REQUEUE` and a message.

``SIGTERM`` is held the same way: SLURM sends it before killing a job it requeues (``scontrol requeue``,
preemption) or cancels, ``KillWait`` seconds ahead of ``SIGKILL``, and so does a user's ``kill``; the run
checkpoints at the end of its step and exits with :data:`EXIT_REQUEUE` (submitit's own SIGTERM handler
only logs it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Dict, Optional

#: exit status of a run stopped by the signal outside submitit (EX_TEMPFAIL: "try again")
EXIT_REQUEUE = 75


def _signal_number() -> Optional[int]:
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, f"SIG{name}", None) if name else None


class StopRequest:
    """Context manager: while open, the preemption signal and SIGTERM only set :attr:`requested`."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: Optional[int] = None  # the signal that arrived
        self.signums = [s for s in (_signal_number(), signal.SIGTERM) if s is not None]
        self.previous: Dict[int, Any] = {}

    def _handler(self, signum, frame) -> None:
        self.requested = True
        self.signum = self.signum or signum

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for s in dict.fromkeys(self.signums):
                self.previous[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {} if not self.requested else self.previous

    def hand_over(self, step: int, checkpoint_path) -> None:
        """After the checkpoint: the previous handler (submitit requeues and exits), else exit 75."""
        previous = self.previous.get(self.signum)
        self._restore()
        self.previous = {}
        print(f"[dpgen] {signal.Signals(self.signum).name} received: checkpoint at step {step} written "
              f"({checkpoint_path}); the run continues from it with resume=auto", file=sys.stderr, flush=True)
        if callable(previous):
            previous(self.signum, None)  # submitit's USR2: requeue, then sys.exit; its SIGTERM: a log line
        raise SystemExit(EXIT_REQUEUE)


__all__ = ["EXIT_REQUEUE", "StopRequest"]
