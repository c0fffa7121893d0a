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

``SIGINT`` (Ctrl-C) too: the step ends, the checkpoint (with its ledger) is written, one line says how to
resume, and the run exits with :data:`EXIT_INTERRUPTED` (130, the shell's code for Ctrl-C). Without this
a Ctrl-C left the steps since the last checkpoint charged in the ledger file but never trained. A second
Ctrl-C before the checkpoint is written raises ``KeyboardInterrupt`` at once (the CLI then prints one line).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Dict, Optional

#: exit status of a run stopped by the signal outside submitit (EX_TEMPFAIL: "try again")
EXIT_REQUEUE = 75
#: exit status of a run stopped by Ctrl-C (SIGINT) after its checkpoint: 128 + SIGINT, as a shell reports it
EXIT_INTERRUPTED = 130


def _signal_number() -> Optional[int]:
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    # a signal named by the environment: not every platform defines every one (None: no handler)
    return getattr(signal, f"SIG{name}", None) if name else None


class StopRequest:
    """Context manager: while open, the preemption signal, SIGTERM and SIGINT only set :attr:`requested`."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: Optional[int] = None  # the signal that arrived
        self.signums = [s for s in (_signal_number(), signal.SIGTERM, signal.SIGINT) if s is not None]
        self.previous: Dict[int, Any] = {}

    def _handler(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.requested and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait for the step to end
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

    def hand_over(self, step: int, checkpoint_path, resume_hint: str = "resume=auto") -> None:
        """After the checkpoint: the previous handler (submitit requeues and exits), else exit 75 (130 after
        Ctrl-C). ``resume_hint``: what to add to the command to continue (the run folder's override)."""
        previous = self.previous.get(self.signum)
        self._restore()
        self.previous = {}
        print(f"[dpgen] {signal.Signals(self.signum).name} received: stopped after step {step}, checkpoint and "
              f"ledger written ({checkpoint_path}); continue with the same command and {resume_hint}",
              file=sys.stderr, flush=True)
        if self.signum == signal.SIGINT:
            raise SystemExit(EXIT_INTERRUPTED)  # Python's own SIGINT handler would only raise KeyboardInterrupt
        if callable(previous):
            previous(self.signum, None)  # submitit's USR2: requeue, then sys.exit; its SIGTERM: a log line
        raise SystemExit(EXIT_REQUEUE)


__all__ = ["EXIT_INTERRUPTED", "EXIT_REQUEUE", "StopRequest"]
