"""DPImageBench's protocol beside the papers' (task.protocol=dpimagebench, dpgen/eval/dpimagebench.py): their
precision / recall (k = 4, the point itself counted), their ResNet with the epoch kept on synthetic validation and
the test split read once after it, the counts passed through, 1 / (N ln N), the privacy report's not_covered line,
and the papers' default unchanged."""

import json
import math

import numpy as np
import pytest
import torch

from dpgen.config import compose_config
from dpgen.eval import dpimagebench as dib

TINY = ["dataset=digits", "trainer.progress=false", "trainer.epochs=null", "trainer.steps=15",
        "task.eval_models=[logreg]", "task.n_synthetic=200", "trainer.checkpoint_every=1000", "trainer.log_every=1000"]
PROTO = ["task.protocol=dpimagebench", "task.dpimagebench.n_synthetic=120", "task.dpimagebench.fid_real=60",
         "task.dpimagebench.epochs=2", "task.dpimagebench.depth=8", "task.fid=true"]


def _inside_brute(points, centres, k):
    """Share of ``points`` strictly inside some centre's ball, whose radius is its k-th smallest distance to the
    centres, itself included: the definition, one pair at a time."""
    c = np.asarray(centres, dtype=np.float64)
    d_cc = np.sqrt(((c[:, None, :] - c[None, :, :]) ** 2).sum(-1))
    radius = np.sort(d_cc, axis=1)[:, k - 1]
    d_pc = np.sqrt(((np.asarray(points, np.float64)[:, None, :] - c[None, :, :]) ** 2).sum(-1))
    return float((d_pc < radius[None, :]).any(axis=1).mean())


def test_precision_recall_count_the_point_itself_among_its_k_neighbours():
    """k = 4 with the point itself counted is the 3rd nearest other point: prdc's / recall_indicators' k = 3."""
    from dpgen.eval.fidelity import recall_indicators

    rng = np.random.default_rng(0)
    real, fake = rng.normal(size=(70, 5)), rng.normal(0.4, 1.2, size=(60, 5))
    pr = dib.knn_precision_recall(real, fake, k=4)
    assert pr["precision"] == pytest.approx(_inside_brute(fake, real, 4), abs=1e-12)
    assert pr["recall"] == pytest.approx(_inside_brute(real, fake, 4), abs=1e-12)
    assert pr["precision"] == pytest.approx(recall_indicators(fake, real, k=3).mean(), abs=1e-12)
    assert pr["recall"] == pytest.approx(recall_indicators(real, fake, k=3).mean(), abs=1e-12)
    assert pr["recall"] != pytest.approx(recall_indicators(real, fake, k=4).mean(), abs=1e-6)  # not "4 others"
    # on a line: real 0..9, radius = distance to the 3rd nearest other; fakes at 20 are outside, at 4.5 inside
    line = np.arange(10.0)[:, None]
    assert dib.knn_precision_recall(line, np.array([[4.5], [20.0], [21.0], [22.0]]), k=4)["precision"] == 0.25


def test_1_over_n_ln_n_is_their_delta():
    from dpgen.config import delta_n_ln_n

    assert delta_n_ln_n(55000) == pytest.approx(1.6657508770018431e-06, rel=1e-12)  # their logs: N = 55,000
    assert delta_n_ln_n(60000) == pytest.approx(1 / (60000 * math.log(60000)))
    cfg = compose_config(["dataset=mnist", "privacy.delta='${dpgen.delta_n_ln_n:${dataset.n_train}}'"])
    assert cfg.privacy.delta == pytest.approx(1.5148623e-06, rel=1e-6) and isinstance(cfg.privacy.delta, float)
    assert compose_config([]).privacy.delta == 1e-5  # a preset's delta is never changed silently


def test_protocol_keys_are_validated_with_the_fix():
    assert compose_config([]).task.protocol == "papers"
    d = compose_config([]).task.dpimagebench
    assert (d.n_synthetic, d.fid_real, d.epochs, d.depth) == (60000, None, 50, 110)  # theirs
    for bad, msg in [("task.protocol=dpimagebnch", "did you mean dpimagebench"),
                     ("task.dpimagebench.depth=9", "6 m \\+ 2"), ("task.dpimagebench.fid_real=5", "at least 12"),
                     ("task.dpimagebench.epochs=0", "positive integer")]:
        with pytest.raises(ValueError, match=f"(?i){msg}"):
            compose_config([bad])


