"""DP-SGD classification (WDP Table 2): per-example gradients, clipping, noise, the three accountants
against the privacy core's own computation of the same trace, resume, bad input."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpgen.methods.dpsgd import (DPSGD, attack_probability, clip_gradients, flatten_gradients,
                                 pair_distances, per_sample_gradients)
from dpgen.models.classifiers import TriastcynCNN
from dpgen.privacy.validation import PrivacyParameterError


def _tiny(seed=0, shape=(1, 16, 16), norm="group"):
    torch.manual_seed(seed)
    return TriastcynCNN(shape, 10, norm=norm)


def _batch(n=6, shape=(1, 16, 16), seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g)


# ---------------------------------------------------------------------------------------------
# the mechanism
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 16, 16), (3, 32, 32)])
def test_per_sample_gradients_equal_single_example_backward(shape):
    model = _tiny(shape=shape)
    x, y = _batch(5, shape)
    grads = per_sample_gradients(model, x, y, chunk_size=2)
    for i in range(x.shape[0]):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad, rtol=1e-4, atol=1e-6)


def test_clipped_gradient_norms_are_at_most_c():
    model = _tiny()
    x, y = _batch(8)
    flat = flatten_gradients(per_sample_gradients(model, x, y)) * torch.linspace(0.01, 50, 8)[:, None]
    for c in (1e-3, 0.1, 1.0, 10.0):
        clipped, norms = clip_gradients(flat, c)
        assert torch.all(clipped.norm(dim=1) <= c * (1 + 1e-5))
        small = norms <= c  # rows already inside the ball are unchanged
        torch.testing.assert_close(clipped[small], flat[small])
        big = ~small  # the others keep their direction and land on the sphere of radius C (1 - 1e-5), the margin
        # that keeps float32 rounding under C (dpgen.privacy.clipping, tests/privacy/test_clip_margin.py)
        # (measured in float64: torch's float32 norm() is 2e-6 off on these 2e5-entry rows)
        torch.testing.assert_close(clipped[big].double().norm(dim=1),
                                   torch.full((int(big.sum()),), c * (1 - 1e-5), dtype=torch.float64), rtol=1e-6, atol=0)


def test_noise_std_is_sigma_c_over_expected_batch():
    """Two private gradients of the same batch differ only by the noise: std sqrt(2) sigma C / (qN)."""
    model = _tiny(norm="none")
    x, y = _batch(4)
    m = DPSGD(clip=0.5, noise_multiplier=1.3, sample_rate=0.1, expected_batch_size=4.0, accountants=["moments"])
    outs = []
    for s in (1, 2):
        m.private_gradient(model, x, y, noise_gen=torch.Generator().manual_seed(s))
        outs.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    diff = (outs[0] - outs[1]) / math.sqrt(2)
    expected = 1.3 * 0.5 / 4.0
    n = diff.numel()  # ~80k coordinates: the sample std is within ~0.5 % of the truth
    assert abs(float(diff.std()) / expected - 1) < 0.02, (float(diff.std()), expected, n)
    assert abs(float(diff.mean())) < 5 * expected / math.sqrt(n)
    # and the noiseless part is the mean of the clipped per-example gradients
    clipped, _ = clip_gradients(flatten_gradients(per_sample_gradients(model, x, y)), 0.5)
    mean_clipped = clipped.sum(0) / 4.0
    torch.testing.assert_close(((outs[0] + outs[1]) / 2 - mean_clipped).std(), torch.tensor(expected / math.sqrt(2)),
                               rtol=0.02, atol=0)


def test_pair_distances_are_all_pairs():
    g = torch.randn(5, 7)
    d = pair_distances(g)
    ref = [float((g[i] - g[j]).norm()) for i in range(5) for j in range(i + 1, 5)]
    assert d.shape == (10,)
    np.testing.assert_allclose(d, ref, rtol=1e-5)


def test_attack_probability():
    assert attack_probability(0.0) == 0.5
    assert attack_probability(2.2) == pytest.approx(0.9002, abs=1e-4)  # the paper's MNIST DP column: 0.898


# ---------------------------------------------------------------------------------------------
# the accountants on a recorded trace vs the privacy core's own computation
# ---------------------------------------------------------------------------------------------
def _core_epsilons(trace, z, c, q, total_steps, delta, bdp_delta, order, beta):
    """Recompute the three epsilons of a trace of per-step pair distances from the core's formulas."""
    from dpgen.privacy.accountants import log_moment_poisson_gaussian
    from dpgen.privacy.bayesian import DEFAULT_GAMMA, DEFAULT_ORDERS, sgm_log_cost, ucb_log_mean_exp
    from dpgen.privacy.wdp import wdp_epsilon, wdp_step_loss

    T = len(trace)
    lams = np.arange(1, 257)
    alpha = T * np.array([log_moment_poisson_gaussian(int(l), z, q) for l in lams])
    eps_dp = float(np.min((alpha + math.log(1 / delta)) / lams))
    costs = np.zeros(len(DEFAULT_ORDERS))
    for d in trace:
        for i, lam in enumerate(DEFAULT_ORDERS):
            costs[i] += ucb_log_mean_exp(total_steps * sgm_log_cost(lam, d, z * c, q), DEFAULT_GAMMA) / total_steps
    charge = -math.expm1(T * math.log1p(-DEFAULT_GAMMA))
    eps_bdp = float(max(0.0, np.min((costs - math.log(bdp_delta - charge)) / np.asarray(DEFAULT_ORDERS))))
    eps_wdp = wdp_epsilon(sum(wdp_step_loss(d, z * c, q, order) for d in trace), bdp_delta, beta)
    return {"moments": eps_dp, "bdp": eps_bdp, "wdp": eps_wdp}


