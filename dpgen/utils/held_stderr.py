"""stderr held back while Hydra composes a run's config (``dpgen.cli``), released when the run starts
(``dpgen.app``): a refused override's Hydra message is replaced by dpgen's, one message, the closest key or choice."""

from __future__ import annotations

import sys
from typing import List, Optional


class HeldStderr:
    """stderr held back while Hydra composes the config: a refused override's Hydra message is replaced by dpgen's
    (the closest key or choice), everything else is passed on once the run starts or Hydra returns."""

    def __init__(self, real) -> None:
        self.real, self.held, self.open = real, [], True

    def write(self, text: str) -> int:
        if self.open:
            self.held.append(text)
        else:
            self.real.write(text)
        return len(text)

    def flush(self) -> None:
        if not self.open:
            self.real.flush()

    def release(self, keep: bool = True) -> None:
        if self.open:
            self.open = False
            if keep:
                self.real.write("".join(self.held))
            self.held = []
        if sys.stderr is self:
            sys.stderr = self.real

    def __getattr__(self, name):
        return getattr(self.real, name)  # a stream stand-in: everything else is the real stream's


#: the held stderr of this process's run (one at most)
_HELD: List[HeldStderr] = []


def hold_stderr(keep_going: bool = False) -> Optional[HeldStderr]:
    """Hold this process's stderr (none with ``keep_going``: a sweep prints as it goes); the held object."""
    if keep_going:
        return None
    held = HeldStderr(sys.stderr)
    sys.stderr = held
    _HELD[:] = [held]
    return held


def release_stderr() -> None:
    """Pass on what Hydra printed while composing, and everything after it (``dpgen.app.hydra_main`` calls it)."""
    while _HELD:
        _HELD.pop().release()