def test_the_resnet_has_their_shape():
    net = dib.ResNet((1, 28, 28), 10, depth=110)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 109  # 1 + 3 stages x 18 blocks x 2, plus the head: 110 weighted layers
    assert {c.out_channels for c in convs} == {16, 32, 64}
    assert sum(p.numel() for p in net.parameters()) == pytest.approx(1.73e6, rel=0.01)  # ResNet-110 on CIFAR
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)
    assert dib.ResNet((1, 8, 8), 10, depth=8)(torch.rand(3, 64)).shape == (3, 10)


def _two_blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = (0.25 + 0.5 * y.float()[:, None, None, None] + 0.1 * torch.randn(n, 1, 8, 8, generator=g)).clamp(0, 1)
    return x, y


def test_the_epoch_is_chosen_on_synthetic_validation_and_the_test_split_read_once_after(monkeypatch):
    """A test split that refuses to be read before training has returned, and is read exactly once; the weights
    kept are the last epoch with the best validation accuracy."""
    state = {"trained": False, "reads": 0, "sel": None}
    real_train = dib.train_selected

    def train(*a, **k):
        out = real_train(*a, **k)
        state["trained"], state["sel"] = True, out
        return out

    monkeypatch.setattr(dib, "train_selected", train)
    x_test, y_test = _two_blobs(40, 1)

    def read_test():
        assert state["trained"], "the test split was read before the epoch was chosen"
        state["reads"] += 1
        return x_test, y_test

    x, y = _two_blobs(96, 0)
    r = dib.classify(x, y, read_test, n_classes=2, image_shape=(1, 8, 8), epochs=4, depth=8, seed=0)
    assert state["reads"] == 1 and r["n_fit"] + r["n_val"] == 96 and r["n_val"] == 8  # 1/12, theirs 5,000/60,000
    h = state["sel"]["history"]
    assert len(h) == 4 and r["val_acc"] == max(h) and r["best_epoch"] == max(i + 1 for i, a in enumerate(h)
                                                                              if a == max(h))
    assert r["test_acc"] > 90.0  # two separable blobs


def test_selection_loads_the_kept_epoch():
    """The model returned holds the averaged weights of the kept epoch: its validation accuracy is the one recorded."""
    x, y = _two_blobs(60, 2)
    torch.manual_seed(0)
    net = dib.ResNet((1, 8, 8), 2, depth=8)
    fit, val = dib.split_synthetic(y, 0)
    sel = dib.train_selected(net, x[fit], y[fit], x[val], y[val], epochs=3, lr=0.05)
    assert dib._accuracy(net, x[val], y[val], "cpu") == sel["val_acc"]


def test_a_tiny_run_names_its_counts_and_states_what_is_not_covered(tmp_path, monkeypatch, capsys):
    """digits, a few seconds: the counts and k reach the metrics, the ResNet runs, the privacy report lists the
    training-split statistics under not_covered (in metrics.json too), the summary says so in one line and names the
    counts below theirs. Pixel features stand in for Inception's (the suite hides the weights)."""
    from dpgen.tasks import run as run_task
    from dpgen.tasks.generation import GenerationTask

    seen = {}
    real_knn = dib.knn_precision_recall

    def knn(real, fake, k=4, *a, **kw):
        seen.update(k=k, n_real=len(real), n_fake=len(fake))
        return real_knn(real, fake, k, *a, **kw)

    monkeypatch.setattr(dib, "knn_precision_recall", knn)
    monkeypatch.setattr(dib, "inception_features",
                        lambda x, shape, device, **kw: torch.as_tensor(x).reshape(len(x), -1).double().numpy())
    m = run_task(compose_config([*TINY, *PROTO]), tmp_path / "run")
    b = m["dpimagebench"]
    # fid_real=60 of digits' 1,437: the records whose own hash position falls below 60 / 1437 (the one split of
    # private records), so about 60 and exactly those
    from dpgen.config import compose_config as _cc
    from dpgen.data import as_tensors, load_split
    from dpgen.data.holdout import held_out_mask

    X, y = as_tensors(load_split(_cc(["dataset=digits"]).dataset, "train"))[:2]
    expected = int(held_out_mask(X, y, 60 / 1437, salt=dib.FID_SUBSET_SALT).sum())
    assert m["protocol"] == "dpimagebench" and seen == {"k": 4, "n_real": expected, "n_fake": 120}
    assert 30 <= expected <= 100
    assert (b["n_synthetic"], b["fid_real"], b["fid_generated"], b["prdc_generated"], b["nearest_k"]) == \
        (120, 60, 120, 120, 4)
    assert b["resnet"]["epochs"] == 2 and b["resnet"]["depth"] == 8 and b["resnet"]["n_fit"] + b["resnet"]["n_val"] == 120
    assert 0 <= b["resnet"]["test_acc"] <= 100 and b["resnet"]["n_test"] == 360
    assert math.isfinite(b["fid"]) and 0 <= b["precision"] <= 1 and 0 <= b["recall"] <= 1
    assert b["delta"]["run"] == 1e-5 and not b["delta"]["equal"]
    assert any("n_synthetic 120" in s for s in b["below_theirs"]) and any("fid_real 60" in s for s in b["below_theirs"])
    nc = _text(json.loads((tmp_path / "run" / "metrics.json").read_text())["privacy"]["not_covered"])
    assert nc.count("the dpimagebench protocol's FID, precision and recall") == 1
    from dpgen.train.run_record import read_run  # the checkpoint's record (a release, a sweep row) says it too

    ck = _text(read_run(tmp_path / "run").privacy["not_covered"])
    assert ck.count("the dpimagebench protocol's FID, precision and recall") == 1
    capsys.readouterr()
    GenerationTask.summary(GenerationTask.__new__(GenerationTask), m, tmp_path / "run")
    out = capsys.readouterr().out
    assert sum("NOT covered by the run's guarantee" in line for line in out.splitlines()) == 1
    assert "counts below theirs" in out and "ResNet-8" in out