def test_three_accountants_match_the_core_on_a_training_trace(tmp_path, monkeypatch, fake_data_root):
    from dpgen.tasks import run as run_task
    from tests.test_config import _compose  # the same composition as the CLI

    from dpgen.config import validate

    trace = []
    orig = DPSGD.account

    def recording(self, distances=None):
        d = self._distances if distances is None else distances  # the loop charges the last step's pairs
        trace.append(None if d is None else np.array(d))
        return orig(self, distances)

    monkeypatch.setattr(DPSGD, "account", recording)
    cfg = validate(_compose(["task=classification", "method=dpsgd", "dataset=mnist", f"dataset.data_root={fake_data_root}", "dataset.n_train=1000",
                             "trainer.steps=5", "trainer.batch_size=20", "trainer.progress=false",
                             "method.noise_multiplier=0.9", "method.pair_examples=5", "privacy.epsilon=50",
                             "trainer.checkpoint_every=2"]))
    m = run_task(cfg, tmp_path)
    assert m["steps"] == 5 and len(trace) == 5
    assert all(d is not None and d.shape == (10,) for d in trace)  # 5 examples -> 10 pairs per step
    assert all(np.all(d <= 2 * cfg.method.clip + 1e-6) for d in trace)  # clipped gradients: d <= 2C
    p = m["privacy"]
    ref = _core_epsilons(trace, 0.9, 1.0, p["sample_rate"], 5, 1e-5, 1e-10, 16.0, 32.0)
    for a in ("moments", "bdp", "wdp"):
        assert p["accountants"][a]["epsilon"] == pytest.approx(ref[a], rel=1e-9), a
        assert p["accountants"][a]["attack_probability"] == pytest.approx(attack_probability(ref[a]))
    # a second, independent implementation of the DP ledger: opacus' RDP of the Poisson-subsampled Gaussian
    # at the same integer orders alpha = lambda + 1 with the classic conversion (= the moments accountant's)
    from opacus.accountants.analysis.rdp import compute_rdp

    alphas = np.arange(2, 258, dtype=float)
    r = np.asarray(compute_rdp(q=p["sample_rate"], noise_multiplier=0.9, steps=5, orders=list(alphas)))
    assert p["accountants"]["moments"]["epsilon"] == pytest.approx(
        float(np.min(r + math.log(1e-5 ** -1) / (alphas - 1))), rel=1e-6)
    # opacus' own (tighter) conversion can only be lower
    assert p["cross_check"]["opacus_rdp"] <= p["accountants"]["moments"]["epsilon"] * (1 + 1e-9)
    # the epoch-end records of metrics.jsonl hold all three epsilons
    recs = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"eps_moments", "eps_bdp", "eps_wdp"} <= set(recs[-1])


def _steps(acc_state):
    return sum(int(h.get("num_steps", 1)) for h in acc_state["history"])


