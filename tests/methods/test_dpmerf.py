"""DP-MERF (the reference baseline): the release's sensitivity by simulation, its noise statistically, its
epsilon by two accountants, and a training run that reads no private record after the one release."""

import json
import math

import pytest
import torch

from dpgen.config import compose_config
from dpgen.methods.dpmerf import DPMERF, default_length_scale, mean_embedding, random_features
from dpgen.privacy.audit_stats import gaussian_epsilon


def _method(*overrides, n=50, classes=10, dim=64):
    cfg = compose_config(["method=dpmerf", *overrides])
    return DPMERF(cfg, num_classes=classes, data_dim=dim, n_private=n)


def test_random_features_have_unit_norm_and_approximate_the_gaussian_kernel():
    g = torch.Generator().manual_seed(0)
    freqs = torch.randn(20000, 16, generator=g, dtype=torch.float64) / 1.5
    x = torch.rand(5, 16, generator=g, dtype=torch.float64)
    phi = random_features(x, freqs)
    torch.testing.assert_close(phi.norm(dim=1), torch.ones(5, dtype=torch.float64))
    kernel = torch.exp(-torch.cdist(x, x) ** 2 / (2 * 1.5 ** 2))
    assert (phi @ phi.T - kernel).abs().max() < 0.03  # Monte Carlo error of 20,000 frequencies
    assert default_length_scale(784) == pytest.approx(math.sqrt(127))


def test_replacing_one_record_moves_the_embedding_by_at_most_2_over_n():
    """Sensitivity by simulation: random and adversarial replacements, never above 2 / n."""
    n, classes = 20, 3
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for trial in range(300):
        freqs = torch.randn(32, 8, generator=g, dtype=torch.float64) * (0.3 + 3 * torch.rand(1, generator=g).item())
        x = torch.rand(n, 8, generator=g, dtype=torch.float64)
        y = torch.randint(0, classes, (n,), generator=g)
        x2, y2 = x.clone(), y.clone()
        x2[0] = torch.rand(8, generator=g, dtype=torch.float64) * (trial % 7)  # far outside [0, 1] too
        y2[0] = torch.randint(0, classes, (1,), generator=g)
        diff = (mean_embedding(x, y, freqs, classes) - mean_embedding(x2, y2, freqs, classes)).norm().item()
        worst = max(worst, diff)
    assert worst <= 2 / n + 1e-12
    assert worst > 1.2 / n  # the simulation reaches a good part of the bound


def _release_noise(m, x, y, draws: int) -> torch.Tensor:
    """The release minus the noiseless embedding (under the release's own features), over ``draws`` releases."""
    m.rng = torch.Generator().manual_seed(3)
    out = []
    for _ in range(draws):
        m.embedding = None
        m.prepare_data(x, y)
        conv = m.conv.to(dtype=torch.float64) if m.conv is not None else None
        clean = mean_embedding(x, y, m.freqs.double(), 2, conv=conv, share=m.conv_share)
        out.append((m.embedding.double() - clean).flatten())
    return torch.cat(out)


def test_the_release_adds_gaussian_noise_of_std_z_2_over_n():
    m = _method("method.noise_multiplier=1.5", "privacy.epsilon=100", "method.n_features=40", n=10, classes=2,
                dim=4)
    noise = _release_noise(m, torch.rand(10, 1, 2, 2), torch.arange(10) % 2, 400)
    assert noise.std().item() == pytest.approx(1.5 * 2 / 10, rel=0.03)
    assert abs(noise.mean().item()) < 4 * 0.3 / math.sqrt(noise.numel())


def test_epsilon_by_two_accountants():
    """The ledger (dp-accounting's PLD of one Gaussian, calibrates) is the exact analytic Gaussian mechanism (Balle
    & Wang 2018); autodp's RDP, which calibrated DP-MERF until issue 83 (z 0.5679 at epsilon 10, now 0.4999), is
    the looser cross-check."""
    from dpgen.privacy.accountants import autodp_epsilon

    for eps in (1.0, 10.0):
        m = _method(f"privacy.epsilon={eps}", n=1437)
        spent = m.ledger.epsilon_of(m.noise_multiplier, 0)
        assert spent <= eps and spent == pytest.approx(eps, abs=1e-3)  # calibrated: the budget, never above
        exact = gaussian_epsilon(m.noise_multiplier, 1e-5)
        assert exact == pytest.approx(spent, abs=1e-6)
        rdp = autodp_epsilon(((m.noise_multiplier, 1.0, 1),), 1e-5, "without_replacement")
        assert 1.1 * spent < rdp < 1.5 * spent  # RDP is the looser bound (by ~16 % at eps 10, ~33 % at eps 1)
    with pytest.raises(ValueError, match="method.noise_multiplier=0.1 spends epsilon"):
        _method("method.noise_multiplier=0.1")


