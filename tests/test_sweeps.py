"""Hydra sweeps (multirun) with the basic, submitit-local and joblib launchers; SLURM preset composes.

Each sweep is two ``task=accounting`` jobs (a few seconds each) run as ``python run.py -m ...``
with ``DPGEN_OUTPUTS`` pointed at tmp_path; every job folder must hold an accounting.json.
The SLURM preset is only composed and turned into an sbatch script, never submitted.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from dpgen.config import register_configs

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
LAUNCHERS = CONF / "hydra" / "launcher"

# two tiny accounting jobs (cross_check off: it only repeats the accounting with other tools)
SWEEP = [
    "task=accounting",
    "method=dpsinkhorn",
    "dataset=mnist",
    "trainer.steps=100",
    "trainer.batch_size=50",
    "task.cross_check=false",
    "privacy.accountant=rdp",  # PLD's search of the steps in budget at these small q takes 10-20 s a job
    "method.noise_multiplier=1.0,2.0",
]

register_configs()


def _sweep(tmp_path, *overrides, timeout=300):
    env = {**os.environ, "DPGEN_OUTPUTS": str(tmp_path), "MPLBACKEND": "Agg"}
    p = subprocess.run(
        [sys.executable, "run.py", "-m", *SWEEP, *overrides],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sweeps = list((tmp_path / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps
    jobs = sorted(d for d in sweeps[0].iterdir() if d.is_dir() and not d.name.startswith(".") and d.name != "by_overrides")
    assert [d.name for d in jobs] == ["0", "1"]
    results = []
    for d in jobs:
        assert (d / "accounting.json").is_file(), sorted(x.name for x in d.iterdir())
        results.append(json.loads((d / "accounting.json").read_text()))
        overrides_yaml = (d / ".hydra" / "overrides.yaml").read_text()
        assert f"method.noise_multiplier={'1.0' if d.name == '0' else '2.0'}" in overrides_yaml
    assert results[0] != results[1]  # the two jobs saw different noise multipliers
    # the sweep summary (dpgen.sweeps.SweepSummary, a Hydra callback): a row per job, both done
    import csv

    rows = list(csv.DictReader(open(sweeps[0] / "sweep_summary.csv")))
    assert [r["job"] for r in rows] == ["0", "1"]
    assert all(r["status"] == "done" for r in rows), rows
    assert [float(r["epsilon"]) for r in rows] == [res["epsilon"] for res in results]
    assert "method.noise_multiplier=2.0" in rows[1]["overrides"]
    assert (sweeps[0] / "sweep_summary.md").is_file() and (sweeps[0] / "sweep_summary.png").is_file()
    assert "sweep summary:" in p.stdout
    named = sweeps[0] / "by_overrides"  # each job folder under the swept value
    assert (named / "method.noise_multiplier=2.0" / "accounting.json").is_file()
    assert os.readlink(named / "method.noise_multiplier=1.0") == os.path.join("..", "0")
    return sweeps[0]


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def test_sweep_basic_launcher(tmp_path):
    _sweep(tmp_path)


def test_collect_rebuilds_the_summary(tmp_path, capsys):
    """`dpgen collect` from the folders alone: a finished job, one interrupted with a checkpoint, one failed."""
    from dpgen import sweeps

    sweep = tmp_path / "sweep"
    for num, ov in enumerate(["privacy.epsilon=1", "privacy.epsilon=10", "privacy.epsilon=100"]):
        (sweep / str(num) / ".hydra").mkdir(parents=True)
        (sweep / str(num) / ".hydra" / "overrides.yaml").write_text(f"- {ov}\n")
    (sweep / "0" / "metrics.json").write_text(json.dumps(
        {"task": "generation", "stop_reason": "completed", "steps": 10,
         "privacy": {"private": True, "epsilon_spent": 0.99, "delta": 1e-5, "noise_multiplier": 1.1},
         "downstream": {"logreg": {"test_acc": 50.0}}, "train_seconds": 3.0}))
    (sweep / "1" / "checkpoints").mkdir()
    (sweep / "1" / "checkpoints" / "ledger.json").write_text(json.dumps({"steps": 7}))
    assert sweeps.main([str(sweep)]) == 0
    rows = {r["job"]: r for r in sweeps.collect(sweep)}
    assert rows["0"]["status"] == "done" and rows["0"]["epsilon"] == 0.99 and rows["0"]["logreg_acc"] == 50.0
    assert rows["0"]["noise_multiplier"] == 1.1 and rows["0"]["noise_std"] == "n/a"  # typed: never a guessed 0
    assert rows["1"]["status"].startswith("interrupted (ledger at 7 steps)")
    assert rows["2"]["status"].startswith("failed")
    assert (sweep / "sweep_summary.csv").is_file() and (sweep / "sweep_summary.md").is_file()
    assert "job 1 [privacy.epsilon=10]: interrupted" in capsys.readouterr().out
    assert sweeps.main([str(tmp_path / "nope")]) == 2


def test_sweep_submitit_local(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep = _sweep(tmp_path, "hydra/launcher=submitit_local")
    assert (sweep / ".submitit").is_dir()  # the jobs went through submitit's LocalExecutor


@pytest.mark.slow
def test_sweep_slurm_local_preset(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep = _sweep(tmp_path, "hydra/launcher=slurm_local")
    assert (sweep / ".submitit").is_dir()


@pytest.mark.slow
def test_sweep_parallel_preset(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    _sweep(tmp_path, "hydra/launcher=parallel", "hydra.launcher.n_jobs=2")


def test_presets_do_not_shadow_plugin_configs():
    # A preset named like the plugin's own config (joblib, submitit_local, submitit_slurm) would
    # shadow it, could not extend it, and trigger Hydra's deprecated automatic schema matching.
    names = {p.stem for p in LAUNCHERS.glob("*.yaml")}
    assert {"slurm", "slurm_local", "parallel"} <= names
    assert not names & {"joblib", "submitit_local", "submitit_slurm", "basic"}


def test_parallel_preset_composes():
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    launcher = _compose(["hydra/launcher=parallel", "hydra.launcher.n_jobs=3"]).hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert launcher.n_jobs == 3 and launcher.prefer == "processes"  # the plugin's fields are inherited
    assert _compose(["hydra/launcher=parallel"]).hydra.launcher.n_jobs == 2


def test_slurm_preset_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = _compose(["hydra/launcher=slurm"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    for key in ("partition", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "array_parallelism"):
        assert key in launcher, key
    assert "qos" in launcher and "additional_parameters" in launcher  # inherited from SlurmQueueConf

    over = [
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.gpus_per_node=2",
        "hydra.launcher.cpus_per_task=4",
        "hydra.launcher.mem_gb=16",
        "hydra.launcher.timeout_min=30",
        "hydra.launcher.array_parallelism=3",
    ]
    launcher = _compose(over).hydra.launcher
    assert (launcher.partition, launcher.gpus_per_node, launcher.cpus_per_task) == ("gpu", 2, 4)
    assert (launcher.mem_gb, launcher.timeout_min, launcher.array_parallelism) == (16, 30, 3)

    # the schema is kept: a typo or a wrong type is refused at composition
    with pytest.raises(Exception):
        _compose(["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=two"])
    with pytest.raises(Exception):
        _compose(["hydra/launcher=slurm", "hydra.launcher.partitoin=gpu"])


def test_slurm_preset_cfg_hydra_cli():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    p = subprocess.run(
        [sys.executable, "run.py", "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
         "--cfg", "hydra", "-p", "hydra.launcher"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    launcher = OmegaConf.create(p.stdout.split("\n", 1)[1])  # drop the "# @package" line
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"


def test_slurm_preset_sbatch_script(tmp_path, monkeypatch):
    """The preset's fields become valid sbatch options (submitit's own script; nothing submitted)."""
    submitit = pytest.importorskip("submitit")
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from submitit.slurm.slurm import _make_sbatch_string

    # submitit's SlurmExecutor refuses to start without srun on PATH: give it a dummy one
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")

    launcher = _compose(["hydra/launcher=slurm", "hydra.launcher.partition=gpu"]).hydra.launcher
    params = OmegaConf.to_container(launcher, resolve=False)
    params.pop("_target_")
    params["name"] = "dpgen_run"  # ${hydra.job.name} is only set inside a run
    # the mapping of SlurmLauncher.launch (hydra_submitit_launcher/submitit_launcher.py)
    init_keys = {"submitit_folder", "max_num_timeout"}
    executor = submitit.AutoExecutor(cluster="slurm", folder=str(tmp_path / "submitit"),
                                     slurm_max_num_timeout=params["max_num_timeout"])
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(
        **{k if k in base else f"slurm_{k}": v for k, v in params.items() if k not in init_keys}
    )
    script = _make_sbatch_string(command="python run.py", folder=str(tmp_path), map_count=40,
                                 **executor._executor.parameters)
    for line in ("--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=8", "--mem=32GB",
                 "--time=240", "--array=0-39%16", "--job-name=dpgen_run"):
        assert f"#SBATCH {line}\n" in script, (line, script)


def test_the_sweep_picture_gives_epsilon_its_own_axis(tmp_path):
    """sweep_summary.png: accuracies on the left axis, the epsilon spent on its own (right) axis, a title naming the
    swept key (it was "sweep sweep", with a budget of 10 drawn on the accuracies' scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpgen import sweeps

    rows = [{"job": str(i), "overrides": f"privacy.epsilon={e}", "logreg": 60.0 + 3 * e, "epsilon": 0.999 * e}
            for i, e in enumerate([1, 3, 10])]
    figs = []
    real_close = plt.close
    plt.close = lambda fig=None: figs.append(fig)  # keep the figure to look at its axes
    try:
        path = sweeps._plot(tmp_path, rows, ["logreg"])
    finally:
        plt.close = real_close
    assert path.stat().st_size > 1000
    ax, ax2 = figs[0].axes
    assert ax.get_ylabel() == "accuracy (%)" and ax2.get_ylabel() == "epsilon spent"
    assert "privacy.epsilon" in ax.get_title() and "sweep sweep" not in ax.get_title()
    assert [line.get_label() for line in ax.get_lines()] == ["logreg"]
    real_close(figs[0])



def test_a_sweep_whose_output_goes_to_a_file_finishes(tmp_path):
    """`python run.py -m ... > log 2>&1` (a file, a pipe, nohup, SLURM: not a TTY): job 1 died with 'I/O operation on
    closed file' / 'lost sys.stderr' (issue 84). absl's logging handler, created while job 0 printed through the run
    log's tee, closed the tee's stream (the process's stderr) when Hydra reconfigured logging for job 1; the tee's
    close no longer reaches the stream (dpgen.utils.run_dir)."""
    env = {**os.environ, "DPGEN_OUTPUTS": str(tmp_path), "MPLBACKEND": "Agg"}
    log = tmp_path / "log"
    with open(log, "w") as out:
        p = subprocess.run([sys.executable, "run.py", "-m", "privacy.epsilon=1,10", "trainer.steps=20",
                            "task.fid=false", "task.eval_models=[logreg]", "task.n_synthetic=200"],
                           cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    text = log.read_text()
    assert p.returncode == 0 and "lost sys.stderr" not in text, text[-3000:]
    assert "job 1 [" in text and "sweep summary:" in text
    sweep = next((tmp_path / "multirun").iterdir())
    assert all((sweep / j / "metrics.json").is_file() for j in ("0", "1"))