def test_accountant_state_survives_resume(tmp_path, monkeypatch, fake_data_root):
    """A run killed after step 3 (checkpoint at 2) resumes at 2 and ends with exactly 6 steps in every ledger (the
    default one, dp-accounting's PLD, and the moments, Bayesian and Wasserstein accountants beside it)."""
    from dpgen.config import validate
    from dpgen.privacy.accountants import epsilon_for
    from dpgen.tasks import run as run_task
    from tests.test_config import _compose

    ov = ["task=classification", "method=dpsgd", "dataset=mnist", f"dataset.data_root={fake_data_root}", "dataset.n_train=1000",
          "trainer.steps=6", "trainer.batch_size=20", "trainer.progress=false", "trainer.checkpoint_every=2",
          "method.noise_multiplier=1.1", "method.pair_examples=4", "privacy.epsilon=50"]
    orig = DPSGD.account
    calls = {"n": 0}

    class Killed(Exception):
        pass

    def dying(self, distances=None):
        calls["n"] += 1
        orig(self, distances)
        if calls["n"] == 3:
            raise Killed

    monkeypatch.setattr(DPSGD, "account", dying)
    with pytest.raises(Killed):
        run_task(validate(_compose(ov)), tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 2
    assert set(state["method"]["accountants"]) == {"pld", "moments", "bdp", "wdp"}
    assert all(_steps(s) == 2 for s in state["method"]["accountants"].values())
    monkeypatch.setattr(DPSGD, "account", orig)
    m = run_task(validate(_compose([*ov, "resume=true"])), tmp_path)
    assert m["steps"] == 6 and m["privacy"]["steps_accounted"] == 6
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert all(_steps(s) == 6 for s in state["method"]["accountants"].values())
    q = m["privacy"]["sample_rate"]
    assert m["privacy"]["epsilon_spent"] == pytest.approx(epsilon_for(1.1, q, 6, 1e-5, "poisson", "pld"), rel=1e-9)
    assert m["privacy"]["accountants"]["moments"]["epsilon"] == pytest.approx(
        epsilon_for(1.1, q, 6, 1e-5, "poisson", "moments"), rel=1e-9)
    steps = [json.loads(l)["step"] for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps))  # the discarded step 3's log line is gone, none duplicated


def test_budget_stop_with_fixed_noise(tmp_path, fake_data_root):
    from dpgen.config import validate
    from dpgen.privacy.accountants import epsilon_for
    from dpgen.tasks import run as run_task
    from tests.test_config import _compose

    q = 20 / 1000  # fake MNIST: 1,000 training images, batch 20
    budget = 0.5 * (epsilon_for(1.0, q, 4, 1e-5, "poisson", "moments") + epsilon_for(1.0, q, 5, 1e-5, "poisson", "moments"))
    ov = ["task=classification", "method=dpsgd", "dataset=mnist", f"dataset.data_root={fake_data_root}", "dataset.n_train=1000",
          "trainer.steps=50", "trainer.batch_size=20", "trainer.progress=false", "method.noise_multiplier=1.0",
          "method.accountants=[moments]", "privacy.accountant=moments"]
    m = run_task(validate(_compose([*ov, f"privacy.epsilon={budget}"])), tmp_path)
    assert m["privacy"]["sample_rate"] == pytest.approx(q)
    assert m["steps"] == 4 and m["privacy"]["steps_accounted"] == 4  # the 5th step would exceed the budget
    assert m["privacy"]["epsilon_spent"] <= budget
    assert m["stop_reason"].startswith("privacy budget")
    with pytest.raises(ValueError, match="not even one step"):
        run_task(validate(_compose([*ov, "privacy.epsilon=0.01"])), tmp_path / "b")


