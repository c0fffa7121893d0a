"""dpgen/slurm.py without a cluster: the request check against sinfo's answer, the pending report, job names."""

import pytest
from omegaconf import OmegaConf

from dpgen import slurm

SINFO = "debug*|2|(null)\ngpu|16|gpu:a100:4\n"


@pytest.fixture
def fake_sinfo(monkeypatch):
    monkeypatch.setattr(slurm, "_run", lambda cmd: SINFO if "-p" not in cmd else
                        "\n".join(l for l in SINFO.splitlines() if l.split("|")[0].rstrip("*") == cmd[-1]))


def _launcher(**kw):
    return OmegaConf.create({"partition": None, "gpus_per_node": None, "cpus_per_task": 1, **kw})


def test_a_gpu_request_on_a_partition_without_gpus_is_refused_with_the_fix(fake_sinfo):
    why = slurm.check_request(_launcher(gpus_per_node=1))
    assert "gpus_per_node=1, but the default partition (debug) has no GPUs" in why and "slurm_cpu" in why
    assert slurm.check_request(_launcher(gpus_per_node=1, partition="gpu")) is None


def test_more_cpus_than_the_largest_node_is_refused(fake_sinfo):
    why = slurm.check_request(_launcher(cpus_per_task=8))
    assert "cpus_per_task=8, but the largest node of the default partition (debug) has 2 CPUs" in why
    assert "cpus_per_task=2" in why
    assert slurm.check_request(_launcher(cpus_per_task=2)) is None
    assert slurm.check_request(_launcher(cpus_per_task=8, partition="gpu")) is None


def test_without_sinfo_nothing_is_refused(monkeypatch):
    monkeypatch.setattr(slurm, "_run", lambda cmd: None)
    assert slurm.check_request(_launcher(gpus_per_node=4, cpus_per_task=512)) is None


def test_the_pending_report():
    jobs = [{"id": "5_0", "state": "RUNNING", "reason": "None"},
            {"id": "5_1", "state": "PENDING", "reason": "Resources"},
            {"id": "5_2", "state": "PENDING", "reason": "BeginTime"}]
    assert slurm.describe(jobs) == "2 pending (BeginTime: 1, Resources: 1), 1 running"
    assert slurm.describe([]) == ""


def test_jobs_are_named_after_the_sweep_folder():
    from pathlib import Path

    from dpgen.config import register_configs

    register_configs()  # registers the dpgen.basename resolver
    cfg = OmegaConf.create({"sweep": "/x/sweeps/eps_grid", "name": "dpgen_${dpgen.basename:${sweep}}"})
    assert cfg.name == "dpgen_eps_grid"
    conf = Path(__file__).resolve().parents[1] / "conf" / "hydra" / "launcher"
    for preset in ("slurm", "slurm_local"):
        assert OmegaConf.load(conf / f"{preset}.yaml")._get_node("name")._value() == \
            "dpgen_${dpgen.basename:${hydra.sweep.dir}}"


def test_the_watcher_pickles_without_its_thread():
    import pickle

    w = slurm.SlurmWatch(interval_s=5)
    w2 = pickle.loads(pickle.dumps(w))
    assert w2.interval_s == 5 and w2._thread is None