def test_training_reads_no_private_record_and_a_resume_releases_nothing_new(tmp_path, monkeypatch):
    from dpgen.config import ConfigError
    from dpgen.tasks import run as run_task

    cfg = compose_config(["method=dpmerf", "trainer.progress=false", "trainer.epochs=null", "trainer.steps=6",
                          "task.eval_models=[]", "trainer.log_every=3"])
    seen = []
    orig = DPMERF.step
    monkeypatch.setattr(DPMERF, "step", lambda self, models, batch: seen.append(batch.real) or orig(self, models,
                                                                                                    batch))
    m = run_task(cfg, tmp_path)
    assert seen and all(r is None for r in seen)  # the loop handed the method no private record
    priv = m["privacy"]
    assert priv["epsilon_spent"] <= 10 and priv["depends_on_steps"] is False and priv["training_steps"] == 6
    assert "replace one record" in priv["neighbouring_relation"] and priv["not_covered"]
    ledger = json.loads((tmp_path / "checkpoints" / "ledger.json").read_text())
    assert ledger["steps"] == 1  # the one release
    assert "loss" in json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])  # post-processing
    # resume with more steps: the same release, the same epsilon
    cfg2 = compose_config(["method=dpmerf", "trainer.progress=false", "trainer.epochs=null", "trainer.steps=9",
                           "task.eval_models=[]", "resume=true"])
    m2 = run_task(cfg2, tmp_path)
    assert m2["privacy"]["epsilon_spent"] == pytest.approx(priv["epsilon_spent"])
    assert json.loads((tmp_path / "checkpoints" / "ledger.json").read_text())["steps"] == 1
    # resume with another release's settings: refused, nothing released twice
    cfg3 = compose_config(["method=dpmerf", "method.n_features=200", "trainer.progress=false", "trainer.epochs=null",
                           "trainer.steps=12", "task.eval_models=[]", "resume=true"])
    with pytest.raises((ValueError, ConfigError), match="changed privacy settings.*n_features"):
        run_task(cfg3, tmp_path)


def test_accounting_task_reports_the_release(tmp_path):
    from dpgen.tasks import TASKS

    cfg = compose_config(["task=accounting", "method=dpmerf", "dataset=digits"])
    rec = TASKS["accounting"](cfg, output_dir=tmp_path)
    assert rec["epsilon"] <= 10 and rec["epsilon"] == pytest.approx(10, rel=2e-3)
    assert rec["sensitivity"] == pytest.approx(2 / cfg.dataset.n_train)


@pytest.mark.parametrize("name, trials", [("dpmerf/release", (4000, 10_000)),
                                          ("dpmerf/release_conv", (3000, 8000))])  # with the random conv features
def test_the_audit_passes_the_release_and_catches_too_little_noise(name, trials):
    from dpgen.audit import canary as A

    (row,) = A.audit_rows([name], trials=trials[0], seed=2, progress=False)
    assert row["verdict"] == "pass", row
    # the canary's shift is sqrt(2) / N (orthogonal class blocks), within the design's 2 / N
    assert row["score_shift_measured"] == pytest.approx(math.sqrt(2) / 4, abs=4 * row["score_shift_se"])
    # too little noise is caught: a quarter of it (against this canary's sqrt(2) / N shift, an effective noise
    # multiplier of 2 * 0.25 / 0.707 = 0.71 where 2 is claimed; half the noise needs far more trials to show)
    (row,) = A.audit_rows([name], trials=trials[1], seed=5, progress=False, noise_scale=0.25)
    assert not row["covered"] and row["verdict"] == "caught", row


# ---- random convolutional features (method.conv_channels > 0; beyond the paper) ----------------------------


def _conv(channels=4, shape=(1, 8, 8), pool=2, seed=0):
    from dpgen.methods.dpmerf import ConvFeatures

    g = torch.Generator().manual_seed(seed)
    return ConvFeatures(ConvFeatures.draw(channels, shape[0], g), pool, shape)


