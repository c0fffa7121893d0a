"""DP-Kernel (dpgen/methods/dpkernel.py): the release's RKHS sensitivity by simulation (the Mahalanobis norm of a
neighbour's change under the GP noise's own covariance), the GP derivative noise and its scale statistically against
a covariance built here from the kernel's second derivatives, non-finite records, epsilon against accountants
called here directly, task=accounting, and a tiny run on digits whose generator gradient carries the noise."""

import json
import math

import pytest
import torch

from dpgen.config import compose_config
from dpgen.methods.dpkernel import DPKernel, witness_gradient

BWS = [0.3, 0.6, 1.2]


def derivative_cov(y, labels, bws):
    """Cov(grad G(y_j), grad G(y_l)) for G ~ GP(0, [c = c'] sum_s exp(-|r|^2 / 2 s^2)), written out pair by pair:
    k_s(r) (I / s^2 - r r^T / s^4) on same-class pairs, 0 across classes. (M d, M d)."""
    m, d = y.shape
    h = torch.zeros(m * d, m * d, dtype=torch.float64)
    for j in range(m):
        for l in range(m):
            if labels is not None and int(labels[j]) != int(labels[l]):
                continue
            r = (y[j] - y[l]).double()
            for s in bws:
                k = math.exp(-float(r @ r) / (2 * s * s))
                h[j * d:(j + 1) * d, l * d:(l + 1) * d] += k * (torch.eye(d, dtype=torch.float64) / s ** 2
                                                                 - torch.outer(r, r) / s ** 4)
    return h


def whitener(h, rel=1e-10):
    """(W, V0): W maps a vector to its coordinates on H's range scaled by 1 / sqrt(eigenvalue); V0 spans the rest."""
    evals, evecs = torch.linalg.eigh(h)
    keep = evals > rel * evals.max()
    return (evecs[:, keep] / evals[keep].sqrt()).T, evecs[:, ~keep]


def outside(v, v0) -> float:
    """The largest component of the rows of ``v`` outside H's range (0 when H has full rank)."""
    return (v @ v0).abs().max().item() if v0.numel() else 0.0


def _method(*overrides, n=200, classes=2, dim=3, batch=4):
    cfg = compose_config(["method=dpkernel", f"method.bandwidths={BWS}", f"trainer.batch_size={batch}",
                          "trainer.epochs=null", "trainer.steps=50", *overrides])
    return DPKernel(cfg, num_classes=classes, data_dim=dim, n_private=n, steps=50, batch_size=batch)


