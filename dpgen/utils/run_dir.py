"""One live run per folder: a lock taken atomically when a run starts.

Users start runs in parallel (table drivers, shell loops, job arrays), and the default folder
``outputs/<date>/<H-M-S>`` is the same for two runs started in the same second. A run therefore
claims its folder with ``<run>/.lock`` (created with ``O_CREAT | O_EXCL``: only one process can) and
gives it back when it ends.

* A fresh run (``resume=false``) whose folder is held by another live run moves to the first free
  sibling ``<run>-1``, ``<run>-2``, ... and says so: both runs complete, in two folders.
* A resumed run (``resume=true|auto``) continues that folder's checkpoint, so it must have that
  folder: if another live run holds it, it stops with an error naming the holder.
* A lock left by a run that died (its process is gone, e.g. after SIGKILL or a SLURM time limit) is
  stale and is taken over. On a cluster the lock also records the SLURM job (``SLURM_JOB_ID``, or the
  array's ``SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID``) and its attempt (``SLURM_RESTART_COUNT``): a lock
  of an earlier attempt of the same job is stale wherever that attempt ran (SLURM never runs two attempts
  of one job at once), so a job requeued to another node resumes. Any other lock written on another
  host is assumed alive.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".lock"


class RunDirBusy(RuntimeError):
    """The run folder is held by another live run."""


def _slurm_job() -> dict:
    """This process's SLURM job and attempt (empty outside SLURM)."""
    env = os.environ
    job = (f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}" if env.get("SLURM_ARRAY_JOB_ID")
           else env.get("SLURM_JOB_ID"))
    if not job:
        return {}
    try:
        attempt = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
    except ValueError:
        attempt = 0
    return {"slurm_job": job, "slurm_attempt": attempt}


def _alive(holder: dict) -> bool:
    mine = _slurm_job()
    if mine and holder.get("slurm_job") == mine["slurm_job"]:
        try:
            if int(holder.get("slurm_attempt", 0)) < mine["slurm_attempt"]:
                return False  # an earlier attempt of this job: SLURM ended it before requeueing this one
        except (TypeError, ValueError):
            pass
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process: cannot check, assume it lives
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError):
        return True
    return True


def _try_lock(folder: Path) -> bool:
    """Take ``folder``'s lock; False when a live run holds it (a stale lock is taken over)."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_NAME
    me = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), **_slurm_job()})
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(lock.read_text() or "{}")
            except (OSError, json.JSONDecodeError):
                holder = {}
            if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
                return True  # this process holds it already
            if not holder or _alive(holder):
                return False
            lock.unlink(missing_ok=True)  # stale: its run is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        atexit.register(lambda: _release(lock, me))
        return True
    return False


def _release(lock: Path, me: str) -> None:
    try:
        if lock.read_text() == me:
            lock.unlink()
    except OSError:
        pass


def claim_run_dir(folder, resume) -> Path:
    """The folder this run writes to, locked for it (see the module doc)."""
    folder = Path(folder)
    if _try_lock(folder):
        return folder
    if resume:
        holder = (folder / LOCK_NAME).read_text()
        raise RunDirBusy(f"run folder {folder} is held by another live run ({holder}): resume={resume} would "
                         "continue its ledger from two processes. Wait for it to end, or choose another folder.")
    for i in range(1, 1000):
        other = folder.with_name(f"{folder.name}-{i}")
        if _try_lock(other):
            print(f"[dpgen] {folder} is in use by another live run: this run writes to {other}")
            return other
    raise RunDirBusy(f"no free run folder beside {folder}")


@contextmanager
def holding_run_dir(folder):
    """``with holding_run_dir(folder):`` the body runs with ``folder``'s lock, whoever started the run: the CLI
    (which claimed it already: kept), a table driver or the Python API (``dpgen.tasks.run``; taken here and
    given back when the body ends). A live holder in another process stops it with :class:`RunDirBusy`
    before anything is read or written there: two processes never continue one ledger."""
    folder = Path(folder)
    lock = folder / LOCK_NAME
    me = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), **_slurm_job()})
    try:
        held_before = lock.read_text() == me
    except OSError:
        held_before = False
    if not _try_lock(folder):
        try:
            holder = lock.read_text()
        except OSError:
            holder = "?"
        raise RunDirBusy(f"run folder {folder} is held by another live run ({holder}): a second process there "
                         "would continue its ledger twice. Wait for that run to end (a table driver's cell: run "
                         "each cell in one process), or give this run another folder.")
    try:
        yield folder
    finally:
        if not held_before:
            _release(lock, me)


__all__ = ["LOCK_NAME", "RunDirBusy", "claim_run_dir", "holding_run_dir"]


def run_folder(output_dir, default: str) -> Path:
    """The run's folder: ``output_dir``, else ``outputs/<default>``."""
    return Path(output_dir) if output_dir is not None else Path("outputs") / default