def test_conv_features_have_norm_at_most_one_and_zero_for_non_finite_rows():
    from dpgen.methods.dpmerf import features

    conv = _conv()
    g = torch.Generator().manual_seed(4)
    x = torch.rand(6, 64, generator=g, dtype=torch.float64) * torch.tensor([1, 1e6, 1e-9, 0, 1, 1.0])[:, None]
    x[4, 3], x[5, 0] = float("nan"), float("inf")
    psi = conv(x)
    assert psi.shape == (6, conv.dim()) == (6, (4 + 8 + 8) * 4 + 3)
    norms = psi.norm(dim=1)
    torch.testing.assert_close(norms[:4], torch.ones(4, dtype=torch.float64))  # every block of unit norm
    assert norms[4] == 0 and norms[5] == 0  # non-finite: 0
    # a blank image is the constant alone: far from an inked one, not at the origin (no free shrinking of the mean)
    blank = psi[3].reshape(-1)
    assert (blank > 0).sum() == 3 and (psi[0] @ blank) < 0.9
    freqs = torch.randn(16, 64, generator=g, dtype=torch.float64)
    f = features(x, freqs, conv, share=0.3)
    assert f.shape == (6, 32 + conv.dim()) and (f.norm(dim=1) <= 1 + 1e-12).all()
    torch.testing.assert_close(f[:4].norm(dim=1), torch.ones(4, dtype=torch.float64))


def test_with_conv_features_replacing_one_record_moves_the_embedding_by_at_most_2_over_n():
    """Sensitivity by simulation with the convolutional block: random, adversarial and non-finite replacements."""
    n, classes = 12, 3
    g = torch.Generator().manual_seed(5)
    worst = 0.0
    for trial in range(150):
        conv = _conv(channels=2 + trial % 3, seed=trial)
        freqs = torch.randn(8, 64, generator=g, dtype=torch.float64)
        share = float(torch.rand(1, generator=g).clamp(0.05, 0.95))
        x = torch.rand(n, 64, generator=g, dtype=torch.float64)
        y = torch.randint(0, classes, (n,), generator=g)
        x2, y2 = x.clone(), y.clone()
        x2[0] = torch.rand(64, generator=g, dtype=torch.float64) * (trial % 5) * 10 ** (trial % 4)
        if trial % 10 == 0:
            x2[0, 5] = float("nan")
        y2[0] = torch.randint(0, classes, (1,), generator=g)
        a = mean_embedding(x, y, freqs, classes, conv=conv, share=share)
        b = mean_embedding(x2, y2, freqs, classes, conv=conv, share=share)
        worst = max(worst, (a - b).norm().item())
    assert worst <= 2 / n + 1e-12
    assert worst > 1.2 / n


def test_conv_release_noise_std_checkpoint_and_settings_guard(tmp_path):
    m = _method("method.noise_multiplier=1.5", "privacy.epsilon=100", "method.n_features=8",
                "method.conv_channels=2", "method.conv_pool=2", n=10, classes=2, dim=16)
    noise = _release_noise(m, torch.rand(10, 1, 4, 4), torch.arange(10) % 2, 200)
    assert m.embedding.shape == (8 + (2 + 4 + 4) * 4 + 3, 2)
    assert noise.std().item() == pytest.approx(1.5 * 2 / 10, rel=0.04)
    # the checkpoint carries the random network: a resumed run trains against the same features
    state = m.state_dict()
    m2 = _method("method.noise_multiplier=1.5", "privacy.epsilon=100", "method.n_features=8",
                 "method.conv_channels=2", "method.conv_pool=2", n=10, classes=2, dim=16)
    m2.load_state_dict(state)
    fake, yf = torch.rand(5, 1, 4, 4), torch.tensor([0, 1, 0, 1, 1])
    assert m2.loss_of(fake, yf).item() == pytest.approx(m.loss_of(fake, yf).item())
    m3 = _method("method.noise_multiplier=1.5", "privacy.epsilon=100", "method.n_features=8",
                 "method.conv_channels=4", "method.conv_pool=2", n=10, classes=2, dim=16)
    with pytest.raises(ValueError, match="conv_channels"):
        m3.load_state_dict(state)
    assert "convolutional" in m.privacy_report()["mechanism"]


def test_conv_settings_are_validated_and_vector_data_is_refused():
    from dpgen.config import ConfigError

    for bad, match in (("method.conv_channels=-1", "conv_channels=-1"), ("method.conv_share=1.0", "conv_share=1.0"),
                       ("method.conv_pool=0", "conv_pool")):
        with pytest.raises((ConfigError, ValueError), match=match):
            _method(bad)
    m = _method("method.conv_channels=2", "privacy.epsilon=100", "method.noise_multiplier=1", n=4, dim=16)
    m.rng = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="needs images"):
        m.prepare_data(torch.rand(4, 16), torch.arange(4))