def test_witness_gradient_is_the_gradient_of_the_mean_embedding():
    """grad_y (1/B) sum_i [c_i = c] k(x_i, y), by autograd, equals the closed form the release uses."""
    g = torch.Generator().manual_seed(0)
    x, xl = torch.rand(7, 5, generator=g, dtype=torch.float64), torch.randint(0, 2, (7,), generator=g)
    y, yl = torch.rand(4, 5, generator=g, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    yy = y.clone().requires_grad_(True)
    f = sum(torch.exp(-torch.cdist(yy, x).pow(2) / (2 * s * s)) for s in BWS) * (yl[:, None] == xl[None]).double()
    (auto,) = torch.autograd.grad(f.sum() / 10.0, yy)
    torch.testing.assert_close(witness_gradient(y, yl, x, xl, BWS, 10.0, num_classes=2), auto)


@pytest.mark.parametrize("labels", [torch.tensor([0, 1, 0, 1, 1, 0]), torch.tensor([0, 0, 0, 0, 0, 1])])
def test_the_released_noise_is_the_gp_derivative_at_the_generated_points_with_std_sigma_sqrt_s_over_b(labels):
    """release - clean = tau grad G(Y): whitened by tau^2 H (H written out above) it has identity covariance and
    nothing outside H's range. The second labelling puts 5 points of one class in 3 dimensions (the difference
    span is the whole space)."""
    m = _method("method.noise_multiplier=2.0", "privacy.epsilon=1000")
    assert m.noise_std == pytest.approx(2.0 * math.sqrt(len(BWS)) / 4)  # tau = sigma sqrt(S) / B
    g = torch.Generator().manual_seed(1)
    y = torch.rand(6, 3, generator=g, dtype=torch.float64) * 0.8
    x, xl = torch.rand(5, 3, generator=g, dtype=torch.float64), torch.randint(0, 2, (5,), generator=g)
    clean = witness_gradient(y, labels, x, xl, BWS, 4, num_classes=2)
    w, v0 = whitener(derivative_cov(y, labels, BWS))
    m.rng = torch.Generator().manual_seed(2)
    draws = torch.stack([(m.release(y, labels, x, xl) - clean).flatten() / m.noise_std for _ in range(2500)])
    z = draws @ w.T
    cov = z.T @ z / len(z)
    assert (cov - torch.eye(len(cov), dtype=cov.dtype)).abs().max() < 0.12  # 2,500 draws: entry s.e. ~0.02-0.03
    assert (z ** 2).mean().item() == pytest.approx(1.0, abs=0.02)
    assert z.mean(0).abs().max() < 0.1
    assert outside(draws, v0) < 1e-6  # no noise where the GP has none


def test_a_neighbour_moves_the_release_by_at_most_the_rkhs_sensitivity():
    """Sensitivity by simulation: D and D plus one record (add/remove; normalised by the expected batch B). The
    release's mean moves by delta; its Mahalanobis norm under the noise covariance H, sqrt(delta^T H^+ delta), is
    the Gaussian mechanism's sensitivity, and must stay <= sqrt(S) / B, with delta inside H's range. Records drawn
    at random, on top of a generated point, at one bandwidth from it, and far away."""
    g = torch.Generator().manual_seed(3)
    b, worst = 4, 0.0
    bound = math.sqrt(len(BWS)) / b
    for trial in range(150):
        y = torch.rand(6, 3, generator=g, dtype=torch.float64)
        yl = torch.randint(0, 2, (6,), generator=g)
        x, xl = torch.rand(b, 3, generator=g, dtype=torch.float64), torch.randint(0, 2, (b,), generator=g)
        j, kind = trial % 6, trial % 4
        u = torch.randn(3, generator=g, dtype=torch.float64)
        z = [torch.rand(3, generator=g, dtype=torch.float64), y[j] + 1e-3 * u,
             y[j] + BWS[trial % 3] * u / u.norm(), y[j] + 50 * u][kind]
        zl = yl[j:j + 1] if kind else torch.randint(0, 2, (1,), generator=g)
        delta = (witness_gradient(y, yl, torch.cat([x, z[None]]), torch.cat([xl, zl]), BWS, b, num_classes=2)
                 - witness_gradient(y, yl, x, xl, BWS, b, num_classes=2)).flatten()
        w, v0 = whitener(derivative_cov(y, yl, BWS))
        assert outside(delta, v0) < 1e-7 * bound
        worst = max(worst, (w @ delta).norm().item() / bound)
    assert worst <= 1 + 1e-6
    assert worst > 0.5  # the simulation reaches a good part of the bound


def test_non_finite_records_and_labels_out_of_range_contribute_nothing():
    g = torch.Generator().manual_seed(4)
    y, yl = torch.rand(5, 3, generator=g, dtype=torch.float64), torch.tensor([0, 1, 0, 1, 0])
    x, xl = torch.rand(4, 3, generator=g, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    base = witness_gradient(y, yl, x, xl, BWS, 4, num_classes=2)
    for bad, label in (([float("nan"), 0.5, 0.5], 0), ([float("inf"), 0.5, 0.5], 1), ([0.5, -float("inf"), 0], 0),
                       ([0.2, 0.3, 0.4], 7), ([0.2, 0.3, 0.4], -1)):
        out = witness_gradient(y, yl, torch.cat([x, torch.tensor([bad], dtype=x.dtype)]),
                               torch.cat([xl, torch.tensor([label])]), BWS, 4, num_classes=2)
        assert torch.equal(out, base), (bad, label)
    huge = witness_gradient(y, yl, torch.cat([x, torch.full((1, 3), 1e300, dtype=x.dtype)]),
                            torch.cat([xl, torch.tensor([0])]), BWS, 4, num_classes=2)
    assert torch.isfinite(huge).all() and torch.equal(huge, base)  # k underflows to exactly 0 there
    m = _method("method.noise_multiplier=1.0", "privacy.epsilon=1000")
    m.rng = torch.Generator().manual_seed(5)
    xx = torch.cat([x, torch.tensor([[float("nan"), 0, 0]], dtype=x.dtype)])
    assert torch.isfinite(m.release(y, yl, xx, torch.cat([xl, torch.tensor([0])]))).all()


def test_epsilon_equals_accountants_called_here():
    """The ledger (privacy.accountant=auto: dp-accounting's PLD) against dp-accounting's PLD and opacus' RDP of the
    Poisson-subsampled Gaussian called directly, at the calibrated noise and the sensitivity sqrt(S) / B."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    n, b, steps, delta = 1437, 100, 300, 1e-5
    cfg = compose_config(["method=dpkernel", "trainer.epochs=null", f"trainer.steps={steps}",
                          f"trainer.batch_size={b}"])
    m = DPKernel(cfg, num_classes=10, data_dim=64, n_private=n, steps=steps, batch_size=b)
    z, q = m.noise_multiplier, b / n
    assert m.sample_rate == q and m.sensitivity == pytest.approx(math.sqrt(5) / b)
    spent = m.ledger.epsilon_of(z, steps)
    assert spent <= 10.0 and spent == pytest.approx(10.0, abs=0.01)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps)
    assert acc.get_epsilon(delta) == pytest.approx(spent, rel=5e-3)
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 256))
    rdp = compute_rdp(q=q, noise_multiplier=z, steps=steps, orders=orders)
    eps_rdp = get_privacy_spent(orders=orders, rdp=rdp, delta=delta)[0]
    assert spent < eps_rdp < 1.3 * spent  # RDP is a valid, looser bound


def test_task_accounting_accounts_dpkernel(tmp_path, capsys):
    from dpgen.tasks.accounting import run_accounting

    cfg = compose_config(["task=accounting", "method=dpkernel", "trainer.epochs=null", "trainer.steps=40",
                          "trainer.batch_size=50"])
    rec = run_accounting(cfg)
    out = capsys.readouterr().out
    assert rec["method"] == "dpkernel" and rec["epsilon"] <= 10 and rec["epsilon"] == pytest.approx(10, abs=0.01)
    assert rec["sensitivity"] == pytest.approx(math.sqrt(5) / 50) and "add/remove one record" in out


@pytest.mark.parametrize("override, named", [("method.bandwidths=[]", "method.bandwidths"),
                                             ("method.bandwidths=[1,-2]", "method.bandwidths"),
                                             ("method.sampling=without_replacement", "method.sampling"),
                                             ("method.noise_multiplier=-1", "method.noise_multiplier")])
def test_bad_settings_are_named(override, named):
    with pytest.raises(Exception, match=named.replace(".", r"\.")):
        compose_config(["method=dpkernel", override])


def test_the_noise_reaches_the_generator_gradient():
    """The finding in DPImageBench's code: noise drawn at the points and detached never reaches the gradient. Here
    two steps on the same batch and generated samples but different noise give different generator gradients,
    and the difference from the clean gradient scales with tau."""
    from dpgen.models import make_generator
    from dpgen.tasks.generation import GenerationBatch

    g = torch.Generator().manual_seed(6)
    real, yr = torch.rand(20, 1, 8, 8, generator=g), torch.randint(0, 3, (20,), generator=g)
    m = _method("method.noise_multiplier=1.0", "privacy.epsilon=1000", n=200, classes=3, dim=64, batch=20)

    def grads(tau, seed):
        torch.manual_seed(0)
        gen = make_generator("mlp", code_dim=4, num_classes=3, out_shape=(1, 8, 8))
        m.noise_std, m.rng = tau, torch.Generator().manual_seed(seed)
        m.step({"generator": gen}, GenerationBatch(real, yr, 12, torch.device("cpu")))
        return torch.cat([p.grad.flatten() for p in gen.parameters()])

    clean = grads(0.0, 1)
    torch.testing.assert_close(grads(0.0, 2), clean)
    a, b = grads(0.1, 1) - clean, grads(0.1, 2) - clean
    assert a.norm() > 0 and (a - b).norm() > 0.1 * a.norm()
    torch.testing.assert_close(grads(0.3, 1) - clean, 3 * a, rtol=1e-3, atol=1e-6)


def test_a_tiny_run_on_digits_reports_its_release_and_publishes_no_loss(tmp_path):
    from dpgen.tasks import run as run_task

    cfg = compose_config(["method=dpkernel", "dataset=digits", "trainer.progress=false", "trainer.epochs=null",
                          "trainer.steps=4", "trainer.batch_size=50", "task.eval_models=[]", "trainer.log_every=2",
                          "task.fid=false", "task.n_synthetic=200", "privacy.accountant=rdp"])
    metrics = run_task(cfg, tmp_path)
    priv = metrics["privacy"]
    assert priv["private"] and priv["guarantee_holds"] and priv["epsilon_spent"] <= 10
    assert priv["noise_std"] == pytest.approx(priv["noise_multiplier"] * math.sqrt(5) / 50)
    assert "add/remove one record" in priv["neighbouring_relation"]
    assert json.loads((tmp_path / "checkpoints" / "ledger.json").read_text())["steps"] == 4
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        assert "loss" not in json.loads(line)
    assert (tmp_path / "samples.png").exists()
