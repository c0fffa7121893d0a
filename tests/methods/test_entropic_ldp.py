"""Entropic-LDP GAN: losses (geomloss <-> POT mapping), the one-time release, config errors, a fit."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from dpgen.config import ConfigError, register_configs, validate
from dpgen.losses.entropic import (
    entropic_objective_pot,
    entropic_wasserstein,
    geomloss_blur,
    ground_cost,
    matched_loss_params,
    sinkhorn_divergence,
    wasserstein,
)
from dpgen.methods.entropic_ldp import (
    EntropicLDP,
    dct2,
    epsilon_for_noise_scale,
    noise_scale,
    privatise,
    resolve_loss,
    sparsify_rows,
)
from dpgen.privacy.local import project_l1_ball, project_l2_ball

CONF = Path(__file__).resolve().parents[2] / "conf"
register_configs()


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---- losses --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p,reg", [(2, 0.5), (1, 0.5)])
def test_geomloss_mapping_matches_pot_entropic_cost(p, reg):
    """geomloss (cost ||x-y||_p^p, blur = lambda^(1/p), no debiasing) == POT's <pi, M> + lambda KL(pi | a x b)."""
    g = torch.Generator().manual_seed(p * 10 + int(reg * 10))
    x = torch.randn(20, 3, generator=g, dtype=torch.float64)
    y = torch.randn(25, 3, generator=g, dtype=torch.float64) * 0.7 + 0.5
    ours = float(entropic_wasserstein(x, y, p=p, reg=reg, scaling=0.99))
    pot = entropic_objective_pot(x.numpy(), y.numpy(), p=p, reg=reg)
    assert ours == pytest.approx(pot, rel=2e-3)
    # the entropic value lies above the exact W_p^p (the KL term is >= 0 and the plan is suboptimal for W_p)
    assert ours > float(wasserstein(x, y, p=p))
    # debiased divergence = OT(x, y) - (OT(x, x) + OT(y, y)) / 2, each by POT
    s = float(sinkhorn_divergence(x, y, p=p, reg=reg, scaling=0.99))
    s_pot = pot - 0.5 * (entropic_objective_pot(x.numpy(), x.numpy(), p, reg)
                         + entropic_objective_pot(y.numpy(), y.numpy(), p, reg))
    assert s == pytest.approx(s_pot, rel=1e-2, abs=2e-3)


def test_matching_rule_and_blur():
    assert matched_loss_params("laplace", 0.3) == (1, 0.3)
    p, reg = matched_loss_params("gaussian", 0.3)
    assert p == 2 and reg == pytest.approx(2 * 0.09)
    assert geomloss_blur(2, reg) == pytest.approx(np.sqrt(2) * 0.3)  # blur^2 = lambda = 2 s^2
    assert geomloss_blur(1, 0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="p=3"):
        ground_cost(torch.zeros(2, 2), torch.zeros(2, 2), 3)
    with pytest.raises(ValueError, match="reg"):
        entropic_wasserstein(torch.zeros(3, 2), torch.ones(3, 2), p=2, reg=0.0)


def test_ground_cost_is_the_lp_norm_to_the_p():
    x, y = torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, -4.0]])
    assert float(ground_cost(x, y, 1)) == pytest.approx(7.0)   # l1, not the Euclidean 5
    assert float(ground_cost(x, y, 2)) == pytest.approx(25.0)  # squared Euclidean, not 25 / 2


