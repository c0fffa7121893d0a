"""What a user expects at every step (issue 27, section 4), each checked in-process through ``run.py``'s path:
a mistyped key or choice is refused with the closest known one, a corrupt data file is named, FID without
weights is said at the start, loggers get every field and the end of the run, run folders are honest."""

import json
import os
import shutil
import stat

import numpy as np
import pytest

QUICK = ["dataset=digits", "trainer.steps=40", "task.n_synthetic=500", "task.eval_models=[logreg]",
         "trainer.progress=false"]


# ---- a typo is refused, with the closest known key or choice ---------------------------------------------

def test_a_key_added_with_plus_that_no_schema_declares_is_refused(run_cli, tmp_path):
    code, out = run_cli("+trainer.stepz=100", "task=accounting")
    assert code == 2 and "unknown key trainer.stepz: did you mean trainer.steps?" in out
    assert not (tmp_path / "run").exists()  # a config error leaves no run folder


@pytest.mark.parametrize("override, hint", [
    ("trainer.stepz=100", "unknown key trainer.stepz: did you mean trainer.steps?"),
    ("method=dpswdd", "method=dpswdd is not a choice of method/: did you mean dpswd?"),
    ("dataset=fashionmnist", "dataset=fashionmnist is not a choice of dataset/: did you mean fashion_mnist?"),
])
def test_hydra_refusals_name_the_closest_key_or_choice(run_cli, override, hint):
    code, out = run_cli(override)
    assert code == 2 and f"dpgen: error: {hint}" in out, out[-1500:]
    # one message, dpgen's: not Hydra's advice above it (which told users to add a `+` to a misspelled key)
    assert "Could not override" not in out and "+trainer.stepz" not in out and out.count("error") == 1, out