def test_nonprivate_baseline_runs(tmp_path, fake_data_root):
    from dpgen.config import validate
    from dpgen.tasks import run as run_task
    from tests.test_config import _compose

    cfg = validate(_compose(["task=classification", "method=dpsgd", "method.private=false", "dataset=mnist",
                             f"dataset.data_root={fake_data_root}", "dataset.n_train=1000", "trainer.steps=3", "trainer.batch_size=50",
                             "trainer.progress=false"]))
    m = run_task(cfg, tmp_path)
    assert m["steps"] == 3 and not m["privacy"]["private"] and 0 <= m["test_acc"] <= 100


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override,named", [
    ("method.clip=0", "method.clip"),
    ("method.clip=-1", "method.clip"),
    ("method.accountants=[moments,renyi]", "method.accountants"),
    ("method.pair_examples=1", "method.pair_examples"),
    ("method.wdp_order=0.5", "method.wdp_order"),
    ("method.bdp_delta=2", "method.bdp_delta"),
    ("task.norm=batch", "task.norm"),
])
def test_bad_config_is_named(override, named):
    from dpgen.config import ConfigError, validate
    from tests.test_config import _compose

    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        validate(_compose(["task=classification", "method=dpsgd", override]))


def test_bad_arguments_are_named():
    with pytest.raises(PrivacyParameterError, match="method.clip"):
        DPSGD(clip=0.0, noise_multiplier=1.0)
    with pytest.raises(PrivacyParameterError, match="clipping bound"):
        clip_gradients(torch.ones(2, 3), -1.0)
    with pytest.raises(PrivacyParameterError, match="unknown accountant"):
        DPSGD(noise_multiplier=1.0, accountants=["moments", "zcdp"])
    with pytest.raises(PrivacyParameterError, match="batch of 1 has no pair"):
        DPSGD(noise_multiplier=1.0, accountants=["bdp"], batch_size=1)
    with pytest.raises(PrivacyParameterError, match="pair_examples"):
        DPSGD(noise_multiplier=1.0, accountants=["bdp"], pair_examples=2, batch_size=64)
    DPSGD(noise_multiplier=1.0, accountants=["wdp"], pair_examples=2, batch_size=64)  # one pair is enough for WDP
    with pytest.raises(PrivacyParameterError, match="at least 2 gradients"):
        pair_distances(torch.ones(1, 3))


def test_run_with_batch_of_one_and_pairwise_accountants_is_refused(fake_data_root, tmp_path):
    """run.py turns this ValueError into 'dpgen: error: ...' (exit 2), as for every bad value."""
    from dpgen.config import validate
    from dpgen.tasks import run as run_task
    from tests.test_config import _compose

    cfg = validate(_compose(["task=classification", "method=dpsgd", "dataset=mnist",
                             f"dataset.data_root={fake_data_root}", "dataset.n_train=1000", "trainer.batch_size=1", "trainer.steps=1"]))
    with pytest.raises(ValueError, match=r"trainer\.batch_size=1 is invalid .*a batch of 1 has no pair"):
        run_task(cfg, tmp_path)


@pytest.mark.slow  # ~10 s unloaded (two short trainings + a figure); the presets themselves run in test_config
def test_table_smoke_writes_csv_and_figure(outputs_tmp, fake_data_root, monkeypatch):
    import csv

    from dpgen.tables import declared

    # the fake files hold 1,000 records: the size the guarantee declares
    rows = declared.run_table("wdp_table2", "smoke", str(fake_data_root), datasets=["mnist"],
                              extra=["dataset.n_train=1000"])
    COLUMNS = declared.load_table("wdp_table2", "smoke")["columns"]
    assert rows[0]["status"] == "ok"
    with open(outputs_tmp / "tables" / "wdp_table2_dataset.n_train_1000.csv") as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == COLUMNS and got[0]["dataset"] == "mnist"
    assert float(got[0]["eps_DP"]) <= 2.2 * (1 + 1e-6) and got[0]["eps_DP_paper"] == "2.2"
    assert "1 run" in got[0]["private_acc_verdict"] and len(got) == 1  # two runs, one row
    for k in ("DP", "BDP", "WDP"):  # attack probability of our own epsilon
        assert float(got[0][f"attack_{k}"]) == pytest.approx(attack_probability(float(got[0][f"eps_{k}"])), abs=1e-4)
    assert (outputs_tmp / "figures" / "wdp_table2_epsilons.png").stat().st_size > 1000