def test_the_training_split_pass_shows_progress_over_generated_images_only(capsys):
    """Their FID's Inception passes take minutes on a CPU: the generated images' pass shows a bar (their count is
    public), the private records' pass gets one fixed line, never a bar (it would count them), and without
    progress both are silent."""
    calls = []

    def features(x, shape, device, progress=False, name="images"):
        calls.append((len(x), bool(progress)))
        return torch.as_tensor(x).reshape(len(x), -1).double().numpy()

    g = torch.Generator().manual_seed(0)
    fake, private = torch.rand(40, 1, 4, 4, generator=g), torch.rand(37, 1, 4, 4, generator=g)
    out = dib.train_split_fidelity(fake, private, (1, 4, 4), "cpu", features=features, progress=True)
    assert calls == [(40, True), (37, False)] and math.isfinite(out["fid"])
    err = capsys.readouterr().err
    assert "no progress bar" in err and "37" not in err
    calls.clear()
    dib.train_split_fidelity(fake, private, (1, 4, 4), "cpu", features=features)
    assert calls == [(40, False), (37, False)] and capsys.readouterr().err == ""


def _text(not_covered):
    """A report's not_covered (a list, or one string joined by "; ") as one string."""
    return "; ".join(not_covered) if isinstance(not_covered, list) else str(not_covered or "")


def test_the_papers_default_leaves_metrics_keys_unchanged(tmp_path):
    """task.protocol=papers (the default) writes the keys it wrote before the protocol existed, and the same
    privacy report."""
    from dpgen.tasks import run as run_task

    a = run_task(compose_config([*TINY, "task.fid=false"]), tmp_path / "a")
    b = run_task(compose_config([*TINY, "task.fid=false", "task.protocol=papers"]), tmp_path / "b")
    assert "protocol" not in a and "dpimagebench" not in a and set(a) == set(b)
    assert "dpimagebench" not in _text(a["privacy"]["not_covered"]) and a["privacy"] == b["privacy"]


def test_the_report_side_states_it_once():
    from dpgen.privacy.report import RunFacts, run_report, train_split_not_covered

    rep = run_report({"private": True, "epsilon_spent": 1.0, "delta": 1e-5, "not_covered": ["x"]},
                     RunFacts(n=100, poisson=True, train_split_fidelity="dpimagebench"))
    assert _text(rep["not_covered"]).count("dpimagebench protocol") == 1
    assert train_split_not_covered(rep, "dpimagebench") == rep  # once
    joined = {"private": True, "not_covered": "the loss values"}  # a method's report may state one string
    assert _text(train_split_not_covered(train_split_not_covered(joined, "dpimagebench"), "dpimagebench")[
        "not_covered"]).count("dpimagebench protocol") == 1
    plain = run_report({"private": True, "epsilon_spent": 1.0, "delta": 1e-5}, RunFacts(n=100, poisson=True))
    assert "dpimagebench" not in _text(plain["not_covered"])
