"""The DP-SWD computed tables (Table 4's noise, Figure 1's sensitivity check, Figure 2's toy) and the real-data FID
tables, each run through the one table runner (``dpgen table <name> --scale S``) as ``make`` runs it."""

import csv
import math

import numpy as np
import pytest
import torch

from dpgen.tables import declared


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _header(path):
    with open(path) as f:
        return next(csv.reader(f))


def test_dpswd_table4_noise_is_a_computed_table(outputs_tmp):
    """make table-dpswd-noise: the authors' conventions reproduce every published sigma within 2%; Eq. 6 as
    written gives the numbers the old program gave (VisDA needs less than half the published noise)."""
    assert declared.main(["dpswd_table4_noise", "--scale", "paper"]) == 0
    path = outputs_tmp / "tables" / "dpswd_table4_noise.csv"
    assert _header(path) == ["data", "delta", "d", "k", "N", "epochs", "batch_size", "bound", "sigma_paper",
                             "sigma_ours", "sigma_paper_convention"]
    rows = {r["data"]: r for r in _rows(path)}
    assert len(rows) == 8
    for r in rows.values():
        assert float(r["sigma_paper_convention"]) == pytest.approx(float(r["sigma_paper"]), rel=0.02), r["data"]
    assert float(rows["VisDA"]["sigma_ours"]) == 2.9476 and float(rows["MNIST (c)"]["sigma_ours"]) == 0.8531
    md = (outputs_tmp / "tables" / "dpswd_table4_noise.md").read_text()
    assert "run with --scale alternatives" in md and "VisDA: published 6.4 vs ours 2.948" in md


def test_dpswd_sensitivity_check_writes_the_grid_and_figure_1(outputs_tmp):
    """make fig-dpswd-sensitivity: the (d, k, delta) grid (Lemma 2 certified on every cell) and Figure 1."""
    assert declared.main(["dpswd_sensitivity_check", "--scale", "paper"]) == 0
    assert (outputs_tmp / "figures" / "dpswd_fig1_sensitivity.png").stat().st_size > 10_000
    rows = _rows(outputs_tmp / "tables" / "dpswd_sensitivity_check.csv")
    assert len(rows) == 4 * 5 * 3
    for r in rows:
        d, k = int(r["d"]), int(r["k"])
        assert float(r["mean"]) == pytest.approx(k / d)  # E H = k E Beta(1/2, (d-1)/2) = k / d
        assert float(r["std"]) == pytest.approx(math.sqrt(k * 2 * (d - 1) / (d * d * (d + 2))))
        assert r["q_below_bernstein"] == r["chernoff_below_bernstein"] == "True"
        assert float(r["q_saddlepoint"]) <= float(r["q_chernoff"]) <= float(r["bernstein"])
    first = rows[0]  # the old program's numbers (seed 0: the grid's Monte Carlo draws from seed 1)
    assert (first["d"], first["k"], first["delta"]) == ("50", "10", "0.01")
    assert float(first["q_saddlepoint"]) == pytest.approx(0.45199579776493637, rel=1e-12)
    assert float(first["q_mc"]) == pytest.approx(0.451555851816512, rel=1e-12)
    md = (outputs_tmp / "tables" / "dpswd_sensitivity_check.md").read_text()
    assert "60/60 cells" in md and "mean k/d = 0.2551" in md


def test_dpswd_toy_smoke(outputs_tmp):
    """make fig-dpswd-toy at the smoke scale: DP-SWD follows SWD's trend in c with a positive noise offset, and the
    values are the old program's."""
    from dpgen.tables import dpswd_toy

    assert declared.main(["dpswd_toy", "--scale", "smoke"]) == 0
    path = outputs_tmp / "tables" / "dpswd_toy.csv"
    assert _header(path) == ["sigma", "n", "c", "population", "swd_mean", "swd_std", "dpswd_mean", "dpswd_std",
                             "offset"]
    assert (outputs_tmp / "figures" / "dpswd_fig2_toy.png").stat().st_size > 10_000
    md = (outputs_tmp / "tables" / "dpswd_toy.md").read_text()
    assert "Verdict" in md and "Noise offset" in md and "(smoke scale)" in md
    rows = [{k: float(v) for k, v in r.items()} for r in _rows(path)]
    assert len(rows) == 6 * 2 * 2  # c grid x n x sigma
    assert [r["c"] for r in rows[:4]] == [0.0, 0.0, 0.2, 0.2]
    assert rows[0]["swd_mean"] == pytest.approx(0.029379654675722122, rel=1e-6)  # the old program's first row
    for r in rows:
        assert r["population"] == pytest.approx(r["c"] ** 2)  # a mean shift: SWD_2^2 = DP-SWD_2^2 = c^2
        assert r["offset"] > 0  # the noise adds a positive finite-sample offset
        assert abs(r["swd_mean"] - r["population"]) < 0.1 + 0.3 * r["population"]
    for f in dpswd_toy.findings(rows):
        assert f["spearman"] > 0.9 and f["min_at_c0"]