def test_small_poisson_batches_are_charged_worst_case_not_fatal():
    """A Poisson batch with fewer examples than the pairwise accountants need (3 for bdp) used to
    crash the run at random ("distances has a single pair"); it is charged with worst-case pairs."""
    m = DPSGD(clip=0.5, noise_multiplier=1.3, sample_rate=0.1, expected_batch_size=4.0,
              accountants=["moments", "bdp", "wdp"], pair_examples=4, batch_size=4)
    g = torch.Generator().manual_seed(0)
    for batch in (0, 1, 2):
        assert m.pair_indices(batch, g) is None
        m.account(None)  # worst case: every pair at distance 2 C
    assert len(m.pair_indices(3, g)) == 3 and len(m.pair_indices(10, g)) == 4
    assert m.steps == 3 and all(e > 0 for e in m.epsilons().values())


@pytest.mark.parametrize("logger", ["csv", "tensorboard", "wandb"])
def test_classification_loop_takes_every_logger_and_ema(tmp_path, fake_data_root, logger, monkeypatch):
    """The classification loop used to ignore logger= (it never called make_logger) and trainer.ema."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from dpgen.config import CONFIG_DIR, validate
    from dpgen.tasks import run as run_task

    pytest.importorskip(logger)
    monkeypatch.setenv("WANDB_MODE", "offline")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=[
            "task=classification", "method=dpsgd", "method.accountants=[moments]", "privacy.accountant=moments",
            "dataset=mnist",
            f"dataset.data_root={fake_data_root}", "dataset.n_train=1000", "trainer.epochs=null", "trainer.steps=4", "trainer.batch_size=32",
            "trainer.log_every=2", "trainer.progress=false", f"logger={logger}", "trainer.ema=0.5"]))
    m = run_task(cfg, tmp_path)
    assert m["ema"] == 0.5 and "ema" in torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    if logger == "csv":
        rows = (tmp_path / "metrics.csv").read_text().splitlines()
        assert rows[0].startswith("step,epoch,eps_moments") and len(rows) == 3
    elif logger == "tensorboard":
        assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("poison", [None, "inf", "nan"])
def test_ghost_clipping_gives_the_clipped_sum_of_the_func_path(poison):
    """method.per_sample=ghost (opacus' fast gradient clipping, the default) and func (torch.func,
    materialised) release the same clipped sum, pair gradients and loss; a non-finite record adds
    exactly nothing on both paths. Noise off (sigma tiny) so the sums compare directly."""
    torch.manual_seed(0)
    model = _tiny()  # group norm: per-sample parameters, like the WDP CNN
    x, y = _batch(12)
    x = x * torch.linspace(0.1, 30, 12).view(-1, *([1] * (x.dim() - 1)))  # some records clipped, some not
    if poison:
        x[3].view(-1)[0] = float(poison)
    pair_idx = torch.tensor([5, 0, 7])
    out = {}
    for path in ("ghost", "func"):
        m = DPSGD(clip=0.7, noise_multiplier=1e-9, sample_rate=0.1, expected_batch_size=12.0,
                  accountants=["moments", "wdp"], per_sample=path, chunk_size=5)
        loss, dist = m.private_gradient(model, x, y, noise_gen=torch.Generator().manual_seed(1), pair_idx=pair_idx)
        out[path] = (torch.cat([p.grad.flatten() for p in model.parameters()]), dist, loss)
    g, f = out["ghost"], out["func"]
    assert torch.isfinite(g[0]).all()
    torch.testing.assert_close(g[0], f[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g[1], f[1], rtol=1e-4, atol=1e-6)
    if poison is None:
        torch.testing.assert_close(g[2], f[2], rtol=1e-5, atol=1e-6)
    # the sum of 12 clipped gradients, divided by 12: each contributes at most C / 12
    assert float(g[0].norm()) <= 0.7 * (1 + 1e-4)
    if poison:  # the poisoned record adds nothing: the same sum as the batch without it, over 12
        keep = torch.arange(12) != 3
        ref = DPSGD(clip=0.7, noise_multiplier=1e-9, sample_rate=0.1, expected_batch_size=12.0,
                    accountants=["moments"], per_sample="func")
        ref.private_gradient(model, x[keep], y[keep], noise_gen=torch.Generator().manual_seed(1))
        torch.testing.assert_close(g[0], torch.cat([p.grad.flatten() for p in model.parameters()]),
                                   rtol=1e-4, atol=1e-6)


def test_per_sample_choice_is_validated():
    with pytest.raises(PrivacyParameterError, match="method.per_sample"):
        DPSGD(clip=1.0, noise_multiplier=1.0, sample_rate=0.1, expected_batch_size=4.0, per_sample="fast")
