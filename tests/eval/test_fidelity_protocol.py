"""The fidelity protocol a run chooses (task.fidelity: quick on a CPU, full on a GPU or with task.fid_samples), what
its summary names, and an evaluation interrupted during the fidelity pass: the finished parts stay in metrics.json,
a resume evaluates again without training or charging anything, and a sweep row says what happened."""

import json

import pytest
import torch

from dpgen.config import compose_config
from dpgen.tasks import generation
from dpgen.tasks import run as run_task
from dpgen.tasks.generation import FidelityCounts, fid_counts, fidelity_lines, real_subset

ARGS = ["trainer.progress=false", "trainer.epochs=null", "trainer.steps=12", "task.eval_models=[logreg]",
        "task.n_synthetic=200", "trainer.checkpoint_every=1000", "trainer.log_every=1000"]


def _task(*overrides):
    return compose_config(list(overrides)).task


def test_auto_is_quick_on_a_cpu_and_full_on_a_gpu_or_with_a_count():
    assert fid_counts(_task(), 360, "cpu") == FidelityCounts("quick", 300, 360, 360)
    assert fid_counts(_task(), 10000, "cpu") == FidelityCounts("quick", 300, 1000, 10000)
    assert fid_counts(_task(), 10000, "cuda") == FidelityCounts("full", 10000, 10000, 10000)
    assert fid_counts(_task(), 360, "cuda") == FidelityCounts("full", 1800, 360, 360)  # 5 x the split
    assert fid_counts(_task("task.fid_samples=2000"), 10000, "cpu") == FidelityCounts("full", 2000, 10000, 10000)
    assert fid_counts(_task("task.fidelity=full"), 10000, "cpu").protocol == "full"
    assert fid_counts(_task("task.fidelity=quick"), 10000, "cuda").protocol == "quick"
    assert fid_counts(_task("task.fidelity=quick", "task.fid_samples=500", "task.fid_real=400"), 10000,
                      "cpu") == FidelityCounts("quick", 500, 400, 10000)
    assert fid_counts(_task("task.fid_real=50000"), 10000, "cpu").real == 10000  # never more than the split


@pytest.mark.parametrize("bad, msg", [("task.fidelity=fast", "task.fidelity"), ("task.fid_real=5", "at least 12"),
                                      ("task.fid_samples=3", "at least 12")])
def test_bad_protocol_settings_are_refused_with_the_fix(bad, msg):
    with pytest.raises(ValueError, match=msg):
        compose_config([bad])


def test_the_real_subset_is_seeded_and_in_order():
    x = torch.arange(50.0).reshape(50, 1, 1, 1)
    a, b = real_subset(x, 20), real_subset(x, 20)
    assert torch.equal(a, b) and len(a) == 20 and bool((a.flatten().diff() > 0).all())
    assert real_subset(x, 50) is x and real_subset(x, 80) is x


def _metrics(protocol):
    return {"fid": 53.3, "fid_samples": 300, "fid_real_images": 360, "fid_test_split": 360, "kid": 0.0285,
            "kid_se": 0.0018, "precision": 0.8, "recall": 0.07, "density": 0.5, "coverage": 0.4,
            "fidelity_protocol": protocol}


def test_the_summary_names_the_protocol_and_its_headline():
    quick = "\n".join(fidelity_lines(_metrics("quick")))
    assert "quick protocol" in quick and "KID 0.0285 +- 0.0018 on 300 generated vs 360 real test images" in quick
    assert "FID at this count: 53.30" in quick and "task.fidelity=full for FID on 1,800 generated vs all 360" in quick
    full = "\n".join(fidelity_lines(_metrics("full")))
    assert full.startswith("  FID: 53.30 (300 generated vs 360 real test images") and "full protocol" in full
    assert "n/a" in fidelity_lines({"fid": None, "fid_missing": "no weights"})[0]