def start_run_dir(cfg, output_dir, default: str) -> Path:
    """The run folder (``output_dir``, else ``outputs/<default>``), created, with the run's resolved
    ``config.yaml`` written atomically: every task's folder says what ran."""
    from omegaconf import OmegaConf

    from dpgen.utils.io import atomic_write_text

    out = run_folder(output_dir, default)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    return out


#: what makes a run folder worth keeping after an error (anything a user could look at or resume from)
RESULTS = ("metrics.json", "accounting.json", "checkpoints", "samples.png", "release", "metrics.jsonl")


def discard_if_empty(folder, existed=None) -> bool:
    """Remove a run folder that holds no result (only Hydra's ``.hydra/``, the log, ``config.yaml``, a lock):
    what a config error left. ``existed``: the names the folder held before this process wrote into it (a
    folder the user made): then only what this process added is removed and the folder stays. Returns whether
    anything was removed."""
    import shutil

    folder = Path(folder)
    if not folder.is_dir() or any((folder / name).exists() for name in RESULTS):
        return False
    allowed = {".hydra", "config.yaml", LOCK_NAME, "run.log", "cli.log"}
    if any(p.name not in allowed for p in folder.iterdir() if existed is None or p.name not in existed):
        return False
    if existed is not None:
        added = [p for p in folder.iterdir() if p.name not in existed]
        for p in added:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        return bool(added)
    shutil.rmtree(folder, ignore_errors=True)
    try:  # the date folder above it, when this was its only run
        folder.parent.rmdir()
    except OSError:
        pass
    return True


class _Tee:
    """A text stream that also appends finished lines to a file (a progress bar's ``\r`` redraws: only
    their last state)."""

    def __init__(self, stream, file) -> None:
        self.stream, self.file, self.pending = stream, file, ""

    def write(self, text: str) -> int:
        n = self.stream.write(text)
        self.pending += text
        if "\n" in self.pending:
            lines, self.pending = self.pending.rsplit("\n", 1)
            self.file.write("".join(line.rsplit("\r", 1)[-1] + "\n" for line in lines.split("\n")))
            self.file.flush()
        return n

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        """Closing the tee closes nothing: a logging handler created while the run printed through it (absl's,
        when a run imports it) keeps it as its stream, and closes its stream when the next sweep job reconfigures
        logging unless that stream is a TTY. Passed on, that close shut the process's stderr under a sweep whose
        output goes to a file or a pipe (issue 84: `python run.py -m ... > log` lost sys.stderr in job 1)."""
        self.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)  # a stream stand-in: everything else is the wrapped stream's


class RunLog:
    """``with RunLog(folder):`` what the run prints (stdout and stderr) is also appended to
    ``<folder>/run.log``, the file Hydra's job logging writes too."""

    def __init__(self, folder) -> None:
        self.path = Path(folder) / "run.log"

    def __enter__(self) -> "RunLog":
        import sys

        self.file = open(self.path, "a")
        self.saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(sys.stdout, self.file), _Tee(sys.stderr, self.file)
        return self

    def __exit__(self, *exc) -> None:
        import sys

        for tee in (sys.stdout, sys.stderr):
            if isinstance(tee, _Tee) and tee.pending:
                self.file.write(tee.pending.rsplit("\r", 1)[-1] + "\n")
        sys.stdout, sys.stderr = self.saved
        self.file.close()
