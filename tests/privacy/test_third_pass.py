"""Regression tests of the third privacy review (issue 52), each reproducing a finding on 71adaa0.

1. ``dpgen sample`` stated the epsilon, steps and accuracy of ``metrics.json`` (the 300-step generator) for the
   weights of a resumed, interrupted run (step ~1,500): every file that states a run's privacy now takes it from
   the checkpoint whose weights it describes, and a folder whose ``metrics.json`` describes other weights is
   refused (release) or marked (sweep row, table cell).
2. Ctrl-C left steps charged but untrained and printed a traceback; ``resume=true`` on a finished run evaluated it
   again and overwrote its results; ``resume=true`` deleted a user's empty folder.
3. A Poisson run refused a set whose size differed from ``dataset.n_train``: D ran, D plus one record did not.
"""

import json
import os
import shutil
import signal

import numpy as np
import pytest
import torch

from dpgen.config import compose_config
from dpgen.tasks import run as run_task
from dpgen.tasks.generation import GenerationTask
from dpgen.train.signals import EXIT_INTERRUPTED

# a fixed noise: the default calibrates it to the steps first asked, after which a resume would have no budget left
ARGS = ["trainer.progress=false", "trainer.epochs=null", "task.eval_models=[]", "trainer.log_every=1000",
        "method.noise_multiplier=1.1"]


def _cfg(*overrides):
    base = [a for a in ARGS if "task=classification" not in overrides or not a.startswith("task.eval_models")]
    return compose_config([*base, *overrides])


def _ckpt(run):
    return torch.load(run / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)


# ---- 1. the epsilon a release states is the one its weights spent ------------------------------------------------


@pytest.fixture
def resumed_and_interrupted(tmp_path, monkeypatch, signal_at):
    """The issue's reproduction, shortened: a finished 4-step run, resumed for 20 steps and stopped at step 11."""
    run = tmp_path / "run"
    first = run_task(_cfg("trainer.steps=4"), run)
    signal_at(10, signal.SIGINT)
    with pytest.raises(SystemExit) as e:
        run_task(_cfg("trainer.steps=20", "resume=auto", "trainer.checkpoint_every=5"), run)
    assert e.value.code == EXIT_INTERRUPTED
    monkeypatch.undo()
    return run, first


def test_a_resume_that_trains_removes_the_earlier_results_before_its_first_step(resumed_and_interrupted):
    run, first = resumed_and_interrupted
    assert not (run / "metrics.json").exists() and not (run / "samples.png").exists()
    state = _ckpt(run)
    assert state["step"] == 11 and state["privacy"]["private_steps"] == 11
    assert state["privacy"]["epsilon_spent"] > first["privacy"]["epsilon_spent"]


def test_release_refuses_weights_that_metrics_json_does_not_describe(resumed_and_interrupted):
    """On 71adaa0 this released the step-11 weights as 'epsilon <4-step epsilon>, 4 steps' (the DATASHEET read
    metrics.json); the folder is what a resumed run left before this fix (its old metrics.json put back)."""
    from dpgen.release import ReleaseError, release

    run, first = resumed_and_interrupted
    (run / "metrics.json").write_text(json.dumps(first))  # what 71adaa0 left in the folder
    with pytest.raises(ReleaseError, match=r"describes step 4, but the checkpoint .* step 11"):
        release(run, n=100)
    assert not (run / "release").exists()


def test_the_sweep_row_and_the_table_cell_state_the_checkpoints_epsilon(resumed_and_interrupted):
    from dpgen.sweeps import job_row
    from dpgen.tables.grid import evaluate_run  # noqa: F401  (the table cell reads through read_run)
    from dpgen.train.run_record import read_run

    run, first = resumed_and_interrupted
    (run / "metrics.json").write_text(json.dumps(first))
    rec = read_run(run)
    assert rec.status == "stale" and rec.metrics is None  # a table cell does not reuse it: the run is resumed
    row = job_row(run, run.parent)
    assert row["status"].startswith("interrupted (checkpoint at step 11)")
    assert row["epsilon"] == pytest.approx(_ckpt(run)["privacy"]["epsilon_spent"])
    assert row["epsilon"] > first["privacy"]["epsilon_spent"]


