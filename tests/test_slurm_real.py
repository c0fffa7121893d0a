"""Sweeps on a real SLURM cluster (``make test-slurm``; slow): submission as a job array, a time-limit
requeue, an ``scontrol requeue`` whose first attempt left its lock as if it had run on another node, each
job's ledger and epsilon against an uninterrupted run of the same settings, and the sweep summary.

It uses the cluster this machine already runs (``sinfo`` answers), else starts the single-node cluster of
``../shared/tools/slurm/start-local-slurm.sh`` (needs root); without either it is skipped with the reason.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
START = ROOT.parent / "shared" / "tools" / "slurm" / "start-local-slurm.sh"

pytestmark = pytest.mark.slow

# a generation run of the embedded default (DP-Sinkhorn on digits; a budget of 40 lets it run 6,000 steps), no evaluation
RUN = ["method=dpsinkhorn", "dataset=digits", "task.eval_models=[]", "trainer.progress=false",
       "trainer.log_every=100000", "trainer.threads=1", "privacy.epsilon=40"]
LONG = 6000  # steps of the interrupted jobs: 60-100 s of training here, more than one attempt under a 1-min limit


def _sinfo_ok() -> bool:
    if shutil.which("sinfo") is None:
        return False
    p = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=30)
    return p.returncode == 0 and "up" in p.stdout


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    if not _sinfo_ok():
        if not START.exists():
            pytest.skip(f"no SLURM cluster answers sinfo and {START} is not there")
        if os.geteuid() != 0:
            pytest.skip(f"no SLURM cluster answers sinfo, and starting {START.name} needs root")
        p = subprocess.run(["bash", str(START)], capture_output=True, text=True, timeout=300)
        if p.returncode != 0 or not _sinfo_ok():
            pytest.skip(f"{START.name} could not start a cluster: {p.stdout[-500:]} {p.stderr[-500:]}")
    return True


def _sweep(sweep_dir: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "run.py", "-m", "hydra/launcher=slurm_cpu", f"hydra.sweep.dir={sweep_dir}", *RUN,
         *overrides], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(p: subprocess.Popen, timeout: float = 600) -> str:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out[-4000:]
    return out


def _reference(tmp: Path, steps: int) -> dict:
    """The same settings run uninterrupted, here."""
    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    return run_task(compose_config([*RUN, f"trainer.steps={steps}"]), tmp / f"ref_{steps}")


def _squeue(name: str):
    p = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i|%T|%r"], capture_output=True, text=True)
    return [line.split("|") for line in p.stdout.split()]


def _wait(cond, timeout: float, what: str, step: float = 1.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        value = cond()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


def _attempts(job_id: str) -> int:
    """Attempts of a SLURM job as sacct counts them (a requeued job has a REQUEUED/PREEMPTED/TIMEOUT row)."""
    p = subprocess.run(["sacct", "-n", "-D", "-X", "-j", job_id, "-o", "State"], capture_output=True, text=True)
    return len(p.stdout.split())


def test_sweep_time_limit_requeue_and_scontrol_requeue(cluster, tmp_path):
    t0 = time.time()
    refs = {s: _reference(tmp_path, s)["privacy"] for s in (300, 600, LONG)}

    # 1. a 2-job sweep, the job array of one submission; then its summary
    sweep = tmp_path / "sweep"
    out = _finish(_sweep(sweep, "trainer.steps=300,600"))
    assert f"SLURM jobs of this sweep are named dpgen_{sweep.name}" in out
    for job, steps in (("0", 300), ("1", 600)):
        m = json.loads((sweep / job / "metrics.json").read_text())
        assert m["steps"] == steps and m["privacy"]["epsilon_spent"] == refs[steps]["epsilon_spent"]
        assert json.loads((sweep / job / "checkpoints" / "ledger.json").read_text())["steps"] == steps
    summary = (sweep / "sweep_summary.csv").read_text()
    assert summary.count(",done,") == 2, summary
    assert (sweep / "sweep_summary.png").is_file()  # one numeric swept value: trainer.steps

    # 2. a time limit of one minute, its USR2 sent 25 s before (SLURM may send it up to 30 s earlier): checkpoint, requeue, resume, until done
    limit = tmp_path / "limit"
    p = _sweep(limit, f"trainer.steps={LONG}", "trainer.checkpoint_every=100000", "hydra.launcher.timeout_min=1",
               "hydra.launcher.signal_delay_s=25", "seed=0,1")
    out = _finish(p, timeout=900)
    logs = "".join(f.read_text(errors="replace") for f in (limit / ".submitit").rglob("*.err"))
    assert "USR2 received: checkpoint at step" in logs, logs[-3000:]
    for job in ("0", "1"):
        m = json.loads((limit / job / "metrics.json").read_text())
        assert m["steps"] == LONG and m["privacy"]["private_steps"] == LONG  # no step charged twice
        assert m["privacy"]["epsilon_spent"] == refs[LONG]["epsilon_spent"]

    # 3. scontrol requeue: SIGTERM, checkpoint at the step's end, exit; the first attempt's lock is planted as
    # if that attempt had been hard-killed on another node; the second attempt must take it over and finish
    req = tmp_path / "requeue"
    p = _sweep(req, f"trainer.steps={LONG}", "trainer.checkpoint_every=500")
    name = f"dpgen_{req.name}"
    ledger = req / "0" / "checkpoints" / "ledger.json"
    _wait(lambda: ledger.exists() and json.loads(ledger.read_text())["steps"] >= 1000, 300, "1,000 steps")
    job_id = _squeue(name)[0][0]
    subprocess.run(["scontrol", "requeuehold", job_id], check=True)
    _wait(lambda: _squeue(name) and _squeue(name)[0][1] == "PENDING" and not (req / "0" / ".lock").exists(), 120,
          "the first attempt to end and release its lock")
    charged = json.loads(ledger.read_text())["steps"]
    (req / "0" / ".lock").write_text(json.dumps({"pid": 1, "host": "node-b-" + socket.gethostname(),
                                                 "slurm_job": job_id, "slurm_attempt": 0}))
    subprocess.run(["scontrol", "release", job_id], check=True)
    _finish(p, timeout=600)
    m = json.loads((req / "0" / "metrics.json").read_text())
    assert m["steps"] == LONG and m["privacy"]["private_steps"] == LONG
    assert m["privacy"]["epsilon_spent"] == refs[LONG]["epsilon_spent"]
    assert m["attempts"] == 2  # the resumed run's metrics cover both attempts
    assert _attempts(job_id.split("_")[0]) >= 1
    assert 1000 <= charged < LONG
    print(f"\nreal SLURM: sweep, time-limit requeue, scontrol requeue (first attempt stopped at {charged} steps) "
          f"in {time.time() - t0:.0f} s; epsilon {m['privacy']['epsilon_spent']:.6f} = uninterrupted "
          f"{refs[LONG]['epsilon_spent']:.6f}")
