"""Fidelity beside accuracy (issue 53): the class-mean baseline, the intra-class spread ratio, precision / recall /
density / coverage (the prdc package against the papers' definitions) and the content-keyed FID feature cache."""

import itertools

import numpy as np
import pytest
import torch

from dpgen.eval.fidelity import class_mean_baseline, intra_class_spread, prdc, set_fidelity, spread_ratio


def _clusters(n_per=50, seed=0, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    y = torch.arange(3).repeat_interleave(n_per)
    return centres[y] + spread * torch.randn(len(y), 2, generator=g), y


def test_class_mean_baseline_is_the_nearest_synthetic_mean():
    x, y = _clusters()
    # synthetic class means exactly at the centres: every well-separated test point is classified right
    means = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    r = class_mean_baseline(means, torch.arange(3), x, y)
    assert r == {"test_acc": 100.0, "classes": 3}
    # class 2's synthetic mean sits on class 1's centre: class 2 is never predicted, class 1 wins ties by index
    bad = torch.tensor([[0.0, 0.0], [3.0, 0.0], [3.0, 0.0]])
    r = class_mean_baseline(bad, torch.arange(3), x, y)
    assert r["test_acc"] == pytest.approx(100.0 * 2 / 3)
    # by hand on four points: means (0, 0) and (2, 0); the test point (0.9, 0) is nearer class 0's mean
    r = class_mean_baseline(torch.tensor([[-1.0, 0], [1, 0], [1, 0], [3, 0]]), torch.tensor([0, 0, 1, 1]),
                            torch.tensor([[0.9, 0.0], [1.1, 0.0]]), torch.tensor([1, 1]))
    assert r["test_acc"] == 50.0
    with pytest.raises(ValueError, match="labels"):
        class_mean_baseline(means, torch.arange(2), x, y)


def test_intra_class_spread_is_the_mean_pairwise_distance():
    x = torch.tensor([[0.0], [1.0], [3.0], [10.0], [10.0]])
    y = torch.tensor([0, 0, 0, 1, 1])
    s = intra_class_spread(x, y)
    assert s[0] == pytest.approx((1 + 3 + 2) / 3) and s[1] == pytest.approx(0.0)
    # a synthetic set that is the real one shrunk by half towards each class mean: ratio 0.5 exactly
    xr, yr = _clusters()
    means = torch.stack([xr[yr == c].mean(0) for c in range(3)])
    xs = means[yr] + 0.5 * (xr - means[yr])
    r = spread_ratio(xs, yr, xr, yr)
    assert r["ratio"] == pytest.approx(0.5) and all(v == pytest.approx(0.5) for v in r["per_class"].values())
    # ten templates (every sample its class mean): spread 0, and their class means alone classify as well
    t = set_fidelity(means[yr], yr, xr, yr)
    assert t["spread_ratio"] == 0.0
    assert t["class_mean"]["test_acc"] == class_mean_baseline(xr, yr, xr, yr)["test_acc"]


def _brute_prdc(real, fake, k):
    """The definitions, loop by loop: Kynkaenniemi et al. 2019 (precision, recall: k-NN balls of the other
    set's samples) and Naeem et al. 2020 (density, coverage: k-NN balls of the real samples)."""
    d = lambda a, b: float(np.linalg.norm(a - b))  # noqa: E731

    def radius(s, i):
        return sorted(d(s[i], s[j]) for j in range(len(s)) if j != i)[k - 1]

    r_real = [radius(real, i) for i in range(len(real))]
    r_fake = [radius(fake, j) for j in range(len(fake))]
    precision = np.mean([any(d(f, real[i]) < r_real[i] for i in range(len(real))) for f in fake])
    recall = np.mean([any(d(r, fake[j]) < r_fake[j] for j in range(len(fake))) for r in real])
    density = np.sum([[d(f, real[i]) < r_real[i] for i in range(len(real))] for f in fake]) / (k * len(fake))
    coverage = np.mean([min(d(real[i], f) for f in fake) < r_real[i] for i in range(len(real))])
    return {"precision": precision, "recall": recall, "density": density, "coverage": coverage}


@pytest.mark.parametrize("k, shift", itertools.product([1, 3], [0.0, 0.7]))
def test_prdc_matches_the_papers_definitions(k, shift):
    rng = np.random.default_rng(k)
    real = rng.normal(size=(23, 4)).astype(np.float32)
    fake = (rng.normal(size=(19, 4)) * 0.6 + shift).astype(np.float32)
    got = prdc(real, fake, k=k)
    want = _brute_prdc(real.astype(np.float64), fake.astype(np.float64), k)
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-9), key


