"""Issue 83 ("float32 sums exceed C"): one more copy of a record moves a clipped sum by at most C at any batch size.

Each clipped contribution has norm <= C (1 - 1e-5) (``dpgen.privacy.clipping``), but a float32 sum of n of them
rounds by up to ~n 2^-24 C per coordinate, and when a batch of identical records gets one more copy the two sums
round differently: the float32 sums moved by 1.0000101 C (DP-Sinkhorn's per-record release, n = 640) and 1.00006 C
(one-coordinate gradients, n = 1,000), more than the margin covers. Every clipped sum is now accumulated in float64
(:func:`dpgen.privacy.clipping.clipped_sum`, and pass 2 of the ghost clipping on a float64 copy), the noise added
to the float64 sum, and only the noisy sum rounded to the working dtype (:func:`~dpgen.privacy.clipping.
release_sum`): that rounding is post-processing of the release. So the tests read the float64 sum each real code
path hands to ``release_sum`` (the noise is added to it; with the noise at 0 the release is its rounding, which a
test checks) and measure its change when a batch of 500 or 1,000 identical records gets one more copy: <= C, no
tolerance. Each case also measures the old float32 arithmetic on the same records, which leaves C.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dpgen.privacy import clipping

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors (tests/conftest.py)

SIZES = (500, 1000)


@pytest.fixture
def released(monkeypatch):
    """The float64 sums the real code paths add their noise to (``clipping.release_sum``'s input), in call order."""
    seen = []
    orig = clipping.release_sum

    def spy(total, noise, std, dtype):
        seen.append(total.detach().clone())
        return orig(total, noise, std, dtype)

    monkeypatch.setattr(clipping, "release_sum", spy)
    return seen


def _shift(a, b, clip: float) -> float:
    """||b - a|| / C in float64 (a, b: tensors or lists of tensors)."""
    flat = lambda t: torch.cat([v.reshape(-1).double() for v in (t if isinstance(t, (list, tuple)) else [t])])
    return float((flat(b) - flat(a)).norm()) / clip


def _old_shift(row: torch.Tensor, n: int, clip: float) -> float:
    """The old arithmetic: ``clip_per_sample`` then a float32 ``.sum(0)``, n vs n + 1 copies of ``row``."""
    s = [clipping.clip_per_sample([row.expand(k, *row.shape[1:]).contiguous()], clip)[0][0].sum(0) for k in (n, n + 1)]
    return _shift(s[0], s[1], clip)


#: clip bounds swept by every case (the float32 rounding of a sum of n copies depends on C and n)
CLIPS = (0.29, 0.3, 0.37, 0.47, 0.61, 0.7, 0.71, 0.83, 1.13)
#: the gradient of one record: one coordinate, and 8 (each copy clipped at every C above)
ROWS = {"one coordinate": torch.tensor([[5.0]]),
        "8 coordinates": torch.randn(1, 8, generator=torch.Generator().manual_seed(5)) * 7}


@pytest.mark.parametrize("n", SIZES)
def test_clipped_sum_moves_by_at_most_C(n):
    old = []
    for name, row in ROWS.items():
        for clip in CLIPS:
            a, _ = clipping.clipped_sum([row.expand(n, *row.shape[1:])], clip)
            b, _ = clipping.clipped_sum([row.expand(n + 1, *row.shape[1:])], clip)
            assert a[0].dtype == torch.float64
            assert _shift(a, b, clip) <= 1.0, (name, clip)
            old.append(_old_shift(row, n, clip))
    assert max(old) > 1.0  # the float32 sum leaves C on the same records


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(ROWS))
def test_privatize_sum_moves_by_at_most_C(released, n, name):
    """``PerSampleGradientMechanism.privatize_sum`` (DP-Sinkhorn (param grad)): two parameter tensors, noise 0."""
    from dpgen.privacy.image_gradient import PerSampleGradientMechanism

    row = ROWS[name]
    shifts = []
    for clip in CLIPS:
        mech = PerSampleGradientMechanism(clip=clip, noise_multiplier=1.0, sample_rate=0.01)
        mech.noise_multiplier = 0.0
        out = {}
        for k in (n, n + 1):
            grads = [row.expand(k, *row.shape[1:]), torch.zeros(k, 2, 3)]
            noisy, norms = mech.privatize_sum(grads, generator=torch.Generator().manual_seed(0))
            out[k] = released[-len(grads):]
            assert all(t.dtype == torch.float64 for t in out[k]) and bool((norms > clip).all())
            assert all(torch.equal(r, s.to(r.dtype)) for r, s in zip(noisy, out[k]))  # the release is their rounding
        shifts.append(_shift(out[n], out[n + 1], clip))
    assert max(shifts) <= 1.0