def test_a_finished_resume_releases_the_epsilon_of_its_checkpoint(resumed_and_interrupted, monkeypatch):
    from dpgen.release import release
    from dpgen.tasks.evaluate import released_privacy

    run, first = resumed_and_interrupted
    m = run_task(_cfg("trainer.steps=20", "resume=auto", "task.eval_models=[logreg]", "task.n_synthetic=200"), run)
    sheet = release(run, n=100)
    state = _ckpt(run)
    assert state["step"] == m["steps"] == sheet["training_steps"] == 20
    assert sheet["epsilon_spent"] == state["privacy"]["epsilon_spent"] == m["privacy"]["epsilon_spent"]
    assert "recorded in the checkpoint" in sheet["privacy_source"]
    # task=evaluate states the set's privacy from the datasheet that describes this very file
    npz = run / "release" / "synthetic.npz"
    p = released_privacy(npz)
    assert p["known"] and p["epsilon_spent"] == sheet["epsilon_spent"] and p["training_steps"] == 20
    other = run / "other.npz"
    shutil.copy(npz, other)
    assert not released_privacy(other)["known"]  # no datasheet beside it
    with np.load(npz) as f:
        x, y = f["x"], f["y"]
    np.savez(npz, x=x[:50], y=y[:50])  # the file changed after its datasheet was written
    assert not released_privacy(npz)["known"]


# ---- 2. interruptions --------------------------------------------------------------------------------------------