def test_prdc_tells_templates_from_a_matching_distribution():
    rng = np.random.default_rng(0)
    real = rng.normal(size=(400, 8))
    same = prdc(real, rng.normal(size=(400, 8)), k=5)
    templates = prdc(real, np.repeat(rng.normal(size=(10, 8)) * 0.1, 40, axis=0), k=5)
    assert same["recall"] > 0.8 and same["coverage"] > 0.8 and 0.7 < same["density"] < 1.3
    assert templates["recall"] < 0.1 and templates["coverage"] < 0.2
    ident = prdc(real, real, k=5)  # a set against itself: each point in its own ball, k points a ball
    assert ident["precision"] == 1.0 and ident["recall"] == 1.0 and ident["coverage"] == 1.0
    assert ident["density"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="more than k"):
        prdc(real[:5], real[:5], k=5)


def test_real_features_are_cached_by_content(tmp_path):
    from dpgen.eval.fid import InceptionFeatures, content_digest, real_features, real_statistics

    ext = InceptionFeatures("random", device="cpu", batch_size=8)
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    a = real_features("digits_test", x, tmp_path, extractor=ext)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and any(f.startswith("fid_features_digits_test_n4_") for f in files)
    assert all(content_digest(x) in f for f in files)
    calls = []
    orig = ext.__call__

    class Spy:  # the second read is the cache's: no feature pass
        def __getattr__(self, name):
            return getattr(ext, name)

        def __call__(self, *args, **kwargs):
            calls.append(1)
            return orig(*args, **kwargs)

    spy = Spy()
    np.testing.assert_allclose(real_features("digits_test", x, tmp_path, extractor=spy), a, rtol=1e-6)
    mu, _ = real_statistics("digits_test", x, tmp_path, extractor=spy)
    assert not calls and mu.shape == (2048,)
    y = x.clone()
    y[0, 0, 0, 0] = 1 - y[0, 0, 0, 0]  # one pixel changed: another file, another feature pass
    real_features("digits_test", y, tmp_path, extractor=spy)
    assert calls and len(list(tmp_path.iterdir())) == 4
    assert content_digest((x * 255).round().to(torch.uint8)) == content_digest((x * 255).round() / 255)


def test_task_fid_is_true_false_or_auto():
    from dpgen.config import compose_config

    assert compose_config([]).task.fid == "auto"
    assert compose_config(["task.fid=false"]).task.fid is False
    with pytest.raises(Exception, match="task.fid"):
        compose_config(["task.fid=sometimes"])
    with pytest.raises(Exception, match="task.fid_samples"):
        compose_config(["task.fid_samples=1"])


@pytest.mark.parametrize("models", [["logreg"], []])
def test_a_generation_run_reports_its_class_mean_baseline_and_spread(tmp_path, models, capsys):
    """Every labelled generation run, with or without classifiers: the baseline and spread in metrics.json and
    its summary; FID (task.fid=auto) n/a with the reason where the weights are absent (the suite hides them)."""
    import json

    from dpgen.config import compose_config
    from dpgen.tasks import run as run_task

    cfg = compose_config(["trainer.progress=false", "trainer.steps=20", "task.n_synthetic=300",
                          f"task.eval_models=[{','.join(models)}]"])
    m = run_task(cfg, tmp_path / "run")
    ds = m["downstream"]
    assert 0.0 <= ds["class_mean"]["test_acc"] <= 100.0 and ds["class_mean"]["classes"] == 10
    assert ds["spread_ratio"] > 0 and set(ds["spread"]["per_class_ratio"]) == {str(c) for c in range(10)}
    assert m["fid"] is None and "make fid-weights" in m["fid_missing"]
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["downstream"]["spread_ratio"] == ds["spread_ratio"]
    from dpgen.tasks.generation import GenerationTask

    capsys.readouterr()
    GenerationTask.summary(GenerationTask.__new__(GenerationTask), m, tmp_path / "run")
    out = capsys.readouterr().out
    assert "class-mean baseline:" in out and "intra-class spread" in out and "FID: n/a" in out


