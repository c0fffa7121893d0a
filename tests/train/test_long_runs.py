"""A run longer than 10 minutes says so after its first steps (dpgen/train/loop.py, long_run_notice)."""

import pytest

from dpgen.config import compose_config
from dpgen.train import loop


class _Task(loop.Task):
    def __init__(self, eval_s=0.0, what=""):
        self.eval = (eval_s, what)

    def evaluation_estimate(self, cfg):
        return self.eval


def test_a_short_run_says_nothing_and_a_long_one_gives_time_steps_and_quick_overrides():
    cfg = compose_config([])
    assert loop.long_run_notice(cfg, _Task(), 1000, 0.1) is None  # 100 s
    note = loop.long_run_notice(cfg, _Task(300.0, "CNN on 60,000 synthetic samples"), 18000, 0.67)
    assert "18,000 more steps at 0.67 s/step" in note and "201.0 min of training" in note
    assert "CNN on 60,000 synthetic samples (about 5.0 min)" in note
    assert "trainer.steps=" in note and "resume=auto" in note
    # the evaluation alone can make a run long
    assert loop.long_run_notice(cfg, _Task(900.0, "x"), 10, 0.01) is not None


def test_the_quick_overrides_are_the_tasks_own():
    """Generation suggests fewer synthetic samples and classifiers; classification (DP-SGD) has neither."""
    from dpgen.tasks.classification import ClassificationTask
    from dpgen.tasks.generation import GenerationTask

    cfg = compose_config(["task.eval_models=[]"])  # no evaluation estimate needed: the notice's last part
    gen = loop.long_run_notice(cfg, GenerationTask(), 18000, 0.67)
    assert "task.n_synthetic=<fewer>" in gen and "task.eval_models=[logreg]" in gen
    cls = loop.long_run_notice(cfg, ClassificationTask(), 18000, 0.67)
    assert "trainer.steps=<fewer>" in cls and "task.n_synthetic" not in cls


def test_generation_estimates_its_evaluation_from_the_protocol(monkeypatch):
    from dpgen.tasks.generation import GenerationTask

    t = GenerationTask()
    t.n_private, t.shape = 60000, (1, 28, 28)
    # the device the evaluation runs on decides, not whether the machine has a GPU (this failed on CUDA nodes)
    cfg = compose_config(["dataset=mnist", "task.eval_models=[logreg,mlp,cnn]", "task.n_synthetic=60000",
                          "trainer.device=cpu"])
    secs, what = t.evaluation_estimate(cfg)
    assert "LogReg/MLP/CNN on 60,000 synthetic samples" in what and secs > 0
    from dpgen.eval.downstream import estimate_seconds

    assert estimate_seconds(["cnn"], 60000, (1, 28, 28), 30, device="cuda") == 0.0  # not estimated off a CPU
    assert estimate_seconds(["cnn"], 60000, (1, 28, 28), 30, device="cpu") > 0
    cfg = compose_config(["dataset=mnist", "task.eval_models=[]"])
    assert t.evaluation_estimate(cfg) == (0.0, "")  # task.fid=auto and no weights (the suite hides them)
    from dpgen.eval import fid

    monkeypatch.setattr(fid, "sgemm_rate", lambda: 100e9)  # 11.42 GFLOP an image at 0.9 x 100 GFLOP/s
    cfg = compose_config(["dataset=mnist", "task.eval_models=[]", "task.fid=true", "trainer.device=cpu"])
    secs, what = t.evaluation_estimate(cfg)  # a CPU: the quick protocol, a seeded 1,000 of the test split
    assert "quick protocol, on 300 generated vs 1,000 real test images (a seeded 1,000 of its 10,000)" in what
    assert secs == pytest.approx(1300 * 11.42e9 / 90e9)
    secs, what = t.evaluation_estimate(cfg, real_cached=True)  # the real side's features cached: not counted
    assert secs == pytest.approx(300 * 11.42e9 / 90e9) and "then cached" not in what
    cfg = compose_config(["dataset=mnist", "task.eval_models=[]", "task.fid=true", "trainer.device=cpu",
                          "task.fidelity=full"])
    secs, what = t.evaluation_estimate(cfg)
    assert "full protocol, on 10,000 generated vs 10,000 real test images (the whole test split)" in what
    assert secs == pytest.approx(20000 * 11.42e9 / 90e9)


def test_the_notice_is_printed_by_a_real_run(tmp_path, monkeypatch, capsys):
    from dpgen.tasks import run as run_task

    monkeypatch.setattr(loop, "LONG_RUN_S", 0.0)
    cfg = compose_config(["trainer.progress=false", "trainer.epochs=null", "trainer.steps=35", "task.eval_models=[]"])
    run_task(cfg, tmp_path / "run")
    out = capsys.readouterr()
    assert "[dpgen] this run will take about" in out.out + out.err


def test_an_evaluations_notice_names_only_overrides_task_evaluate_takes(monkeypatch):
    """task=evaluate has task.eval_models and task.fid_samples, not task.n_synthetic, task.fidelity or task.fid:
    its notice (the run's own protocol, estimated) suggests only what that task takes (it named task.fidelity=quick,
    which hydra refuses there), and each suggested override composes."""
    from dpgen.eval import fid
    from dpgen.tasks.generation import GenerationTask

    monkeypatch.setattr(fid, "sgemm_rate", lambda: 100e9)
    t = GenerationTask()
    t.n_private, t.shape = 60000, (1, 28, 28)
    rcfg = compose_config(["dataset=mnist", "task.eval_models=[logreg]", "task.fid=true", "trainer.device=cpu",
                           "task.fid_samples=10000"])
    _, what = t.evaluation_estimate(rcfg, evaluating=True)
    assert "task.eval_models changes that" in what and "task.fid_samples=<fewer> changes that" in what
    assert "task.fidelity" not in what and "task.n_synthetic" not in what and "task.fid=false" not in what
    compose_config(["task=evaluate", "task.run=/tmp/r", "task.eval_models=[logreg]", "task.fid_samples=300"])