def test_dpgen_help_lists_every_subcommand_without_importing_torch():
    """``dpgen --help`` answers from the config folder's file names: every subcommand, the config groups and their
    choices, with neither torch nor Hydra imported (it took 10.6 s of CPU through Hydra's help)."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['dpgen', '--help']; import dpgen.cli as c\n"
            "try:\n    c.main()\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "assert 'torch' not in sys.modules and 'hydra' not in sys.modules, 'heavy import'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    from dpgen.cli import SUBCOMMANDS

    for sub in SUBCOMMANDS:
        assert f"dpgen {sub} " in out, sub
    assert "dpgen -m " in out and "--cfg job" in out
    assert "method      " in out and "dpsinkhorn" in out and "dataset     " in out and "table " not in out.split(
        "config groups")[1]


def test_an_outside_methods_typo_is_named_too(run_cli):
    code, out = run_cli("method=dpswd", "method.kk=3")
    assert code == 2 and "unknown key method.kk: did you mean method.k?" in out


# ---- a corrupt data file is named, with the fix -----------------------------------------------------------

def test_a_truncated_gz_names_the_file(tmp_path):
    from dpgen.data import read_idx, write_idx

    path = tmp_path / "train-images-idx3-ubyte.gz"
    write_idx(path, np.zeros((50, 28, 28), dtype=np.uint8))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz cannot be read \(EOFError.*truncated or "
                                         r"corrupt. Download it again"):
        read_idx(path)
    path.write_bytes(b"not a gzip file at all")
    with pytest.raises(ValueError, match="BadGzipFile"):
        read_idx(path)


def test_a_truncated_data_file_ends_in_a_dpgen_error(run_cli, fake_data_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(fake_data_root / "MNIST", root / "MNIST")
    f = root / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:1000])
    code, out = run_cli("dataset=mnist", f"dataset.data_root={root}", "dataset.n_train=1000", *QUICK[1:])
    assert code == 2 and f"dpgen: error: {f} cannot be read" in out and "Traceback" not in out
    h5 = tmp_path / "usps" / "usps.h5"
    h5.parent.mkdir()
    h5.write_bytes((fake_data_root / "usps" / "usps.h5").read_bytes()[:500])
    from dpgen.data import load_dataset

    with pytest.raises(ValueError, match=r"usps.h5 cannot be read .*Download usps.h5 again"):
        load_dataset("usps", "train", data_root=tmp_path)


# ---- FID without weights: said at the start, n/a in the summary -------------------------------------------

def test_fid_without_weights_is_said_before_training(run_cli, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.delenv("DPGEN_FID_WEIGHTS", raising=False)
    code, out = run_cli(*QUICK, "task.fid=true")
    assert code == 0, out[-2000:]
    log = (_run_folder(out) / "run.log").read_text()  # stdout and stderr in the order they were written
    warn = log.index("WARNING: task.fid=true, but FID cannot be computed here")
    assert warn < log.index("steps (completed)")  # before training, not found after it
    assert "FID: n/a (FID Inception weights" in out


# ---- loggers get every field, the final metrics and the samples -------------------------------------------

def test_the_csv_logger_widens_its_header(tmp_path):
    import csv

    from dpgen.train.loggers import CSVLogger

    log = CSVLogger(tmp_path)
    log.log({"loss": 1.0}, 1)
    log.log({"loss": 0.5, "epsilon": 2.0}, 2)  # a field the first row lacked
    log.log({"loss": 0.25, "epsilon": 3.0}, 3)
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [r["epsilon"] for r in rows] == ["", "2.0", "3.0"] and [r["step"] for r in rows] == ["1", "2", "3"]
    log.finish({"privacy": {"epsilon_spent": 3.0}, "downstream": {"logreg": {"test_acc": 50.0}}},
               {"samples": tmp_path / "samples.png"})
    final = dict(csv.reader(open(tmp_path / "metrics_final.csv")))
    assert final["privacy.epsilon_spent"] == "3.0" and final["downstream.logreg.test_acc"] == "50.0"
    assert final["samples_png"].endswith("samples.png")


def test_tensorboard_gets_epsilon_the_final_metrics_hparams_and_the_samples(run_cli):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code, out = run_cli(*QUICK, "logger=tensorboard", "trainer.log_every=2")
    assert code == 0, out[-2000:]
    run = _run_folder(out)
    ev = EventAccumulator(str(run / "tensorboard")).Reload()
    tags = ev.Tags()
    published = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    eps = [(r["step"], r["epsilon"]) for r in published if "epsilon" in r]  # every tenth record and the last
    assert [(e.step, pytest.approx(e.value)) for e in ev.Scalars("epsilon")] == eps and len(eps) == 2
    assert "final/downstream.logreg.test_acc" in tags["scalars"] and "final/privacy.epsilon_spent" in tags["scalars"]
    assert "samples" in tags["images"]
    hp = [f for f in (run / "tensorboard").rglob("events*")]
    assert len(hp) >= 1  # add_hparams writes its summary beside the scalars


# ---- run folders: modes, run.log, a resumed run's metrics -------------------------------------------------

def _run_folder(out):
    import re
    from pathlib import Path

    return Path(re.search(r"files: (\S+?)/metrics\.json", out).group(1))


def test_run_folder_files_follow_the_umask_and_run_log_holds_the_run(run_cli):
    old = os.umask(0o022)
    try:
        code, out = run_cli(*QUICK)
    finally:
        os.umask(old)
    assert code == 0, out[-2000:]
    run = _run_folder(out)
    for name in ("metrics.json", "config.yaml", "samples.png", "checkpoints/last.pt", "checkpoints/ledger.json"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o644, name
    log = (run / "run.log").read_text()
    assert "steps (completed)" in log and "downstream logreg" in log


def test_a_resumed_runs_metrics_cover_the_whole_run(tmp_path):
    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    # a fixed noise (the default calibrates it to the steps first asked, after which a resume has no budget left)
    args = [*QUICK, "trainer.log_every=10", "trainer.checkpoint_every=10", "method.noise_multiplier=1.1"]
    first = run_task(compose_config([*args, "trainer.steps=20"]), tmp_path / "run")
    m = run_task(compose_config([*args, "resume=auto"]), tmp_path / "run")
    assert m["attempts"] == 2 and m["steps"] == 40
    assert m["train_seconds"] > first["train_seconds"] and isinstance(m["steps_per_second"], float)
    assert isinstance(m["final_loss"], (float, str)) and m["final_loss"] == m["final_loss"]  # not NaN
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["attempts"] == 2