@pytest.mark.parametrize("p", [1, 2])
def test_exact_wasserstein_matches_the_1d_closed_form_and_has_gradients(p):
    g = torch.Generator().manual_seed(p)
    x = torch.randn(64, 1, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(64, 1, generator=g, dtype=torch.float64) * 2 + 1
    w = wasserstein(x, y, p=p)
    closed = (torch.sort(x.detach().flatten()).values - torch.sort(y.flatten()).values).abs().pow(p).mean()
    assert float(w.detach()) == pytest.approx(float(closed), rel=1e-9)
    w.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


# ---- the release ------------------------------------------------------------------------------------------------
def _method(mechanism="gaussian", epsilon=5.0, radius=1.0, **method):
    cfg = validate(_compose(["method=entropic_ldp", "dataset=manifolds", f"method.mechanism={mechanism}",
                             f"method.radius={radius}", f"privacy.epsilon={epsilon}", "privacy.secret_randomness=true",
                             *[f"method.{k}={v}" for k, v in method.items()]]))
    return EntropicLDP(cfg, data_dim=2, n_private=4000, steps=10, batch_size=100), cfg


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_privatised_data_is_never_clean_and_has_the_mechanism_scale(mechanism, tmp_path):
    from dpgen.data.synthetic import manifold_samples

    m, _ = _method(mechanism, epsilon=8.0, radius=1.0)
    x = torch.tensor(manifold_samples("ellipse", 4000, np.random.default_rng(0), a=0.5, b=0.25),
                     dtype=torch.float32)  # inside both unit balls: the projection changes nothing
    y = torch.arange(4000) % 3
    z, yz = m.prepare_data(x, y, tmp_path)
    # no record is released clean; a single coordinate may round back to its clean float32 value when its noise falls
    # below half an ulp (about 1e-7 a coordinate here: it failed one make test of 8,000 coordinates on 2026-12-07)
    exact = z == x
    assert z.shape == x.shape and not torch.any(exact.all(dim=1)) and int(exact.sum()) <= 2
    assert torch.all(yz == 0)  # labels dropped
    noise = (z - x).double().flatten().numpy()
    scale = m.noise_scale
    expected = 2 * 1.0 / 8.0 if mechanism == "laplace" else noise_scale("gaussian", 8.0, 1e-5, 1.0)
    assert scale == pytest.approx(expected)
    if mechanism == "laplace":
        # E|Laplace(b)| = b, sd of the mean b / sqrt(8,000) = 1.1 %: 6 % is 5.4 sd (the noise is secret, unseeded:
        # 4 %, 3.6 sd, failed in one make test on 2026-11-29: 0.2600 for 0.25), and a wrong scale (x sqrt 2) still fails
        assert np.mean(np.abs(noise)) == pytest.approx(scale, rel=0.06)
        assert m.p == 1 and m.reg == pytest.approx(scale)
    else:
        assert np.std(noise) == pytest.approx(scale, rel=0.045)  # sd of the sample std: 1 / sqrt(16,000) = 0.8 %
        assert m.p == 2 and m.reg == pytest.approx(2 * scale ** 2)
    assert abs(np.mean(noise)) < 5.5 * np.std(noise) / np.sqrt(noise.size)  # zero-mean noise, 5.5 sd
    # the release is cached with its parameters: a second call (a resumed run) reuses it, no fresh noise
    z2, _ = m.prepare_data(x, y, tmp_path)
    assert torch.equal(z, z2)
    m_other, _ = _method(mechanism, epsilon=4.0, radius=1.0)
    with pytest.raises(ValueError, match="second release"):
        m_other.prepare_data(x, y, tmp_path)
    rep = m.privacy_report()
    assert rep["depends_on_steps"] is False and rep["epsilon_spent"] == 8.0 and m.max_steps is None


def test_release_projects_on_the_ball():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3000, 4)) * 5  # far outside the balls
    for mech, proj, norm in (("gaussian", project_l2_ball, lambda v: np.linalg.norm(v, axis=1)),
                             ("laplace", project_l1_ball, lambda v: np.abs(v).sum(axis=1))):
        eps = 50.0
        z, s = privatise(x, mech, eps, 1e-5, 1.0, rng=np.random.default_rng(1))
        assert np.all(norm(proj(x, 1.0)) <= 1.0 + 1e-9)
        noise = z - proj(x, 1.0)  # the noise is added to the projected record
        est = np.std(noise) if mech == "gaussian" else np.mean(np.abs(noise))
        assert est == pytest.approx(s, rel=0.05)


def test_dct_release_sparsifies_projects_and_matches_the_torch_dct():
    from scipy.fft import dctn

    rng = np.random.default_rng(4)
    imgs = rng.uniform(size=(50, 1, 8, 8))
    t = dct2(torch.tensor(imgs))
    np.testing.assert_allclose(t.numpy(), dctn(imgs, type=2, norm="ortho", axes=(-2, -1)), atol=1e-10)
    rows = dctn(imgs, type=2, norm="ortho", axes=(-2, -1)).reshape(50, -1)
    sp = sparsify_rows(rows, 0.8)
    assert np.all((sp != 0).sum(axis=1) <= np.ceil(0.2 * 64) + 1)
    z, b = privatise(imgs, "laplace", 200.0, 1e-5, 2.0, dct_shape=(8, 8), dct_quantile=0.8,
                     rng=np.random.default_rng(5))
    clean_release = project_l1_ball(sp, 2.0)
    assert np.mean(np.abs(z - clean_release)) == pytest.approx(b, rel=0.05)