def test_table_rows_read_fidelity_from_either_result_shape():
    from dpgen.tables.grid import fidelity_cells, metric_values

    own = {"downstream": {"logreg": {"test_acc": 80.0}, "class_mean": {"test_acc": 79.5}, "spread_ratio": 0.25},
           "fid": 40.0, "precision": 0.5, "recall": 0.1, "density": 0.4, "coverage": 0.3,
           "fid_protocol": "2000 generated vs 10000 real test images (28 x 28); pytorch-fid's ..."}
    table = {"class_mean_values": [81.0, 83.0], "spread_ratio_values": [0.5, 0.7], "fid_values": [30.0, 34.0],
             "recall_values": [0.2, 0.4]}
    assert metric_values(own, "class_mean") == [79.5] and metric_values(own, "logreg") == [80.0]
    assert metric_values(own, "cnn") == [] and metric_values(table, "fid") == [30.0, 34.0]
    row = fidelity_cells([own, table])
    assert row["fid"] == pytest.approx(34.67, abs=0.01) and row["class_mean"] == pytest.approx(81.17, abs=0.01)
    assert row["recall"] == pytest.approx(0.2333, abs=1e-4) and row["spread_ratio"] == pytest.approx(0.4833, abs=1e-4)
    assert row["fid_protocol"].startswith("2000 generated vs 10000")
    assert fidelity_cells([{"fid_missing": "weights absent"}])["fid"].startswith("n/a: weights absent")


def test_fid_real_data_table_caches_the_test_split_and_never_the_training_split(tmp_path, monkeypatch,
                                                                                 fake_data_root):
    """make fid-real-data: FID after each chunk of training images, the paper's value beside it; the test
    split's features cached, the (private) training split's never written."""
    import csv

    import dpgen.eval.fid as fid
    from dpgen.tables import declared

    class PixelFeatures:  # the table's logic, not the network (InceptionFeatures is tested above): 2048 features
        weights_name = "pixels-test"

        def __call__(self, images, image_shape=None, progress=False, name="images"):
            x = torch.as_tensor(images).float().reshape(len(images), -1)
            return (x @ torch.randn(x.shape[1], 2048, generator=torch.Generator().manual_seed(0))).double().numpy()

    monkeypatch.setattr(fid, "get_extractor", lambda *a, **k: PixelFeatures())
    monkeypatch.setenv("DPGEN_OUTPUTS", str(tmp_path / "out"))
    tables = tmp_path / "out" / "tables"

    def table(name, *settings):  # make fid-real-data's command, its settings given with --set
        assert declared.main([name, "--scale", "paper", "--datasets", "mnist", "--data-root", str(fake_data_root),
                              "--set", *settings]) == 0
        tag = "_".join(s.replace("=", "").replace("[", "").replace("]", "").replace(",", "-") for s in settings)
        return list(csv.DictReader(open(tables / f"{name}_{tag}.csv")))

    rows = table("fid_real_data", "n_train=20", "chunk=10")
    assert [r["n_train"] for r in rows] == ["10", "20"] and all(r["n_test"] == "100" for r in rows)
    assert all(float(r["fid_paper"]) == 1.6 and float(r["fid"]) > 0 for r in rows)
    cached = sorted(p.name for p in (tmp_path / "out" / "fid_stats").iterdir())
    assert len(cached) == 2 and all("mnist_test_n100" in n for n in cached)
    # lowpass: the same table for the training images through the DCT barrier, in its own file; the full-band
    # projection is the identity, so it gives the plain row's FID; a narrow band moves it
    low = table("fid_real_lowpass", "n_train=20", "chunk=20", "lowpass=[28,2]")
    assert [(r["lowpass"], r["n_train"]) for r in low] == [("28", "20"), ("2", "20")]
    assert float(low[0]["fid"]) == pytest.approx(float(rows[1]["fid"]), rel=1e-4)
    assert float(low[1]["fid"]) != pytest.approx(float(low[0]["fid"]), rel=1e-3) and low[0]["fid_paper"] == ""
    assert len(list((tmp_path / "out" / "fid_stats").iterdir())) == 2  # nothing of the training split cached
    # resize tf1: its own table and its own cached test features (the extractor's weights name is its key)
    tf1 = PixelFeatures()
    tf1.weights_name = "pixels-test+tf1-resize"
    monkeypatch.setattr(fid, "get_extractor", lambda *a, **k: tf1 if k.get("resize") == "tf1" else PixelFeatures())
    rows_tf1 = table("fid_real_data_tf1_resize", "n_train=20", "chunk=20")
    assert [r["n_train"] for r in rows_tf1] == ["20"] and float(rows_tf1[0]["fid_paper"]) == 1.6
    md = (tables / "fid_real_data_tf1_resize_n_train20_chunk20.md").read_text()
    assert "tf1 resize" in md and "(255 x - 128) / 128" in md
    cached = sorted(p.name for p in (tmp_path / "out" / "fid_stats").iterdir())
    assert len(cached) == 4 and sum("tf1-resize" in n for n in cached) == 2