def _sinkhorn():
    from dpgen.config import compose_config
    from dpgen.methods.registry import DataInfo, build
    from dpgen.models import generator_from_config

    cfg = compose_config(["method=dpsinkhorn", "trainer.progress=false", "model.generator=dct", "model.dct_size=8",
                          "method.clip_mode=per_sample"])
    m = build(cfg, DataInfo(1437, (1, 8, 8), 10), 100, "generation")
    m.mechanism.noise_multiplier = 0.0
    torch.manual_seed(0)
    gen = generator_from_config(cfg.model, (1, 8, 8), 10)
    torch.manual_seed(1)
    code, y_fake = gen.sample_code(30)
    return m, gen, code.detach(), y_fake


@pytest.mark.parametrize("n", SIZES)
def test_dpsinkhorn_release_per_record_moves_by_at_most_C(released, n, monkeypatch):
    """``DPSinkhorn.release_per_record`` (its closed-form record gradients summed by
    ``clipping.clipped_pair_sum``, chunks of records summed into a float64 running total): a batch of n copies of
    one record, then n + 1; the records: digits, and generated samples shifted by 0.2 (their gradient sits on few
    coordinates)."""
    from dpgen.data import load_dataset

    m, gen, code, y_fake = _sinkhorn()
    monkeypatch.setattr(type(m), "PAIR_CHUNK_FLOATS", 128 * (30 + 64))  # chunks of 128 records
    assert m.pair_chunk(n, code) < n  # several chunks: the running total is exercised
    X, Y = load_dataset("digits", "train").tensors
    fake = gen.decode(code).detach()
    records = [(X[i:i + 1].float(), Y[i:i + 1].long()) for i in range(12)]
    records += [(fake[j:j + 1] + 0.2, y_fake[j:j + 1].long()) for j in range(3)]
    shifts = []
    for rec, lab in records:
        for clip in (0.37, 0.61, 0.83):
            m.mechanism.clip = clip
            totals = {}
            for k in (n, n + 1):
                batch = SimpleNamespace(size=30, device=torch.device("cpu"), real=rec.expand(k, *rec.shape[1:]),
                                        y=lab.expand(k))
                m.rng = torch.Generator().manual_seed(0)
                out = m.release_per_record(gen, code, y_fake, batch)
                totals[k] = released[-1]
                assert totals[k].dtype == torch.float64 and out.dtype == code.dtype
                assert torch.equal(out, totals[k].to(out.dtype) / m.batch_size)  # the release is its rounding
                assert bool((m.last_norms > clip).all())  # every copy is clipped
            shifts.append(_shift(totals[n], totals[n + 1], clip))
    assert max(shifts) <= 1.0


