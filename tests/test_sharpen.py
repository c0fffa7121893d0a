"""model.sharpen: a contrast curve on the released samples only (post-processing): its shape, that training
never sees it, and that a run's evaluation, its release and task=evaluate all draw through it."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from dpgen import release
from dpgen.models import released_generator, sharpen
from dpgen.models.generators import SharpenedSamples, make_generator

QUICK = ["method=dpsinkhorn", "dataset=digits", "trainer.steps=40", "task.n_synthetic=600",
         "task.eval_models=[logreg]", "task.eval_max_epochs=3", "trainer.progress=false", "task.fid=false"]


def _run_folder(out: str) -> Path:
    return Path(re.search(r"files: (\S+?metrics\.json)", out).group(1)).parent


@pytest.mark.parametrize("k,at", [(1e-3, 0.5), (4.0, 0.3), (16.0, 0.5), (60.0, 0.7)])
def test_the_curve_keeps_0_and_1_is_monotone_and_stays_in_range(k, at):
    x = torch.linspace(0, 1, 1001)
    y = sharpen(x, k, at)
    assert y[0].item() == pytest.approx(0.0, abs=1e-6) and y[-1].item() == pytest.approx(1.0, abs=1e-6)
    assert bool((y[1:] >= y[:-1] - 1e-6).all()) and 0.0 <= y.min() and y.max() <= 1.0
    # the logistic, rescaled: its value at the centre is (0.5 - s(-k at)) / (s(k (1 - at)) - s(-k at))
    s = torch.sigmoid
    lo, hi = s(torch.tensor(-k * at, dtype=torch.float64)), s(torch.tensor(k * (1 - at), dtype=torch.float64))
    assert sharpen(torch.tensor([at]), k, at).item() == pytest.approx(((0.5 - lo) / (hi - lo)).item(), abs=1e-5)


def test_a_small_slope_is_the_identity_and_a_large_one_a_threshold():
    x = torch.rand(5000, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(sharpen(x, 1e-3, 0.5), x, atol=1e-4)
    far = (x - 0.4).abs() > 0.05
    assert torch.equal(sharpen(x, 400.0, 0.4)[far].round(), (x[far] > 0.4).float())
    # values outside [0, 1] (an unclamped generator) are clamped first; non-finite ones do not leak through
    assert sharpen(torch.tensor([-3.0, 7.0, float("inf"), float("nan")]), 8.0).tolist() == pytest.approx(
        [0.0, 1.0, 1.0, 0.0], abs=1e-6)


def test_the_wrapper_sharpens_exactly_the_inner_samples_and_only_when_asked():
    gen = make_generator("mlp", (1, 8, 8), 10, 10)
    wrapped = SharpenedSamples(gen, 16.0, 0.4)
    x0, y0 = gen.sample(50, generator=torch.Generator().manual_seed(3))
    x1, y1 = wrapped.sample(50, generator=torch.Generator().manual_seed(3))
    assert torch.equal(y0, y1) and torch.allclose(x1, sharpen(x0, 16.0, 0.4))
    assert wrapped.num_classes == 10 and wrapped.out_shape == (1, 8, 8)

    class Off:
        sharpen, sharpen_at = None, 0.5

    class On:
        sharpen, sharpen_at = 16.0, 0.4

    assert released_generator(gen, Off) is gen and released_generator(gen, None) is gen
    assert isinstance(released_generator(gen, On), SharpenedSamples)


def test_a_run_evaluates_and_releases_through_the_curve_and_trains_without_it(run_cli, tmp_path):
    code, out = run_cli(*QUICK, "model.sharpen=null", f"hydra.run.dir={tmp_path / 'plain'}")
    assert code == 0, out[-2000:]
    plain = json.loads((_run_folder(out) / "metrics.json").read_text())
    code, out = run_cli(*QUICK, "model.sharpen=30", "model.sharpen_at=0.4")
    assert code == 0, out[-2000:]
    run = _run_folder(out)
    sharp = json.loads((run / "metrics.json").read_text())
    assert sharp["sharpen"] == {"slope": 30.0, "at": 0.4} and "sharpen" not in plain
    # training never saw the curve: the same seed trains the same weights, and spends the same epsilon
    assert sharp["privacy"]["epsilon_spent"] == plain["privacy"]["epsilon_spent"]
    assert sharp["downstream"]["spread"] != plain["downstream"]["spread"]  # what was evaluated did change

    from dpgen.tasks.finished_run import load_generator

    _, _, gen, _, _, _ = load_generator(run)
    assert isinstance(gen, SharpenedSamples)
    x_plain = gen.inner.sample(200, generator=torch.Generator().manual_seed(5))[0]
    assert torch.allclose(gen.sample(200, generator=torch.Generator().manual_seed(5))[0], sharpen(x_plain, 30.0, 0.4))
    assert release.main([str(run)]) == 0
    with np.load(run / "release" / "synthetic.npz") as f:
        x = f["x"]
    assert np.mean((x < 0.05) | (x > 0.95)) > 0.8  # a steep curve: most pixels pushed to 0 or 1
    sheet = json.loads((run / "release" / "datasheet.json").read_text())
    assert "slope 30.0" in sheet["post_processing"]
    assert "post-processing | model.sharpen" in (run / "release" / "DATASHEET.md").read_text()

    # task=evaluate task.run: the run's own curve, or another one given on the command line (0: off)
    code, out = run_cli("task=evaluate", f"task.run={run}", f"hydra.run.dir={run.parent / 'eval'}")
    assert code == 0, out[-2000:]
    ev = json.loads((_run_folder(out) / "metrics.json").read_text())
    assert ev["sharpen"] == {"slope": 30.0, "at": 0.4}
    assert ev["per_generation"][0]["logreg"] == pytest.approx(sharp["downstream"]["logreg"]["test_acc"], abs=1e-9)
    code, out = run_cli("task=evaluate", f"task.run={run}", "task.sharpen=0", f"hydra.run.dir={run.parent / 'eval0'}")
    assert code == 0, out[-2000:]
    off = json.loads((_run_folder(out) / "metrics.json").read_text())
    assert off["sharpen"] is None and off["per_generation"][0]["spread_ratio"] != ev["per_generation"][0]["spread_ratio"]
