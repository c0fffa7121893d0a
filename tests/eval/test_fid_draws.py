"""scripts/fid_draws.py: independent draws of one generator, each measured once, summarised by mean and std."""

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


class _Gen:
    def sample(self, n, generator=None, device="cpu"):
        return torch.rand(n, 1, 28, 28, generator=generator), None


class _Cfg:
    class dataset:
        name = "mnist"
        shape = [1, 28, 28]


def test_each_draw_is_n_images_of_its_own_seed(monkeypatch):
    import fid_draws

    from dpgen import data
    from dpgen.eval import fid
    from dpgen.tasks import generation

    seen = []
    monkeypatch.setattr(fid, "get_extractor", lambda *a, **k: object())
    monkeypatch.setattr(data, "load_split", lambda cfg, split: None)
    monkeypatch.setattr(data, "as_tensors", lambda split: (torch.zeros(4, 1, 28, 28), None))
    monkeypatch.setattr(generation, "fid_of_images", lambda fake, name, x, *a, **k: seen.append(
        (fake.clone(), name, a[-1] if a else k.get("image_shape"))) or {"fid": float(fake.sum())})
    r1 = fid_draws.fid_of_draw(_Gen(), _Cfg, 1203, seed=1)
    fid_draws.fid_of_draw(_Gen(), _Cfg, 1203, seed=1001)
    r3 = fid_draws.fid_of_draw(_Gen(), _Cfg, 1203, seed=1)
    assert [s[0].shape[0] for s in seen] == [1203, 1203, 1203]  # drawn in chunks of 500, all of them
    assert seen[0][1] == "mnist_test" and seen[0][2] == (1, 28, 28)
    assert torch.equal(seen[0][0], seen[2][0]) and r1 == r3  # a seed draws the same images again
    assert not torch.equal(seen[0][0], seen[1][0])  # another seed, other images


def test_summary_is_the_mean_and_sample_std_of_the_measured_draws():
    import fid_draws

    s = fid_draws.summary([70.0, 74.0, None, 78.0])
    assert s["n_draws"] == 3 and math.isclose(s["fid_mean"], 74.0) and math.isclose(s["fid_std"], 4.0)
    assert fid_draws.summary([73.6]) == {"fid_mean": 73.6, "fid_std": None, "n_draws": 1}
    assert fid_draws.summary([None])["fid_mean"] is None


def test_main_writes_every_draw_and_the_summary_per_run(monkeypatch, tmp_path):
    import json

    import fid_draws

    from dpgen import data, release
    from dpgen.eval import fid

    monkeypatch.setattr(fid, "get_extractor", lambda *a, **k: object())
    asked = []
    monkeypatch.setattr(release, "load_generator", lambda run, device="cpu", sharpen=None, data_root=None: asked.append(sharpen) or (
        _Cfg, {}, _Gen(), None, None, None))
    monkeypatch.setattr(fid_draws, "fid_of_draw", lambda gen, cfg, n, seed, device="cpu": {
        "fid": float(seed % 7), "precision": 0.5, "recall": 0.25})
    out = tmp_path / "draws.json"
    fid_draws.main(["runA", "runB", "--draws", "3", "--n", "10", "--out", str(out)])
    rows = json.loads(out.read_text())
    assert [r["run"] for r in rows] == ["runA", "runB"]
    assert [d["seed"] for d in rows[0]["draws"]] == [1, 1001, 2001] and rows[0]["n_draws"] == 3
    assert math.isclose(rows[1]["fid_mean"], (1 + 1001 % 7 + 2001 % 7) / 3)
    assert asked == [None, None] and rows[0]["sharpen"] is None
    fid_draws.main(["runA", "--draws", "1", "--n", "10", "--sharpen", "16", "--sharpen-at", "0.4", "--out", str(out)])
    assert asked[-1] == (16.0, 0.4) and json.loads(out.read_text())[0]["sharpen"] == [16.0, 0.4]


@pytest.mark.parametrize("script", ["fid_draws", "fidelity_of_run"])
@pytest.mark.parametrize("bad", [["--sharpen", "-1"], ["--sharpen", "16", "--sharpen-at", "1"],
                                 ["--sharpen", "16", "--sharpen-at", "0"]])
def test_a_bad_curve_is_refused_naming_both_values(script, bad, capsys):
    import importlib

    mod = importlib.import_module(script)
    with pytest.raises(SystemExit) as e:
        mod.main(["runA", *bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--sharpen {float(bad[1])}" in err and "--sharpen-at" in err and ("slope must be" in err or "centre must lie" in err)