@pytest.fixture
def terminal_sigint():
    """SIGINT handled as in a terminal (Python's own handler): a shell starts a background job with SIGINT ignored,
    and the handler a run restores is the one it found."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_finishes_the_step_checkpoints_and_resumes_to_the_uninterrupted_epsilon(
        tmp_path, monkeypatch, signal_at, capsys, terminal_sigint):
    ref = run_task(_cfg("trainer.steps=12"), tmp_path / "ref")
    signal_at(5, signal.SIGINT)
    with pytest.raises(SystemExit) as e:
        run_task(_cfg("trainer.steps=12", "trainer.checkpoint_every=1000", "trainer.log_every=2"), tmp_path / "run")
    assert e.value.code == EXIT_INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    err = capsys.readouterr().err
    assert "SIGINT received: stopped after step 6" in err and f"resume=auto hydra.run.dir={tmp_path / 'run'}" in err
    run = tmp_path / "run"
    ledger = json.loads((run / "checkpoints" / "ledger.json").read_text())
    state = _ckpt(run)
    published = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    # the ledger's steps = the checkpoint's steps = the steps published (nothing charged that was not trained)
    assert ledger["private_steps"] == state["step"] == state["privacy"]["private_steps"] == 6
    assert max(published) <= 6
    monkeypatch.undo()
    m = run_task(_cfg("trainer.steps=12", "resume=auto"), run)
    assert m["steps"] == 12 and m["privacy"]["private_steps"] == 12
    assert m["privacy"]["epsilon_spent"] == ref["privacy"]["epsilon_spent"]


def test_ctrl_c_on_the_command_line_prints_one_line_and_exits_130(
        run_cli, tmp_path, monkeypatch, signal_at, terminal_sigint):
    signal_at(3, signal.SIGINT)
    code, out = run_cli(*ARGS, "trainer.steps=10")
    assert code == EXIT_INTERRUPTED and "Traceback" not in out
    assert "SIGINT received: stopped after step 4" in out
    assert "SIGINT received" in (tmp_path / "run" / "run.log").read_text()  # run.log has it too
    monkeypatch.undo()

    def interrupted(*a, **k):  # Ctrl-C outside the training loop (here: the evaluation)
        raise KeyboardInterrupt

    monkeypatch.setattr(GenerationTask, "evaluate", interrupted)
    code, out = run_cli(*ARGS, "trainer.steps=10", "resume=auto")
    assert code == EXIT_INTERRUPTED and "Traceback" not in out and "dpgen: interrupted (Ctrl-C)" in out


def test_a_finished_run_resumed_without_more_steps_keeps_its_results(tmp_path, capsys):
    run = tmp_path / "run"
    run_task(_cfg("trainer.steps=5", "task.eval_models=[logreg]", "task.n_synthetic=200"), run)
    before = (run / "metrics.json").read_bytes()
    capsys.readouterr()
    m = run_task(_cfg("trainer.steps=5", "task.eval_models=[logreg]", "task.n_synthetic=200", "resume=true"), run)
    assert (run / "metrics.json").read_bytes() == before and m == json.loads(before)
    assert "has finished" in capsys.readouterr().out


def test_resume_true_leaves_a_users_empty_folder_as_it_was(run_cli, tmp_path):
    folder = tmp_path / "run"  # the folder run_cli names with hydra.run.dir
    folder.mkdir()
    code, out = run_cli(*ARGS, "resume=true")
    assert code == 2 and "resume=true, but" in out
    assert folder.is_dir() and list(folder.iterdir()) == []  # nothing written, nothing removed
    (folder / "mine.txt").write_text("a user's file")
    code, out = run_cli(*ARGS, "privacy.epsilon=-1")  # refused after Hydra wrote .hydra/ and run.log
    assert code == 2
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]


# ---- 3. the dataset size is public ---------------------------------------------------------------------------------


def _with_canary(monkeypatch, value):
    """Every training split loaded gets one more record (a canary: all pixels ``value``, label 3)."""
    import dpgen.tasks.classification as cls_mod
    import dpgen.tasks.generation  # noqa: F401
    from dpgen import data
    from dpgen.data import ArrayDataset

    original = data.load_split

    def load_split(ds, split="train"):
        d = original(ds, split)
        if split != "train":
            return d
        x, y = d.tensors
        canary = torch.full_like(x[:1], float(value))
        return ArrayDataset(torch.cat([x, canary]), torch.cat([y, torch.tensor([3])]), name=d.name,
                            num_classes=d.num_classes)

    monkeypatch.setattr(data, "load_split", load_split)
    del cls_mod


@pytest.mark.parametrize("overrides", [
    ("task=classification", "method=dpsgd", "+dataset.options.resize=16", "trainer.steps=6", "trainer.batch_size=64"),
    ("method=dpsinkhorn", "trainer.steps=6"),
], ids=["dpsgd", "dpsinkhorn"])
def test_a_poisson_run_on_d_and_on_d_plus_a_canary_behave_the_same(tmp_path, monkeypatch, overrides):
    """71adaa0 refused D + {1e30-valued record} (declared n 1,437) every time and ran D: the refusal told them
    apart. Now both run the same way up to the release: same steps, noise, epsilon, reported size and fields."""
    a = run_task(_cfg(*overrides), tmp_path / "d")
    _with_canary(monkeypatch, 1e30)
    b = run_task(_cfg(*overrides), tmp_path / "d_plus")
    for m in (a, b):
        assert m["steps"] == 6 and m["n_private"] == 1437 and m["stop_reason"] == "completed"
    pa, pb = a["privacy"], b["privacy"]
    assert set(a) == set(b) and set(pa) == set(pb)
    for key in ("epsilon_spent", "sample_rate", "noise_multiplier", "dataset_size", "neighbouring_relation"):
        assert pa.get(key) == pb.get(key), key
    assert "refused" not in pa["neighbouring_relation"] and "refused" not in pa["dataset_size"]


def test_a_declared_size_unlike_the_datasets_is_a_warning_when_the_config_is_read(capsys):
    compose_config(["dataset=digits", "dataset.n_train=1400"])
    err = capsys.readouterr().err
    assert "dataset.n_train=1400, but digits's training split ships with 1,437 records" in err
    compose_config(["dataset=digits"])
    assert "WARNING" not in capsys.readouterr().err


def test_wall_clock_timings_are_listed_as_not_covered(tmp_path):
    m = run_task(_cfg("trainer.steps=2"), tmp_path / "run")
    assert "wall-clock timings" in str(m["privacy"]["not_covered"])


def test_a_periodic_checkpoint_records_its_steps_and_its_epsilon_is_read_from_its_ledger(tmp_path, monkeypatch):
    """A periodic checkpoint holds a partial record (a full report costs an accountant call); a job killed after it
    still shows the epsilon its checkpoint's ledger holds, equal to a finished run of that many steps."""
    from dpgen.sweeps import job_row
    from dpgen.train.run_record import read_run

    ten = run_task(_cfg("trainer.steps=10"), tmp_path / "ten")
    original = GenerationTask.next_batch

    def crash(self, method, sampler_gen, step, target_steps):
        if step == 12:
            raise RuntimeError("killed")
        return original(self, method, sampler_gen, step, target_steps)

    monkeypatch.setattr(GenerationTask, "next_batch", crash)
    with pytest.raises(RuntimeError, match="killed"):
        run_task(_cfg("trainer.steps=20", "trainer.checkpoint_every=5"), tmp_path / "run")
    state = _ckpt(tmp_path / "run")
    assert state["step"] == 10 and state["privacy"]["partial"] and "epsilon_spent" not in state["privacy"]
    rec = read_run(tmp_path / "run")
    assert rec.status == "interrupted" and rec.epsilon() == pytest.approx(ten["privacy"]["epsilon_spent"], rel=1e-9)
    assert job_row(tmp_path / "run", tmp_path)["epsilon"] == pytest.approx(ten["privacy"]["epsilon_spent"], rel=1e-9)