class _OneWeight(torch.nn.Module):
    """Logits (w sum(x), 0): a one-coordinate per-example gradient."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.3]))

    def forward(self, x):
        s = x.flatten(1).sum(1, keepdim=True) * self.w
        return torch.cat([s, torch.zeros_like(s)], dim=1)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", ["func, one coordinate", "func, 10 coordinates", "ghost, 10 coordinates"])
def test_dpsgd_moves_by_at_most_C(released, n, case):
    """``DPSGD.private_gradient``: torch.func per-example gradients in chunks of 32 (``clipped_sum``), or opacus'
    ghost clipping (its pass 2 on a float64 copy); a batch of n copies of one record (label 1 of 2 classes),
    then n + 1."""
    from dpgen.config import compose_config
    from dpgen.methods.dpsgd import DPSGD
    from dpgen.methods.registry import DataInfo

    per_sample = case.split(",")[0]
    cfg = compose_config(["task=classification", "method=dpsgd", "method.accountants=[]", "method.noise_multiplier=1.0",
                          f"method.per_sample={per_sample}", "trainer.batch_size=64"])
    m = DPSGD.from_config(cfg, DataInfo(1437, (1, 2, 2), 2), 100)
    m.noise_multiplier = 0.0
    torch.manual_seed(0)
    one = "one" in case
    model = _OneWeight() if one else torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    shifts = []
    for seed in range(1 if one else 6):
        x = torch.rand(1, 1, 2, 2, generator=torch.Generator().manual_seed(seed)) * 3
        for clip in (CLIPS if one else (0.29, 0.37, 0.61)):
            m.clip, m._ghost = clip, None  # (the ghost clipping holds its C)
            totals = {}
            for k in (n, n + 1):
                m.private_gradient(model, x.expand(k, 1, 2, 2), torch.ones(k, dtype=torch.long),
                                   noise_gen=torch.Generator().manual_seed(0))
                totals[k] = released[-1]
                assert totals[k].dtype == torch.float64
                grad = torch.cat([p.grad.flatten() for p in model.parameters()])
                assert torch.equal(grad, totals[k].float() / m.expected_batch_size)  # the release is its rounding
            shifts.append(_shift(totals[n], totals[n + 1], clip))
    assert 1 - 2e-5 <= max(shifts) <= 1.0  # (copies clipped: the new copy moves the sum by about C)


@pytest.mark.parametrize("n", SIZES)
def test_ghost_clipping_one_coordinate_moves_by_at_most_C(n):
    """:class:`dpgen.privacy.per_sample.GhostClippedSum` (DP-SGD's and DP-DANN's default) on a one-weight linear
    layer: the float64 sums of n and n + 1 copies of a record."""
    from dpgen.privacy.per_sample import GhostClippedSum

    shifts = []
    for clip in CLIPS:
        ghost = GhostClippedSum([torch.nn.Linear(1, 1, bias=False)], lambda out: out.reshape(-1), clip)
        sums = {k: ghost(torch.full((k, 1), 5.0))[0] for k in (n, n + 1)}
        assert sums[n][0].dtype == torch.float64
        shifts.append(_shift(sums[n], sums[n + 1], clip))
    assert max(shifts) <= 1.0


@pytest.mark.parametrize("case", ["plain", "non-finite record", "non-finite weight", "non-finite point", "huge"])
def test_clipped_pair_sum_is_clipped_sum_of_the_formed_contributions(case):
    """``clipping.clipped_pair_sum`` (G_i = 2 w_i (a - b_i), never formed) gives ``clipped_sum`` of the formed G_i:
    the sum within float32 rounding of the formed tensor, each norm likewise, and 0 for every contribution the
    formed tensor holds a non-finite value in (a non-finite a_j puts one in every G_i). "huge": a record at 1e19
    overflows the formed float32 norm (so ``clipped_sum`` drops it) but not the float64 one (so it is clipped to
    C): both bound it by C; DP-Sinkhorn drops such a record before either (its term is not finite)."""
    g = torch.Generator().manual_seed(7)
    n, m, p, clip = 37, 11, 9, 0.7
    w = torch.softmax(torch.randn(n, m, generator=g) * 5, 1)
    a = torch.randn(m, p, generator=g) * 3 + 10  # off-centre points: the expansion's cancellation
    b = torch.randn(n, p, generator=g) * 3 + 10
    if case == "non-finite record":
        b[4, 2] = float("inf")
    if case == "non-finite weight":
        w[7, 3] = float("nan")
    if case == "non-finite point":
        a[2, 1] = float("nan")
    if case == "huge":
        b[5] = 1e19
    formed = 2.0 * w.unsqueeze(2) * (a.unsqueeze(0) - b.unsqueeze(1))
    (ref,), ref_norms = clipping.clipped_sum([formed], clip)
    total, norms = clipping.clipped_pair_sum(w, a, b, clip, scale=2.0)
    assert total.dtype == norms.dtype == torch.float64 and total.shape == (m, p) and torch.isfinite(total).all()
    finite = torch.isfinite(ref_norms)
    if case == "huge":
        assert not finite[5] and torch.isfinite(norms[5]) and norms[5] > clip
        ref = ref + clipping.scale_finite(formed[5:6].double(), clipping.clip_factors(norms[5:6], clip))[0]
        finite[5] = True
    assert torch.equal(torch.isfinite(norms), finite)
    both = torch.isfinite(ref_norms)
    assert torch.allclose(norms[both], ref_norms[both].double(), rtol=1e-6)
    assert torch.allclose(total, ref, rtol=1e-6, atol=1e-6 * clip)
    if case == "non-finite point":
        assert (total == 0).all()
    # the norm is the formed float64 tensor's to float64 rounding (far inside CLIP_MARGIN)
    exact = (2.0 * w.double().unsqueeze(2) * (a.double().unsqueeze(0) - b.double().unsqueeze(1))).flatten(1).norm(dim=1)
    ok = torch.isfinite(exact)
    assert torch.allclose(norms[ok], exact[ok], rtol=1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_clipped_pair_sum_moves_by_at_most_C(n):
    """n copies of one record, then n + 1: the float64 pair sum moves by at most C, no tolerance."""
    g = torch.Generator().manual_seed(11)
    m, p = 30, 64
    a = torch.rand(m, p, generator=g) * 4
    shifts = []
    for clip in CLIPS:
        b = torch.rand(1, p, generator=g) * 4
        w = torch.softmax(torch.randn(1, m, generator=g), 1)
        s = [clipping.clipped_pair_sum(w.expand(k, m), a, b.expand(k, p), clip, scale=2.0) for k in (n, n + 1)]
        assert bool((s[0][1] > clip).all())
        shifts.append(_shift(s[0][0], s[1][0], clip))
    assert max(shifts) <= 1.0
