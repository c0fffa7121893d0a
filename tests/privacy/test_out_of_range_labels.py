"""Issue 52 (section 5, item 3): a private record whose label lies outside [0, num_classes) contributes nothing.

A lazily read dataset (CelebA, a user's loader) has its labels checked by nobody before the step that draws
them; ``F.one_hot`` / ``F.cross_entropy`` raised there, a data-dependent stop outside the ledger. Each
mechanism that reads a private label now maps such a record to a zero contribution, as it maps a record with
non-finite values (``dpgen.utils.labels``). Checked through each method's real step: a Poisson batch
holding records labelled -1, num_classes and 10**9 (with ordinary, huge and NaN pixels) releases what the
batch without them releases, with the noise on and the same randomness; nothing reads a label on the host;
and a whole short run with such a record in the private set ends with the generator of the run in which
that record contributes nothing.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from dpgen.config import compose_config
from dpgen.methods.registry import DataInfo, build
from dpgen.tasks.generation import GenerationBatch

BAD_LABELS = (-1, 10, 10 ** 9)  # num_classes = 10


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors (tests/conftest.py)


def _digits(n=30, seed=0, side=8):
    from dpgen.data import load_dataset

    ds = load_dataset("digits", "train", **({} if side == 8 else {"resize": side}))
    X, Y = ds.tensors
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(X.shape[0], generator=g)[:n]
    return X[idx].float(), Y[idx].long()


def _with_bad(x, y, pixels=None):
    """The batch with one record per bad label appended (their pixels: copies of real ones, or ``pixels``)."""
    k = len(BAD_LABELS)
    extra = x[:k].clone() if pixels is None else torch.full((k, *x.shape[1:]), float(pixels))
    return torch.cat([extra[:1], x, extra[1:]]), torch.cat([torch.tensor(BAD_LABELS[:1]), y,
                                                            torch.tensor(BAD_LABELS[1:])])


def _sinkhorn(*overrides, name="dpsinkhorn"):
    cfg = compose_config([f"method={name}", "trainer.progress=false", *overrides])
    m = build(cfg, DataInfo(1437, (1, 8, 8), 10), 100, "generation")
    from dpgen.models import generator_from_config

    torch.manual_seed(0)
    return m, generator_from_config(cfg.model, (1, 8, 8), 10)


def _sinkhorn_release(m, gen, real, y, seed=5):
    """What the step hands the generator (its parameters' gradients), the mechanism's noise drawn from ``seed``."""
    gen.zero_grad(set_to_none=True)
    m.rng = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the same generated batch on both sides
    m.step({"generator": gen}, GenerationBatch(real, y, 30, torch.device("cpu")))
    return torch.cat([p.grad.flatten() for p in gen.parameters() if p.grad is not None])


SINKHORN_CASES = {
    "dpsinkhorn per-record, dct closed form (the embedded default)": (("model.generator=dct", "model.dct_size=8",
                                                                       "method.clip_mode=per_sample"), "dpsinkhorn", False),
    "dpsinkhorn per-record, autograd": (("model.generator=dct", "model.dct_size=8", "method.clip_mode=per_sample"),
                                        "dpsinkhorn", True),
    "dpsinkhorn batch clip (the paper's)": (("model.generator=dct", "model.dct_size=4", "method.clip_mode=batch"),
                                           "dpsinkhorn", False),
    "dpsinkhorn_param per-sample": (("model.generator=mlp", "method.clip_mode=per_sample"), "dpsinkhorn_param", False),
    "dpsinkhorn_param batch clip": (("model.generator=mlp", "method.clip_mode=batch"), "dpsinkhorn_param", False),
}


@pytest.mark.parametrize("case", list(SINKHORN_CASES))
@pytest.mark.parametrize("pixels", [None, 1e6, float("nan")])
def test_dpsinkhorn_step_releases_what_the_batch_without_bad_labels_releases(case, pixels):
    overrides, name, autograd = SINKHORN_CASES[case]
    m, gen = _sinkhorn(*overrides, name=name)
    if autograd:
        gen.decode_vjp = None  # the generic path: autograd through the decode
    x, y = _digits()
    clean = _sinkhorn_release(m, gen, x, y)
    bad_x, bad_y = _with_bad(x, y, pixels)
    out = _sinkhorn_release(m, gen, bad_x, bad_y)
    assert torch.isfinite(out).all()
    # the same release up to float rounding of sums with a few more exact zeros (the noise is identical)
    diff = float((out - clean).norm())
    assert diff <= 1e-5 * float(clean.norm())
    # and the check can fail: the same records with valid labels move the release far more than that
    ok_y = torch.where((bad_y < 0) | (bad_y >= 10), torch.full_like(bad_y, 3), bad_y)
    if pixels is None or pixels == pixels:  # (NaN pixels contribute nothing whatever the label)
        moved = float((_sinkhorn_release(m, gen, bad_x, ok_y) - clean).norm())
        assert moved > 1e-2 and diff <= 1e-3 * moved


def test_a_batch_of_bad_labels_only_releases_the_noise_of_an_empty_batch():
    for overrides, name, _ in (SINKHORN_CASES["dpsinkhorn per-record, dct closed form (the embedded default)"],
                               SINKHORN_CASES["dpsinkhorn batch clip (the paper's)"]):
        m, gen = _sinkhorn(*overrides, name=name)
        x, _ = _digits(3)
        empty = _sinkhorn_release(m, gen, None, None)
        only_bad = _sinkhorn_release(m, gen, x, torch.tensor(BAD_LABELS))
        assert torch.isfinite(only_bad).all() and float((only_bad - empty).norm()) <= 1e-5 * float(empty.norm())


def test_no_label_is_read_on_the_host(monkeypatch):
    """The label mask, the one-hot rows, the masked static divergence and the per-record gradients run without
    converting a tensor to a Python number (no host sync: a CUDA graph could capture them)."""
    from dpgen.losses.sinkhorn import conditional_rows, sinkhorn_divergence
    from dpgen.utils.labels import label_in_range

    m, gen = _sinkhorn("model.generator=dct", "model.dct_size=8", "method.clip_mode=per_sample")
    x, y = _with_bad(*_digits())
    code, y_fake = gen.sample_code(30)
    code = code.detach()

    def refuse(*_a, **_k):
        raise AssertionError("host read of a tensor")

    for attr in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__"):
        monkeypatch.setattr(torch.Tensor, attr, refuse)
    rows = conditional_rows(x, y, 10, 15.0, check=False)
    fake = torch.rand(30, 64 + 10, requires_grad=True)
    s = sinkhorn_divergence(fake, rows, 0.05, backend="static", diameter=30.0, y_mask=label_in_range(y, 10))
    s.backward()
    grads = list(m.record_code_gradients(gen, code, y_fake, x, y))
    monkeypatch.undo()
    assert torch.isfinite(fake.grad).all()
    g = grads[0]
    bad = (y < 0) | (y >= 10)
    assert torch.equal(g[bad], torch.zeros_like(g[bad])) and g[~bad].abs().sum() > 0


def test_masking_every_row_in_is_the_unmasked_arithmetic():
    """With every label in range the masked divergence is the old one bit for bit (runs are unchanged)."""
    from dpgen.losses.sinkhorn import sinkhorn_divergence

    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(20, 7, generator=g, requires_grad=True), torch.rand(25, 7, generator=g)
    a = sinkhorn_divergence(x, y, 0.05, backend="static", diameter=5.0)
    (ga,) = torch.autograd.grad(a, x)
    b = sinkhorn_divergence(x, y, 0.05, backend="static", diameter=5.0, y_mask=torch.ones(25, dtype=torch.bool))
    (gb,) = torch.autograd.grad(b, x)
    assert torch.equal(a, b) and torch.equal(ga, gb)
    # a masked row is as if absent (static and geomloss' tensorized backend)
    keep = torch.ones(25, dtype=torch.bool)
    keep[[3, 17]] = False
    for backend in ("static", "tensorized"):
        c = sinkhorn_divergence(x, y, 0.05, backend=backend, diameter=5.0, y_mask=keep)
        d = sinkhorn_divergence(x, y[keep], 0.05, backend=backend, diameter=5.0)
        torch.testing.assert_close(c, d, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.autograd.grad(c, x)[0], torch.autograd.grad(d, x)[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("per_sample", ["ghost", "func"])
@pytest.mark.parametrize("pixels", [None, 1e6, float("nan")])
def test_dpsgd_step_releases_what_the_batch_without_bad_labels_releases(per_sample, pixels):
    from dpgen.methods.dpsgd import DPSGD
    from dpgen.models.classifiers import make_classifier

    cfg = compose_config(["task=classification", "method=dpsgd", "method.accountants=[]", "method.noise_multiplier=1.0",
                          f"method.per_sample={per_sample}", "trainer.batch_size=30"])
    m = DPSGD.from_config(cfg, DataInfo(1437, (1, 16, 16), 10), 100)
    torch.manual_seed(0)
    model = make_classifier((1, 16, 16), 10)
    x, y = _digits(30, side=16)

    def release(xb, yb):
        model.zero_grad(set_to_none=True)
        m.rng = torch.Generator().manual_seed(5)
        m.step({"model": model}, SimpleNamespace(x=xb, y=yb))
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    clean = release(x, y)
    bad_x, bad_y = _with_bad(x, y, pixels)
    out = release(bad_x, bad_y)
    assert torch.isfinite(out).all()
    diff = float((out - clean).norm())
    assert diff <= 1e-5 * float(clean.norm())
    if pixels is None:  # the check can fail: valid labels move it far more than that
        ok_y = torch.where((bad_y < 0) | (bad_y >= 10), torch.full_like(bad_y, 3), bad_y)
        moved = float((release(bad_x, ok_y) - clean).norm())
        assert moved > 1e-2 and diff <= 1e-3 * moved


def test_dpswd_rows_and_dpmerf_embedding_drop_a_bad_label():
    from dpgen.methods.dpmerf import mean_embedding
    from dpgen.methods.dpswd import compared_rows

    x, y = _digits(6)
    for mode, weight in (("concat", 7.0), ("tensor", 1.0)):
        rows = compared_rows(x, torch.tensor([0, -1, 10, 10 ** 9, 4, 5]), 10, weight, mode)
        assert torch.equal(rows[1:4], torch.zeros_like(rows[1:4]))
        torch.testing.assert_close(rows[[0, 4, 5]], compared_rows(x[[0, 4, 5]], torch.tensor([0, 4, 5]), 10, weight,
                                                                  mode))
        nan = x.clone()
        nan[1] = float("nan")
        assert torch.equal(compared_rows(nan, torch.tensor([0, -1, 2, 3, 4, 5]), 10, weight, mode)[1],
                           torch.zeros_like(rows[1]))
    freqs = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    bad = mean_embedding(x, torch.tensor([0, -1, 10, 10 ** 9, 4, 5]), freqs, 10)
    ref = mean_embedding(x[[0, 4, 5]], torch.tensor([0, 4, 5]), freqs, 10) * 3 / 6
    torch.testing.assert_close(bad, ref)


# ---- a whole run on a lazily read set -----------------------------------------------------------------------


class LazyDigits(torch.utils.data.Dataset):
    """The digits read record by record (no ``tensors``: the task cannot check the labels at setup), the last
    record given by ``last`` ("bad_label": a real image with label 10**9; "nonfinite": its pixels NaN, label 3;
    "valid": the real image with label 3)."""

    def __init__(self, last: str, split: str):
        from dpgen.data import load_dataset

        X, Y = load_dataset("digits", split).tensors
        self.X, self.Y = X.float().clone(), Y.long().clone()
        if split == "train":
            self.X = torch.cat([self.X, self.X[:1]])
            self.Y = torch.cat([self.Y, torch.tensor([10 ** 9 if last == "bad_label" else 3])])
            if last == "nonfinite":
                self.X[-1] = float("nan")
        self.shape = tuple(self.X.shape[1:])
        self.num_classes = 10
        self.name = "digits"
        self.split = split

    def __len__(self):
        return self.X.shape[0]

    def __getitem__(self, i):
        return self.X[i], self.Y[i]


def lazy_digits(data_root, split, download, *, last: str = "bad_label"):
    if last not in ("bad_label", "nonfinite", "valid"):
        raise ValueError(f"last={last!r}: choose bad_label, nonfinite or valid")
    return LazyDigits(last, split)


def _run(tmp_path, last):
    from dpgen.tasks import run as run_task

    cfg = compose_config(["trainer.progress=false", "task.eval_models=[]", "task.fid=false", "trainer.steps=40",
                          "trainer.ema=null", "task.n_synthetic=10", "logger=none", "privacy.secret_randomness=false",
                          f"dataset.loader={__name__}.lazy_digits", f"+dataset.options.last={last}",
                          "dataset.n_train=1438"])
    assert cfg.method.name == "dpsinkhorn" and cfg.method.clip_mode == "per_sample"  # the embedded default
    out = tmp_path / last
    m = run_task(cfg, out)
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=False)["models"]
    return m, state, json.loads((out / "metrics.json").read_text())


def test_a_run_with_a_bad_label_in_the_private_set_ends_as_if_the_record_contributed_nothing(tmp_path):
    """The embedded default (DP-Sinkhorn, per-record image gradient) on a lazily read digits set whose last record
    has label 10**9: the run completes, and its generator equals bit for bit the one of the run in which that
    record has NaN pixels (a record that contributes exactly nothing, issue 24) with the same seed, sampling
    (the same declared n) and noise (privacy.secret_randomness=false: the mechanism seeded from ``seed``, so
    that two runs can be compared); the ledger is the same. The same record with a valid label gives another
    generator (so the comparison can fail)."""
    m_bad, g_bad, j_bad = _run(tmp_path, "bad_label")
    m_nan, g_nan, j_nan = _run(tmp_path, "nonfinite")
    m_ok, g_ok, _ = _run(tmp_path, "valid")
    assert m_bad["steps"] == m_nan["steps"] == 40 and m_bad["stop_reason"] == "completed"
    assert j_bad["privacy"]["epsilon_spent"] == j_nan["privacy"]["epsilon_spent"]
    keys = [k for k, v in g_bad.items() if torch.is_tensor(v) and v.is_floating_point()]
    assert keys and all(torch.equal(g_bad[k], g_nan[k]) for k in keys)
    assert any(not torch.equal(g_bad[k], g_ok[k]) for k in keys)