def test_epsilon_for_noise_scale_inverts_the_calibration():
    for mech in ("laplace", "gaussian"):
        eps = epsilon_for_noise_scale(mech, 0.3, 1.0, 1e-5)
        assert noise_scale(mech, eps, 1e-5, 1.0) == pytest.approx(0.3, rel=1e-6)


def test_loss_refuses_unprivatised_data():
    m, _ = _method()
    with pytest.raises(RuntimeError, match="clean data"):
        m.loss(torch.zeros(4, 2), None, torch.ones(4, 2), None)


# ---- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override,named", [
    ("privacy.epsilon=0", "privacy.epsilon"),
    ("privacy.epsilon=-1", "privacy.epsilon"),
    ("method.radius=0", "method.radius"),
    ("method.radius=-2", "method.radius"),
    ("method.p=2", "method.p=2"),
    ("method.reg=0", "method.reg"),
    ("method.loss=kl", "method.loss"),
])
def test_bad_input_is_named(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        validate(_compose(["method=entropic_ldp", "method.mechanism=laplace", override]))


def test_mismatched_p_is_allowed_when_forced():
    with pytest.warns(UserWarning, match="does not match"):
        validate(_compose(["method=entropic_ldp", "method.mechanism=laplace", "method.p=2", "method.force=true"]))
    with pytest.raises(ValueError, match="force"):
        resolve_loss("gaussian", 0.2, p=1)
    with pytest.warns(UserWarning):
        assert resolve_loss("gaussian", 0.2, p=1, force=True) == (1, pytest.approx(0.08))


def test_wp_gan_baseline_is_the_same_release_with_the_plain_loss():
    m, _ = _method("gaussian", loss="wasserstein")
    assert m.loss_kind == "wasserstein" and m.p == 2


# ---- training -------------------------------------------------------------------------------------------------
def test_zero_noise_tiny_regularisation_fits_a_2d_target(tmp_path):
    """Without noise and with lambda -> 0 the entropic loss is W2^2: the generator must fit the target
    (the figures' training: method=entropic_ldp through the one loop, one run folder per fit)."""
    from dpgen.tables.ldp_common import fit_generator, generate, w2

    rng = np.random.default_rng(0)
    t = rng.uniform(-1, 1, size=128)
    target = np.stack([t, 0.5 * t + 0.3], axis=1)  # a segment
    tt = torch.tensor(target, dtype=torch.float32)
    torch.manual_seed(0)
    release = {"method.mechanism": "gaussian", "privacy.epsilon": 50.0}
    gen0, _, _ = fit_generator(tt, "entropic", 2, 1e-3, generator="mlp256_uniform", code_dim=2, steps=1, lr=1e-9,
                               seed=0, progress=False, release=release, run_dir=tmp_path / "untrained")
    before = w2(generate(gen0, 128).numpy(), target)
    gen, _, hist = fit_generator(tt, "entropic", 2, 1e-3, generator="mlp256_uniform", code_dim=2, steps=150, lr=3e-3,
                                 optimizer="adam", seed=0, scaling=0.6, progress=False, release=release,
                                 run_dir=tmp_path / "trained")
    after = w2(generate(gen, 128).numpy(), target)
    # the target's spread is W2(target, its mean) ~ 0.65; the untrained generator sits at ~0.7
    assert after < 0.15 and after < 0.2 * before, (before, after, hist[-3:])
    assert hist and hist[-1][0] == 150 and (tmp_path / "trained" / "config.yaml").exists()


def test_a_figure_run_resumes_and_a_finished_one_is_read_back(tmp_path):
    """The figures' runs go through resume=auto: a run stopped at step 2 of 4 continues from its checkpoint
    (no step twice), and a finished run is read back from its checkpoint, not trained again."""
    from dpgen.tables.ldp_common import checkpoint_every, fit_generator, generate

    assert checkpoint_every(10_000) == 1000 and checkpoint_every(300) == 300 and checkpoint_every(0) == 1
    tt = torch.tensor(np.random.default_rng(1).uniform(-1, 1, size=(64, 2)), dtype=torch.float32)
    kw = dict(generator="mlp256_uniform", code_dim=2, lr=1e-3, optimizer="adam", seed=0, progress=False,
              release={"method.mechanism": "gaussian", "privacy.epsilon": 50.0}, run_dir=tmp_path / "run")
    fit_generator(tt, "entropic", 2, 1e-2, steps=2, **kw)  # an interrupted run: its checkpoint holds step 2
    gen, _, hist = fit_generator(tt, "entropic", 2, 1e-2, steps=4, **kw)
    assert [h[0] for h in hist] == [1, 2, 3, 4]  # steps 3 and 4 added, 1 and 2 kept, none twice
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["steps"] == 4
    stamp = (tmp_path / "run" / "checkpoints" / "last.pt").stat().st_mtime_ns
    again, _, hist2 = fit_generator(tt, "entropic", 2, 1e-2, steps=4, **kw)
    assert hist2 == hist
    assert (tmp_path / "run" / "checkpoints" / "last.pt").stat().st_mtime_ns == stamp  # no step trained
    assert torch.equal(generate(again, 16), generate(gen, 16))


def test_trainer_runs_privatises_once_and_resume_reuses_the_release(tmp_path):
    from dpgen.tasks import TASKS

    ov = ["experiment=ldp_manifolds", "dataset.options.n=200", "trainer.batch_size=200", "trainer.steps=2",
          "trainer.progress=false", "trainer.log_every=1", "trainer.checkpoint_every=1", "method.scaling=0.5"]
    cfg = validate(_compose(ov))
    m = TASKS["generation"](cfg, output_dir=tmp_path)
    priv = m["privacy"]
    assert priv["private"] and priv["depends_on_steps"] is False and priv["max_steps_in_budget"] is None
    assert priv["epsilon_spent"] == cfg.privacy.epsilon
    eps_logged = [json.loads(l).get("epsilon") for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(e in (None, cfg.privacy.epsilon) for e in eps_logged)
    release = torch.load(tmp_path / "privatised_data.pt", weights_only=False)["x"]
    cfg2 = validate(_compose(ov[:-4] + ["trainer.steps=4", "trainer.progress=false", "trainer.log_every=1",
                                        "trainer.checkpoint_every=1", "method.scaling=0.5", "resume=true"]))
    m2 = TASKS["generation"](cfg2, output_dir=tmp_path)
    assert m2["steps"] == 4
    assert torch.equal(torch.load(tmp_path / "privatised_data.pt", weights_only=False)["x"], release)


def test_wavelet_denoising_and_its_oracle_tuning_reduce_the_error():
    from dpgen.baselines import tune_wavelet, wavelet_denoise

    rng = np.random.default_rng(6)
    yy, xx = np.mgrid[0:28, 0:28] / 27.0
    clean = np.stack([np.clip(1 - 4 * ((xx - c) ** 2 + (yy - 0.5) ** 2), 0, 1) for c in (0.3, 0.5, 0.7)])
    noisy = clean + rng.normal(0, 0.3, clean.shape)
    best = tune_wavelet(noisy, clean, 0.3, wavelets=("haar", "db2"), levels=(1, 2), threshold_factors=(1.0, 3.0))
    assert best["error"] < 0.6 * best["error_noisy"]
    den = wavelet_denoise(noisy, best["wavelet"], best["level"], best["threshold"], best["mode"])
    assert den.shape == noisy.shape
    np.testing.assert_allclose(wavelet_denoise(clean, "haar", 2, 0.0), clean, atol=1e-10)  # threshold 0: identity


def _tiny_table(tmp_path, name, smoke):
    """conf/table/<name>.yaml with ``smoke`` as its smoke scale, written to a file of the same name (the same
    output and run-folder names) for ``dpgen table`` (:func:`dpgen.tables.declared.run_table`)."""
    import yaml

    from dpgen.tables.declared import table_path

    spec = yaml.safe_load(table_path(name).read_text())
    spec["scales"]["smoke"] = smoke
    path = tmp_path / "conf_table" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_the_manifold_figure_trains_each_cell_through_the_one_loop(outputs_tmp, capsys):
    """fig-ldp-manifolds: every (mechanism, noise, loss) cell is a method=entropic_ldp run of the one loop,
    with its own run folder and config.yaml (a tiny scale: 60 points, 5 steps), through ``dpgen table``."""
    from dpgen.tables import declared

    yaml_file = _tiny_table(outputs_tmp, "ldp_manifolds", {"shapes": ["half_circle"], "noise": [0.3], "n": 60,
                                                           "steps": 5})
    assert declared.main([yaml_file, "--scale", "smoke", "--seed", "0", "--no-progress"]) == 0
    rows = list(csv.DictReader((outputs_tmp / "tables" / "ldp_manifolds.csv").open()))
    assert len(rows) == 2 * 3 and all(r["steps"] == "5" and float(r["w2_to_clean"]) > 0 for r in rows)
    assert "[dpgen] table ldp_manifolds (smoke) took" in capsys.readouterr().out
    assert "Wall time" in (outputs_tmp / "tables" / "ldp_manifolds.md").read_text()
    for fig in ("ldp_fig1_manifolds", "ldp_manifolds_w2"):
        assert (outputs_tmp / "figures" / f"{fig}.png").exists()
    runs = sorted((outputs_tmp / "runs" / "ldp_manifolds" / "smoke").iterdir())
    assert len(runs) == 6 and all((r / "config.yaml").exists() and (r / "metrics.json").exists() for r in runs)
    m = json.loads((runs[0] / "metrics.json").read_text())
    assert m["method"] == "entropic_ldp" and m["steps"] == 5 and m["privacy"]["guarantee"].startswith("local DP")


def test_the_wgan_gp_baseline_is_a_method_of_the_one_loop(tmp_path):
    """fig-ldp-mnist's "wavelet + WGAN-GP" column: method=wgan_gp (n_critic critic updates per step on their
    own batches) trained on a released set through the one loop; its checkpoint holds the critic."""
    from dpgen.tables.ldp_common import fit_on_release

    data = torch.rand(100, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    gen, sec, hist = fit_on_release(data, [
        "method=wgan_gp", "method.n_critic=2", "dataset=mnist10k", "task.eval_models=[]", "model.generator=dcgan28",
        "model.code_dim=16", "trainer.epochs=null", "trainer.steps=3", "trainer.batch_size=8", "trainer.log_every=1",
        "trainer.optimizer=adam", "trainer.betas=[0.5,0.9]", "trainer.lr=1e-4"], tmp_path / "wgan", progress=False)
    assert [h[0] for h in hist] == [1, 2, 3] and all(np.isfinite(h[1]) for h in hist)
    state = torch.load(tmp_path / "wgan" / "checkpoints" / "last.pt", weights_only=False)
    assert "critic" in state["method"] and (tmp_path / "wgan" / "config.yaml").exists()
    x, _ = gen.sample(4)
    assert x.shape == (4, 1, 28, 28)


def test_figure_2_fills_fid_cells_for_released_and_generated_columns_only(outputs_tmp, fake_data_root,
                                                                         monkeypatch):
    """``fid: true`` (the paper scale): every column but the raw training images gets FID / precision / recall of
    its images against the whole test split, through dpgen.tasks.generation.fid_of_images (the Inception network
    replaced by a fixed random projection of the pixels here), after the training, for each mechanism whose runs
    are all there: a process that trains the Gaussian runs measures the Gaussian columns and says the Laplace ones
    wait; the process that trains the rest reads the Gaussian cells back; without the weights the cells stay
    empty and the notes say why."""
    from dpgen.eval import fid as fidmod
    from dpgen.tables import declared, ldp_mnist

    passes = []

    class Projection:  # a stand-in for the Inception features: cheap, deterministic, not constant
        weights_name = "projection-stand-in"
        w = np.random.default_rng(0).normal(size=(784, 16))

        def __call__(self, images, image_shape=None, progress=False, name="", resume_dir=None):
            passes.append(len(images))
            return torch.as_tensor(images).reshape(len(images), -1).double().numpy() @ self.w

    monkeypatch.setattr(fidmod, "get_extractor", lambda *a, **k: Projection())
    smoke = {"noise": 1.0, "steps": 2, "wgan_steps": 1, "batch": 16, "n_eval": 40, "n_tune": 8, "fid": True}
    kw = dict(data_root=str(fake_data_root), datasets=["mnist"], progress=False)
    rows = declared.run_table(_tiny_table(outputs_tmp, "ldp_mnist", smoke), "smoke", rows=["gaussian_*"], **kw)
    assert all((r["fid"] is None) == (r["mechanism"] == "laplace" or r["column"] == "raw") for r in rows)
    assert passes.count(40) == 5  # the five Gaussian columns' 40 images (beside passes over the test images)
    assert "the laplace columns wait for their runs" in (outputs_tmp / "tables" / "ldp_mnist_mnist.md").read_text()
    rows = declared.run_table(_tiny_table(outputs_tmp, "ldp_mnist", smoke), "smoke", **kw)  # trains the rest
    assert passes.count(40) == 10  # the five Laplace columns only: the Gaussian cells are read back
    for r in rows:
        if r["column"] == "raw":
            assert r["fid"] is None and r["recall"] is None
        else:
            assert r["fid"] > 0 and 0 <= r["precision"] <= 1 and 0 <= r["recall"] <= 1, r["column"]
    text = (outputs_tmp / "tables" / "ldp_mnist_mnist.md").read_text()
    assert any(line.startswith("|") and "| fid | precision | recall |" in line for line in text.splitlines())
    assert "FID protocol: the same 40 images of each column" in text

    def missing(*a, **k):
        raise fidmod.FIDUnavailable("the FID Inception weights are not installed (make fid-weights)")

    monkeypatch.setattr(fidmod, "get_extractor", missing)
    rows = declared.run_table(_tiny_table(outputs_tmp, "ldp_mnist", smoke), "smoke", **kw)
    assert all(r["fid"] is None for r in rows)
    assert "Not computed: the FID Inception weights are not installed" in (
        outputs_tmp / "tables" / "ldp_mnist_mnist.md").read_text()


def test_figures_2_and_5_run_on_the_full_mnist(outputs_tmp, fake_data_root, monkeypatch, capsys):
    """fig-ldp-mnist / fig-ldp-convergence with ``--datasets mnist`` (the paper's 60,000 images; here the fake
    files' 1,000): the whole train split is privatised and trained on, and the files are named for it, beside
    the mnist10k stand-in's (a tiny scale: 4 steps)."""
    from dpgen.tables import declared, ldp_convergence, ldp_mnist

    fig5 = _tiny_table(outputs_tmp, "ldp_convergence", {"noise": [0.1, 0.3], "steps": 4, "batch": 16, "n_eval": 40})
    fig2 = _tiny_table(outputs_tmp, "ldp_mnist", {"noise": 1.0, "steps": 4, "wgan_steps": 2, "batch": 16,
                                                  "n_eval": 40, "n_tune": 8})
    seen = []
    real = ldp_convergence.privatise
    monkeypatch.setattr(ldp_convergence, "privatise", lambda x, *a, **kw: seen.append(len(x)) or real(x, *a, **kw))
    kw = dict(data_root=str(fake_data_root), datasets=["mnist"], progress=False)
    rows5 = declared.run_table(fig5, "smoke", **kw)
    assert seen == [1000, 1000] and len(rows5) == 6 and all(r["steps"] == 4 and r["w2_to_clean"] > 0 for r in rows5)
    # the estimator's floor: 40 other clean training images against the same 40, by POT's exact solver here
    import ot

    from dpgen.tables.ldp_common import load_mnist_images

    clean = load_mnist_images(fake_data_root, "mnist")[0].reshape(1000, -1).double().numpy()
    floor = np.sqrt(ot.emd2([], [], ot.dist(clean[40:80], clean[:40])))
    assert all(r["w2_clean_to_clean"] == pytest.approx(floor, rel=1e-6) for r in rows5)
    rows2 = declared.run_table(fig2, "smoke", **kw)
    assert {r["column"] for r in rows2} == set(ldp_mnist.COLS) and all(np.isfinite(r["w2_to_clean"]) for r in rows2)
    for name in ("ldp_convergence_mnist", "ldp_mnist_mnist"):
        assert "full MNIST" in (outputs_tmp / "tables" / f"{name}.md").read_text()
        runs = sorted((outputs_tmp / "runs" / name / "smoke").iterdir())
        # every run's config.yaml names the data its release came from, the full MNIST, not the preset's stand-in
        assert runs and all("name: mnist\n" in (r / "config.yaml").read_text() for r in runs)
    for fig in ("ldp_fig5_convergence_mnist", "ldp_fig2_mnist_mnist"):
        assert (outputs_tmp / "figures" / f"{fig}.png").exists()
    capsys.readouterr()
    assert declared.main([fig5, "--dataset", "cifar10"]) == 2  # the choices named
    assert "'cifar10' is not one of mnist10k, mnist" in capsys.readouterr().err


def test_figure_runs_split_over_processes_and_collect(outputs_tmp, fake_data_root):
    """``--rows`` trains a subset of a figure's runs (two processes or sessions share the figure), the table then
    holds every finished run and says which are missing, with no verdict; ``--collect-only`` trains nothing and
    reads the finished runs back unchanged; a pattern naming no run, or nothing finished, is a clear error."""
    from dpgen.tables import declared, ldp_convergence, ldp_mnist

    fig5 = _tiny_table(outputs_tmp, "ldp_convergence", {"noise": [0.1, 0.3], "steps": 3, "batch": 16, "n_eval": 40})
    fig2 = _tiny_table(outputs_tmp, "ldp_mnist", {"noise": 1.0, "steps": 3, "wgan_steps": 2, "batch": 16,
                                                  "n_eval": 40, "n_tune": 8})
    kw = dict(data_root=str(fake_data_root), datasets=["mnist"], progress=False)

    def fig_5(**more):
        return declared.run_table(fig5, "smoke", **kw, **more)

    md = outputs_tmp / "tables" / "ldp_convergence_mnist.md"
    runs = outputs_tmp / "runs" / "ldp_convergence_mnist" / "smoke"
    with pytest.raises(ValueError, match="no run has finished"):
        fig_5(collect_only=True)
    with pytest.raises(ValueError, match="--rows s0.2_\\* names none.*s0.1_entropic"):
        fig_5(rows=["s0.2_*"])
    first = fig_5(rows=["s0.1_*"])
    assert sorted(p.name for p in runs.iterdir()) == ["s0.1_entropic", "s0.1_sinkhorn", "s0.1_wasserstein"]
    assert {(r["noise_scale"], r["loss"]) for r in first} == {(0.1, l) for l in ldp_convergence.LOSSES}
    text = md.read_text()
    assert "Partial: 3 of 6 runs" in text and "s0.3_entropic" in text and "Verdict: none yet" in text
    again = fig_5(collect_only=True)  # reads back, trains nothing
    assert sorted(p.name for p in runs.iterdir()) == ["s0.1_entropic", "s0.1_sinkhorn", "s0.1_wasserstein"]
    assert [r["w2_to_clean"] for r in again] == [r["w2_to_clean"] for r in first]
    whole = fig_5(rows=["s0.3_*"])
    assert len(whole) == 6 and [r["w2_to_clean"] for r in whole[:3]] == [r["w2_to_clean"] for r in first]
    text = md.read_text()
    assert "Partial" not in text and "Verdict: the paper's" in text and "Verdict: none yet" not in text
    assert (outputs_tmp / "figures" / "ldp_fig5_convergence_mnist.png").exists()

    rows2 = declared.run_table(fig2, "smoke", rows=["gaussian_*"], **kw)  # Figure 2: laplace keeps 3 columns
    cols = {(r["mechanism"], r["column"]) for r in rows2}
    assert {c for m, c in cols if m == "gaussian"} == set(ldp_mnist.COLS)
    assert {c for m, c in cols if m == "laplace"} == {"raw", "privatised", "wavelet_denoised"}
    text = (outputs_tmp / "tables" / "ldp_mnist_mnist.md").read_text()
    assert "Not run yet: wp_gan, wavelet_wgan_gp, entropic_wp_gan" in text and "Partial: 3 of 6 runs" in text
    assert (outputs_tmp / "figures" / "ldp_fig2_mnist_mnist.png").exists()
    # the other half in a second process: the Gaussian release it draws is the one the Gaussian runs trained on
    rows3 = declared.run_table(fig2, "smoke", rows=["laplace_*"], **kw)
    gauss = {r["column"]: r["w2_to_clean"] for r in rows2 if r["mechanism"] == "gaussian"}
    # equal up to rounding: on CUDA the generators' samples are recomputed with non-deterministic kernels (an H100
    # gave differences of 4e-11 relative); another release would move W2 by far more than 1e-6
    assert {r["column"]: r["w2_to_clean"] for r in rows3 if r["mechanism"] == "gaussian"} == pytest.approx(gauss,
                                                                                                          rel=1e-6)
    assert "Partial" not in (outputs_tmp / "tables" / "ldp_mnist_mnist.md").read_text()


def test_figure_5_verdict_says_when_w2_cannot_resolve_the_generators():
    """Figure 5's W2 on a few thousand images in 784-D is mostly finite-sample bias: when every generator is
    closer to the clean images than other clean images are, the verdict says the measure cannot rank them
    (full MNIST at the paper's length: generators 5.15-5.22, two sets of 2,000 clean images 5.87 apart)."""
    from dpgen.tables import ldp_convergence
    from dpgen.tables.declared import load_table

    scale = load_table("ldp_convergence", "paper")["settings"]

    def rows(w2s, floor):
        return [{"loss": l, "noise_scale": nz, "w2_to_clean": w2s[i], "entropic_w2_to_private": 1.0 + i,
                 "w2_clean_to_clean": floor}
                for i, (nz, l) in enumerate((nz, l) for nz in scale["noise"] for l in ldp_convergence.LOSSES)]

    n = len(scale["noise"]) * len(ldp_convergence.LOSSES)
    flat = [5.15 + 0.004 * i for i in range(n)]
    text = " ".join(ldp_convergence.notes_for(rows(flat, 5.87), scale, "paper", "mnist"))
    assert "cannot show it here" in text and f"{n} of {n} generators are closer" in text and "W2 5.87" in text
    # one generator above the floor: the measure resolves something, the claim is checked as before
    text = " ".join(ldp_convergence.notes_for(rows(flat[:-1] + [6.0], 5.87), scale, "paper", "mnist"))
    assert "cannot show it here" not in text and "Verdict: the paper's claim" in text
    assert f"{n - 1} of {n} generators" in text
    # no floor (fewer than 2 n_eval training images): no reference sentence, the old verdict
    text = " ".join(ldp_convergence.notes_for(rows(flat, None), scale, "paper", "mnist"))
    assert "Reference:" not in text and "Verdict: the paper's claim" in text


def test_figure_2_notes_do_not_rank_generators_below_the_sampling_floor():
    """Figure 2 at the paper's length on the full MNIST: both W_p GANs land below the raw column (clean training
    images against as many held-out ones, 6.41) and 0.006 apart; the notes say W2 cannot rank them there, and
    name the best only when at most one column is below that floor."""
    from dpgen.tables import ldp_mnist
    from dpgen.tables.declared import load_table

    paper = load_table("ldp_mnist", "paper")["settings"]

    def rows(wp, ent, gp, raw=6.41):
        val = {"raw": raw, "privatised": 28.6, "wavelet_denoised": 7.09, "wp_gan": wp, "wavelet_wgan_gp": gp,
               "entropic_wp_gan": ent}
        return [{"mechanism": m, "column": c, "w2_to_clean": v} for m in ("laplace", "gaussian")
                for c, v in val.items()]

    text = " ".join(ldp_mnist.notes_for(rows(5.3828, 5.3764, 7.09), paper, "paper", "mnist"))
    assert "entropic_wp_gan and wp_gan are closer to the held-out images" in text and "raw 6.41" in text
    assert "Best of" not in text
    text = " ".join(ldp_mnist.notes_for(rows(7.5, 5.38, 7.09), paper, "paper", "mnist"))
    assert "Best of the denoisers/generators: entropic_wp_gan." in text and "cannot rank" not in text


def test_two_split_processes_reading_back_the_same_finished_run_do_not_collide(outputs_tmp, fake_data_root,
                                                                               monkeypatch):
    """Two processes of a split figure read back the same finished runs at their start; the second one found
    the folder held by the first (reading it back) and stopped with RunDirBusy. A finished run held elsewhere
    is now waited for; an unfinished one held elsewhere (being trained there) still stops at once."""
    import subprocess
    import sys
    import threading

    from dpgen.tables import declared
    from dpgen.utils.run_dir import RunDirBusy

    fig5 = _tiny_table(outputs_tmp, "ldp_convergence", {"noise": [0.1], "steps": 3, "batch": 16, "n_eval": 40})
    monkeypatch.setattr("dpgen.tables.ldp_common._WAIT_S", 60.0)
    kw = dict(data_root=str(fake_data_root), datasets=["mnist"], progress=False)
    first = declared.run_table(fig5, "smoke", rows=["s0.1_*"], **kw)
    def hold(folder):  # another live process holds the run folder's lock until killed
        p = subprocess.Popen([sys.executable, "-c", "import time; from dpgen.utils.run_dir import claim_run_dir; "
                              f"claim_run_dir({str(folder)!r}, 'auto'); print('held', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
        return p

    folder = outputs_tmp / "runs" / "ldp_convergence_mnist" / "smoke" / "s0.1_entropic"
    holder = hold(folder)
    try:
        assert holder.stdout.readline().strip() == "held"
        # the other process finishes reading it back (reaped: a zombie's pid still looks alive)
        threading.Timer(3.0, lambda: (holder.kill(), holder.wait())).start()
        again = declared.run_table(fig5, "smoke", collect_only=True, **kw)
        assert [r["w2_to_clean"] for r in again] == [r["w2_to_clean"] for r in first]
    finally:
        holder.kill()
        holder.wait()
    (folder / "metrics.json").unlink()  # now an unfinished run: someone else trains it
    holder = hold(folder)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match="held by another live run"):
            declared.run_table(fig5, "smoke", rows=["s0.1_entropic"], **kw)
    finally:
        holder.kill()
        holder.wait()
