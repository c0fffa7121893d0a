"""scripts/fidelity_of_run.py: fidelity of a finished run from its folder, with another contrast curve
(--sharpen) and the classifiers trained again (--eval-models)."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

QUICK = ["method=dpsinkhorn", "dataset=digits", "trainer.steps=40", "task.n_synthetic=600",
         "task.eval_models=[logreg]", "task.eval_max_epochs=3", "trainer.progress=false", "task.fid=false"]


def test_no_fid_another_curve_and_the_classifiers_again(run_cli, capsys):
    import fidelity_of_run

    code, out = run_cli(*QUICK, "model.sharpen=null")  # the default (digits) has a curve since 2026-11-29
    assert code == 0, out[-2000:]
    run = Path(re.search(r"files: (\S+?metrics\.json)", out).group(1)).parent
    trained = json.loads((run / "metrics.json").read_text())

    own = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False)
    assert own["fid"] == "n/a: --no-fid" and own["sharpen"] is None
    assert own["logreg_acc"] == trained["downstream"]["logreg"]["test_acc"]  # read from metrics.json
    assert own["class_mean"] == pytest.approx(trained["downstream"]["class_mean"]["test_acc"], abs=1e-9)

    again = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False, eval_models=["logreg"])
    assert again["logreg_acc"] == pytest.approx(trained["downstream"]["logreg"]["test_acc"], abs=1e-9)

    sharp = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False, sharpen=(30.0, 0.4))
    assert sharp["sharpen"] == [30.0, 0.4] and "logreg_acc" not in sharp  # metrics.json is not of these images
    assert sharp["spread"] != own["spread"]
    sharp = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False, sharpen=(30.0, 0.4),
                                            eval_models=["logreg"])
    assert isinstance(sharp["logreg_acc"], float)

    with pytest.raises(SystemExit):
        fidelity_of_run.main([str(run), "--no-fid", "--eval-models", "svm"])
    assert "unknown ['svm']" in capsys.readouterr().err


def test_the_class_mean_baseline_is_of_the_set_the_classifiers_were_trained_again_on(run_cli):
    """A run that trained no classifier evaluated a small set; --eval-models draws task.n_synthetic samples for the
    classifiers, and the class-mean baseline and spread beside them must be of that same set (they were of the
    run's small one until 2026-12-02)."""
    import fidelity_of_run

    args = [a for a in QUICK if not a.startswith(("task.eval_models", "task.n_synthetic"))] + [
        "task.eval_models=[]", "task.n_synthetic=2500", "model.sharpen=null"]
    code, out = run_cli(*args)
    assert code == 0, out[-2000:]
    run = Path(re.search(r"files: (\S+?metrics\.json)", out).group(1)).parent
    own = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False)
    again = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False, eval_models=["logreg"])
    assert own["n_synthetic"] == 2000  # the run's own set: at most 2,000 when it trained no classifier
    assert again["n_synthetic"] == 2500 and isinstance(again["logreg_acc"], float)
    assert again["spread"] != own["spread"]


def test_a_run_folder_moved_to_another_machine_is_measured_with_data_root(run_cli, fake_data_root, tmp_path, capsys):
    """A run's config names the data folder of the machine it trained on; elsewhere --data-root says where the
    same files are (the FID session on a GPU machine met exactly this). Fashion-MNIST: MNIST's public test split
    has a fallback folder, <shared>/data/mnist."""
    import shutil

    import fidelity_of_run

    here = tmp_path / "trained_here"
    shutil.copytree(fake_data_root, here)
    code, out = run_cli("method=dpsinkhorn", "dataset=fashion_mnist", f"dataset.data_root={here}", "dataset.n_train=1000",
                        "trainer.steps=5", "task.n_synthetic=200", "task.eval_models=[logreg]",
                        "task.eval_max_epochs=2", "trainer.progress=false", "task.fid=false")
    assert code == 0, out[-2000:]
    run = Path(re.search(r"files: (\S+?metrics\.json)", out).group(1)).parent
    there = tmp_path / "elsewhere"
    here.rename(there)
    with pytest.raises(Exception, match="trained_here"):  # the missing folder is named
        fidelity_of_run.fidelity_of_run(run, fid=False, progress=False)
    got = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False, data_root=there)
    assert 0 <= got["class_mean"] <= 100
    fidelity_of_run.main([str(run), "--no-fid", "--data-root", str(there)])
    assert '"class_mean"' in capsys.readouterr().out


def test_the_run_is_measured_on_its_own_device_and_another_devices_draw_drops_its_accuracies(run_cli, monkeypatch):
    """A CUDA and a CPU generator draw different sets: the script's default device is the run's own (its
    evaluation set again), and a set drawn on another device type is not the one metrics.json's accuracies were
    measured on, so they are left out (the GPU suite caught --device cpu beside a CUDA-trained run)."""
    import fidelity_of_run

    code, out = run_cli(*QUICK, "model.sharpen=null")
    assert code == 0, out[-2000:]
    run = Path(re.search(r"files: (\S+?metrics\.json)", out).group(1)).parent
    metrics = json.loads((run / "metrics.json").read_text())
    own = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False)  # device auto
    assert own["evaluation_set"].startswith("the run's own") and "logreg_acc" in own
    assert own["class_mean"] == pytest.approx(metrics["downstream"]["class_mean"]["test_acc"], abs=1e-9)
    # the same run as if it had trained on a GPU, measured on a machine without one
    metrics["device"] = "cuda:0"
    (run / "metrics.json").write_text(json.dumps(metrics))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    other = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False)
    assert "not the run's own (it evaluated on cuda:0)" in other["evaluation_set"] and "logreg_acc" not in other
    again = fidelity_of_run.fidelity_of_run(run, fid=False, progress=False, eval_models=["logreg"])
    assert isinstance(again["logreg_acc"], float)  # trained again on the set drawn here