def _with_fid(monkeypatch, result):
    """FID on (the suite hides the Inception weights): the pass is replaced by ``result`` (a dict, or an exception)."""
    monkeypatch.setattr(generation, "_weights_missing", lambda: "")
    calls = []

    def fake(cfg, gen, shape, device, progress=False, resume_dir=None, **kw):
        calls.append(resume_dir)
        if isinstance(result, BaseException):
            raise result
        return dict(result)

    monkeypatch.setattr(generation, "fid_of_generator", fake)
    monkeypatch.setattr(generation.GenerationTask, "say_estimate", lambda *a, **k: None)
    return calls


def test_an_interrupted_fidelity_pass_keeps_the_accuracies_and_a_resume_completes_it(tmp_path, monkeypatch, capsys):
    from dpgen.sweeps import job_row
    from dpgen.train.run_record import read_run

    run = tmp_path / "run"
    _with_fid(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        run_task(compose_config(ARGS), run)
    assert "evaluation interrupted" in capsys.readouterr().err
    part = json.loads((run / "metrics.json").read_text())
    assert part["evaluation_complete"] is False and "resume=auto" in part["evaluation_left"]
    assert "fidelity pass" in part["evaluation_left"]
    assert part["downstream"]["logreg"]["test_acc"] > 0 and "fid" not in part  # LogReg kept, no FID invented
    assert read_run(run).status == "evaluating" and read_run(run).metrics is None  # not a finished result
    row = job_row(run, tmp_path)
    assert row["status"].startswith("trained, evaluation interrupted") and row["epsilon"] == pytest.approx(
        part["privacy"]["epsilon_spent"])
    ledger = (run / "checkpoints" / "ledger.json").read_text()
    from dpgen.tasks.finished_run import load_generator

    assert load_generator(run)[1]["evaluation_complete"] is False  # dpgen sample / task=evaluate read its weights

    calls = _with_fid(monkeypatch, {"fid": 12.5, "fid_samples": 300})
    m = run_task(compose_config([*ARGS, "resume=auto"]), run)
    assert "evaluating again, with nothing trained or charged" in capsys.readouterr().out
    assert m["evaluation_complete"] is True and m["fid"] == 12.5 and calls == [run / "fid_partial"]
    assert m["steps"] == 12 and m["privacy"]["epsilon_spent"] == part["privacy"]["epsilon_spent"]
    assert (run / "checkpoints" / "ledger.json").read_text() == ledger  # nothing charged
    assert read_run(run).status == "finished"


def test_a_finished_evaluation_writes_complete_metrics(tmp_path, monkeypatch):
    _with_fid(monkeypatch, {"fid": 7.0, "fid_samples": 300})
    m = run_task(compose_config(ARGS), tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["evaluation_complete"] is True and on_disk["evaluation_complete"] is True
    assert "evaluation_left" not in on_disk and on_disk["fid"] == 7.0


def test_one_feature_pass_gives_fid_kid_and_prdc_and_caches_the_real_side(tmp_path, monkeypatch):
    import numpy as np

    from dpgen.eval import fid

    class Features:  # a stand-in for the Inception pass: features that depend on the images only
        weights_name = "stand-in"
        calls = []

        def __call__(self, images, image_shape=None, progress=False, name="images", resume_dir=None):
            self.calls.append(name)
            x = torch.as_tensor(images).reshape(len(images), -1).double().numpy()
            return np.tanh(x @ np.random.default_rng(0).normal(size=(x.shape[1], fid.FID_DIMS)))  # 2,048 like it

    ext = Features()
    monkeypatch.setattr(fid, "get_extractor", lambda *a, **k: ext)
    monkeypatch.setenv("DPGEN_OUTPUTS", str(tmp_path))
    g = torch.Generator().manual_seed(0)
    real, fake = torch.rand(40, 1, 4, 4, generator=g), torch.rand(30, 1, 4, 4, generator=g) * 0.2
    assert not fid.features_cached("toy_test", real, "stand-in")
    out = generation.fid_of_images(fake, "toy_test", real)
    assert fid.features_cached("toy_test", real, "stand-in") and ext.calls == ["toy_test", "synthetic"]
    assert (out["fid_samples"], out["fid_real_images"], out["kid_generated"], out["kid_real"]) == (30, 40, 30, 40)
    assert out["kid"] > 3 * out["kid_se"] > 0 and out["fid"] > 0 and "precision" in out
    assert "unbiased MMD^2" in out["kid_protocol"]
    generation.fid_of_images(fake, "toy_test", real)
    assert ext.calls == ["toy_test", "synthetic", "synthetic"]  # the real side read from the cache


def test_task_evaluate_says_how_long_its_generations_take_first(monkeypatch, capsys):
    from dpgen.eval import fid
    from dpgen.tasks.evaluate import say_generations_estimate

    monkeypatch.setattr(fid, "sgemm_rate", lambda: 100e9)
    rcfg = compose_config(["dataset=mnist", "task.eval_models=[logreg]", "task.n_synthetic=1000", "task.fid=true",
                           "trainer.device=cpu"])
    say_generations_estimate(rcfg, 5)
    out = capsys.readouterr().out
    assert out.startswith("[dpgen] evaluation: 5 synthetic set(s), each LogReg on 1,000 synthetic samples")
    assert "quick protocol, on 300 generated vs 1,000 real test images" in out and "on this CPU" in out
    rcfg = compose_config(["dataset=digits", "task.eval_models=[logreg]", "task.n_synthetic=100", "task.fid=false",
                           "trainer.device=cpu"])
    say_generations_estimate(rcfg, 1)  # a few seconds: nothing said
    assert capsys.readouterr().out == ""


def test_an_evaluation_shows_its_fidelity_pass_progress(monkeypatch):
    """task=evaluate's Inception pass (about 10 minutes for 10,000 images on 2 CPU cores) shows its progress as
    training's evaluation does, unless trainer.progress=false."""
    from dpgen.tasks import evaluate

    seen = []

    def fake(cfg, gen, shape, device, progress=False, resume_dir=None, **kw):
        seen.append(progress)
        return {}

    monkeypatch.setattr(generation, "evaluate_generator", lambda *a, **k: {})
    monkeypatch.setattr(generation, "fid_enabled", lambda cfg: True)
    monkeypatch.setattr(generation, "fid_of_generator", fake)
    for shown in (True, False):
        cfg = compose_config(["task=evaluate", "task.run=somewhere", f"trainer.progress={str(shown).lower()}"])
        gens = evaluate.RunGenerations(cfg, "somewhere")
        gens._loaded = (None, (1, 28, 28), "cpu", 100, {}, {})  # the finished run's generator, not needed here
        gens.evaluate(0)
    assert seen == [True, False]


def test_an_evaluation_asking_for_a_fid_count_computes_it_where_the_run_had_fid_off():
    """A run trained with task.fid=false (to be evaluated later), then task=evaluate task.run=<it>
    task.fid_samples=N: the FID is computed (the full protocol at N against the whole test split), where it was
    once silently skipped, DPImageBench's FID too; without a count the run's own setting stands."""
    from dpgen.tasks.evaluate import asked_protocol

    run = compose_config(["task.fid=false", "task.eval_models=[logreg]"])
    ask = compose_config(["task=evaluate", "task.run=somewhere", "task.fid_samples=10000",
                          "task.protocol=dpimagebench", "task.dpimagebench.n_synthetic=500"])
    got = asked_protocol(ask, run)
    assert generation.fid_enabled(got) and (got.task.fid_samples, got.task.fidelity) == (10000, "full")
    assert got.task.fid_real is None and got.task.protocol == "dpimagebench"
    assert got.task.dpimagebench.n_synthetic == 500 and got.task.eval_models == ["logreg"]
    kept = asked_protocol(compose_config(["task=evaluate", "task.run=somewhere"]), run)
    assert not generation.fid_enabled(kept) and kept.task == run.task
    # the threads are the evaluation's own, never those the run trained with
    one = compose_config(["trainer.threads=1"])
    assert asked_protocol(compose_config(["task=evaluate", "task.run=somewhere"]), one).trainer.threads == "auto"
    assert asked_protocol(compose_config(["task=evaluate", "task.run=somewhere", "trainer.threads=2"]),
                          one).trainer.threads in (2, "2")