class _LinearFeatures:
    """A stand-in for the Inception pass (tested in tests/eval): a fixed random linear map of the pixels to 2048
    features, so the tables' logic runs in a second and its FID can be recomputed here."""
    weights_name = "linear-test"

    def __init__(self):
        self.map = torch.randn(28 * 28, 2048, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def __call__(self, images, image_shape=None, progress=False, name="images"):
        return (torch.as_tensor(images).double().reshape(len(images), -1) @ self.map).numpy()


@pytest.fixture
def linear_fid(monkeypatch, outputs_tmp):
    import dpgen.eval.fid as fid

    ext = _LinearFeatures()
    monkeypatch.setattr(fid, "get_extractor", lambda *a, **k: ext)
    return ext


def test_fid_real_data_smoke_one_table_per_dataset(outputs_tmp, fake_data_root, linear_fid):
    """make fid-real-data at the smoke scale: a table per data set (mnist's keeps the bare name), FID after every
    chunk equal to the Frechet distance of the first n training and n_test test images' features; only the test
    split's features cached; no paper value beside a random-weight FID."""
    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.eval.fid import fid_from_activations

    assert declared.main(["fid_real_data", "--scale", "smoke", "--data-root", str(fake_data_root),
                          "--datasets", "mnist,fashion_mnist", "--no-progress"]) == 0
    for ds, name in (("mnist", "fid_real_data"), ("fashion_mnist", "fid_real_data_fashion_mnist")):
        rows = _rows(outputs_tmp / "tables" / f"{name}.csv")
        assert [(r["dataset"], r["n_train"], r["n_test"], r["fid_paper"]) for r in rows] == [
            (ds, "20", "40", ""), (ds, "40", "40", "")]
        cfg = compose_config([f"dataset={ds}", f"dataset.data_root={fake_data_root}"])
        train = as_tensors(load_split(cfg.dataset, "train"))[0][:40]
        test = as_tensors(load_split(cfg.dataset, "test"))[0][:40]
        assert float(rows[1]["fid"]) == pytest.approx(
            fid_from_activations(linear_fid(train), linear_fid(test)), abs=1e-3)
    cached = sorted(p.name for p in (outputs_tmp / "fid_stats").iterdir())
    assert len(cached) == 4 and all("_test_n40_" in n for n in cached)  # the training split never
    md = (outputs_tmp / "tables" / "fid_real_data.md").read_text()
    assert "weights: random" in md and "first 40 test images" in md


def test_fid_real_lowpass_and_tf1_tables(outputs_tmp, fake_data_root, linear_fid, tmp_path):
    """The two variants write their own files; the paper's 1.6 stands beside mnist's plain row with the real
    weights only; a bad band is refused, naming it."""
    root = ["--data-root", str(fake_data_root), "--datasets", "mnist", "--no-progress"]
    assert declared.main(["fid_real_lowpass", "--scale", "smoke", *root]) == 0
    low = _rows(outputs_tmp / "tables" / "fid_real_lowpass.csv")
    assert [(r["lowpass"], r["n_train"], r["fid_paper"]) for r in low] == [("10", "40", ""), ("14", "40", "")]
    assert float(low[0]["fid"]) != pytest.approx(float(low[1]["fid"]), rel=1e-3)  # the band moves it
    assert declared.main(["fid_real_data_tf1_resize", "--scale", "smoke", *root]) == 0
    assert "tf1 resize" in (outputs_tmp / "tables" / "fid_real_data_tf1_resize.md").read_text()
    spec = (declared.TABLE_DIR / "fid_real_data.yaml").read_text()
    yaml = tmp_path / "fid_real_data.yaml"
    yaml.write_text(spec + "  real: {n_train: 20, chunk: 20, n_test: 40}\n  bad: {n_train: 20, lowpass: [0]}\n")
    assert declared.main([str(yaml), "--scale", "real", *root]) == 0
    assert [r["fid_paper"] for r in _rows(outputs_tmp / "tables" / "fid_real_data.csv")] == ["1.6"]
    assert declared.main([str(yaml), "--scale", "bad", *root]) == 2


def test_fid_real_refuses_bad_settings():
    from dpgen.tables.fid_real import _settings

    for bad, key in (({"lowpass": [0]}, "lowpass=[0]"), ({"n_train": 1}, "n_train=1"), ({"resize": "tf2"}, "tf2"),
                     ({"weights": "imagenet"}, "imagenet"), ({"n_test": "all"}, "n_test='all'")):
        with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
            _settings(bad)
    assert _settings({})[:2] == (60000, 10000) and np.array_equal(_settings({"lowpass": [10, 14]})[2], [10, 14])
