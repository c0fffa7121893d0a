"""A SLURM sweep that says what it waits for (``hydra.callbacks.slurm_watch`` in conf/config.yaml).

Hydra's submitit launcher submits a sweep as one job array and then waits for the results without a word.
Before submission :func:`check_request` compares the request with the partition (``sinfo``): GPUs asked
from a partition that has none, or more CPUs per task than its largest node has, would leave sbatch
failing with "Invalid generic resource (gres) specification" or the jobs pending forever; they stop the
sweep with ``dpgen: error:`` naming the value and the fix (``hydra/launcher=slurm_cpu``, or the override).
While the sweep runs, :class:`SlurmWatch` polls ``squeue`` for the sweep's jobs (named after its folder,
``dpgen_<sweep folder name>``) and prints a line whenever their states change: how many run and how many
are pending, with SLURM's reason (Resources, Priority, BeginTime after a requeue, ...).

Only active when the launcher is submitit's SLURM launcher; outside a cluster it does nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object


def basename(path) -> str:
    """The last part of a path (the ``dpgen.basename`` resolver: job names after the sweep folder)."""
    return Path(str(path)).name


def _run(cmd: List[str]) -> Optional[str]:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def partition_nodes(partition: Optional[str]) -> List[Tuple[str, int, str]]:
    """(partition, CPUs per node, GRES) for each node group of ``partition`` (every partition when None)."""
    out = _run(["sinfo", "-h", "-o", "%P|%c|%G", *(["-p", partition] if partition else [])])
    rows = []
    for line in (out or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1].rstrip("+").isdigit():
            rows.append((parts[0].rstrip("*"), int(parts[1].rstrip("+")), parts[2]))
    if not partition:  # the default partition is the one sinfo marks with *
        default = [line.split("|")[0].rstrip("*") for line in (out or "").splitlines() if "*" in line.split("|")[0]]
        rows = [r for r in rows if not default or r[0] == default[0]]
    return rows


def check_request(launcher) -> Optional[str]:
    """Why this SLURM request cannot run on its partition, or None (also when sinfo is not there)."""
    partition = launcher.get("partition")
    nodes = partition_nodes(partition)
    if not nodes:
        return None
    where = f"partition {partition}" if partition else f"the default partition ({nodes[0][0]})"
    gpus = launcher.get("gpus_per_node")
    if gpus and all("gpu" not in gres for _, _, gres in nodes):
        return (f"hydra.launcher.gpus_per_node={gpus}, but {where} has no GPUs (sinfo GRES: "
                f"{', '.join(sorted({g for _, _, g in nodes}))}): use hydra/launcher=slurm_cpu, or "
                "hydra.launcher.gpus_per_node=null, or a GPU partition (hydra.launcher.partition=<name>)")
    cpus = launcher.get("cpus_per_task")
    most = max(c for _, c, _ in nodes)
    if cpus and int(cpus) > most:
        return (f"hydra.launcher.cpus_per_task={cpus}, but the largest node of {where} has {most} CPUs: the jobs "
                f"would stay pending forever. Use hydra.launcher.cpus_per_task={most} (or fewer), or "
                "hydra/launcher=slurm_cpu")
    return None


def _is_slurm(config) -> bool:
    target = str(config.hydra.launcher.get("_target_", ""))
    return target.endswith("SlurmLauncher")


class SlurmWatch(Callback):
    """Checks a SLURM sweep's request before submission and reports its jobs' states while it waits."""

    def __init__(self, interval_s: float = 20.0) -> None:
        self.interval_s = float(interval_s)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # the launcher pickles Hydra's callbacks with each job: the watcher's thread stays in this process
    def __getstate__(self):
        return {"interval_s": self.interval_s}

    def __setstate__(self, state) -> None:
        self.__init__(**state)

    def on_multirun_start(self, config, **kwargs) -> None:
        if not _is_slurm(config):
            return
        why = check_request(config.hydra.launcher)
        if why:
            print(f"dpgen: error: {why}", file=sys.stderr)
            sys.exit(2)
        name = str(config.hydra.launcher.name)
        print(f"[dpgen] SLURM jobs of this sweep are named {name} (squeue -n {name}); the summary follows when "
              "they end", flush=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, args=(name,), daemon=True)
        self._thread.start()

    def on_multirun_end(self, config, **kwargs) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _watch(self, name: str) -> None:
        last = None
        while not self._stop.wait(self.interval_s):
            line = describe(jobs_of(name))
            if line and line != last:
                print(f"[dpgen] SLURM: {line}", flush=True)
                last = line


def jobs_of(name: str) -> List[Dict[str, str]]:
    out = _run(["squeue", "-h", "-n", name, "-o", "%i|%T|%r"]) or ""
    jobs = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            jobs.append({"id": parts[0], "state": parts[1], "reason": parts[2]})
    return jobs


def describe(jobs: List[Dict[str, str]]) -> str:
    """'1 running, 2 pending (Resources: 1, BeginTime: 1)' for squeue's rows of a sweep's jobs."""
    if not jobs:
        return ""
    states = Counter(j["state"] for j in jobs)
    reasons = Counter(j["reason"] for j in jobs if j["state"] == "PENDING")
    parts = []
    for state, n in sorted(states.items()):
        text = f"{n} {state.lower()}"
        if state == "PENDING" and reasons:
            text += " (" + ", ".join(f"{r}: {c}" for r, c in sorted(reasons.items())) + ")"
        parts.append(text)
    return ", ".join(parts)


__all__ = ["SlurmWatch", "basename", "check_request", "describe"]
