"""Domain adaptation (task=domain_adaptation): DP-SWD, SWD, DANN, DP-DANN (dp-swd.txt section 4)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from dpgen.config import register_configs, validate
from dpgen.methods.da_dpswd import DADPSWD, bound_representation
from dpgen.methods.dpdann import DPDANN, OpacusGhostClip, OpacusPerSample, per_sample_grads
from dpgen.privacy.clipping import clip_per_sample
from dpgen.models.da_nets import make_da_nets
from dpgen.tasks import run as run_task
from dpgen.tasks.domain_adaptation import load_domains

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
DA_EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("da_*.yaml"))
register_configs()


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return validate(compose(config_name="config", overrides=overrides))


@pytest.fixture(scope="module")
def da_root(tmp_path_factory):
    """Tiny files in every documented layout: MNIST idx, usps.h5, VisDA npz, Office-31 npz / csv / npy."""
    import h5py

    from dpgen.data.images import write_idx

    root = tmp_path_factory.mktemp("da_data")
    rng = np.random.default_rng(0)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix in ("t10k", "train"):  # U-M's target is the test split, M-U's source the train split (the paper's)
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (60, 28, 28), dtype=np.uint8))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(60) % 10).astype(np.uint8))
    (root / "usps").mkdir()
    with h5py.File(root / "usps" / "usps.h5", "w") as f:
        for split, n in (("train", 50), ("test", 20)):
            grp = f.create_group(split)
            grp["data"] = rng.random((n, 256), dtype=np.float32)
            grp["target"] = np.arange(n) % 10
    (root / "visda").mkdir()
    for dom in ("train", "validation"):
        np.savez(root / "visda" / f"{dom}.npz", features=rng.random((40, 2048), dtype=np.float32),
                 labels=np.arange(40) % 12)
    off = root / "office31"
    off.mkdir()
    np.savez(off / "amazon.npz", features=rng.random((45, 2048), dtype=np.float32), labels=np.arange(45) % 31)
    table = np.concatenate([rng.random((35, 2048)), (np.arange(35) % 31)[:, None]], axis=1)
    np.savetxt(off / "dslr.csv", table, delimiter=",", fmt="%.5f")  # jindongwang's CSV format
    np.save(off / "webcam_features.npy", rng.random((40, 2048), dtype=np.float32))
    np.save(off / "webcam_labels.npy", np.arange(40) % 31)
    return root


#: the private targets' sizes in ``da_root``, declared as dataset.n_train (the public size a run's q is computed
#: from; a replace-one method refuses a target of another size)
DA_ROOT_TARGETS = {"da_um": 60, "da_mu": 50, "da_visda": 40, "da_office31_dw": 40, "da_office31_ad": 35,
                   "da_office31_aw": 40, "da_office31_da": 45, "da_office31_wa": 45, "da_office31_wd": 35}


def _da_cfg(experiment, root, *extra):
    n = [f"dataset.n_train={DA_ROOT_TARGETS[experiment]}"] if experiment in DA_ROOT_TARGETS else []
    return _compose([f"experiment={experiment}", "trainer.epochs=null", "trainer.steps=1", "trainer.batch_size=8",
                     "trainer.progress=false", f"dataset.data_root={root}", *n, *extra])


# ---- the feature loaders read the documented layout ------------------------------------------------------------


def test_feature_loaders_read_documented_layout(da_root):
    d = load_domains(_da_cfg("da_visda", da_root))
    assert d["Xs"].shape == (40, 2048) and d["Xt"].shape == (40, 2048) and d["num_classes"] == 12
    assert d["source_file"].endswith("visda/train.npz") and d["target_file"].endswith("visda/validation.npz")
    d = load_domains(_da_cfg("da_office31_dw", da_root))  # dslr: CSV (features then label), webcam: npy pair
    assert d["Xs"].shape == (35, 2048) and d["source_file"].endswith("dslr.csv")
    assert torch.equal(d["Ys"], torch.arange(35) % 31)
    assert d["Xt"].shape == (40, 2048) and d["target_file"].endswith("webcam_features.npy")
    d = load_domains(_da_cfg("da_office31_aw", da_root))
    assert d["Xs"].shape == (45, 2048) and d["source_file"].endswith("amazon.npz")
    d = load_domains(_da_cfg("da_um", da_root))  # USPS framed as MNIST: 20x20 + 4-pixel border
    assert d["Xs"].shape == (50, 1, 28, 28) and d["Xt"].shape == (60, 1, 28, 28)


# ---- bad input ---------------------------------------------------------------------------------------------------


def test_feature_dimension_mismatch_is_named(da_root):
    cfg = _da_cfg("da_um", da_root, "dataset.source_options.resize=null")  # USPS 16x16 padded to 24x24
    with pytest.raises(ValueError, match=r"different dimensions \(1, 24, 24\) and \(1, 28, 28\)"):
        load_domains(cfg)


def test_class_count_mismatch_is_named(da_root):
    cfg = _da_cfg("da_visda", da_root, "dataset.source=office31", "dataset.source_options.domain=amazon")
    with pytest.raises(ValueError, match="class counts do not match: source office31 has 31, target visda has 12"):
        load_domains(cfg)


def test_missing_domain_file_is_named(da_root, tmp_path):
    cfg = _da_cfg("da_office31_dw", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"source domain of problem D-W .*office31/dslr\.npz"):
        load_domains(cfg)


def test_non_problem_dataset_is_refused():
    cfg = _compose(["task=domain_adaptation", "dataset=mnist"])
    with pytest.raises(ValueError, match="dataset=da_usps_mnist"):
        load_domains(cfg)


# ---- every problem preset runs one step; metrics hold the privacy record -----------------------------------------


@pytest.mark.parametrize("experiment", DA_EXPERIMENTS)
def test_every_problem_preset_runs_one_step(experiment, da_root, tmp_path):
    cfg = _da_cfg(experiment, da_root, "method.bound=bernstein")  # Table 1's bound
    m = run_task(cfg, tmp_path)
    assert m["steps"] == 1 and 0.0 <= m["target_acc"] <= 100.0
    saved = json.loads((tmp_path / "metrics.json").read_text())
    p = saved["privacy"]
    assert p["private"] and 0 < p["epsilon_spent"] <= cfg.privacy.epsilon and p["private_steps"] == 1
    assert p["noise_std"] > 0 and p["bound"] == "bernstein" and p["row_bound"].startswith("clip")
    assert p["noise_std"] == pytest.approx(p["noise_multiplier"] * p["sensitivity"]) and "sigma" not in p
    assert "target domain only" in p["protected_data"] and p["guarantee_holds"] is True
    assert p["delta"] <= cfg.privacy.delta * (1 + 1e-9)


@pytest.mark.parametrize("method", ["swd", "dann", "dpdann"])
def test_every_method_runs_one_step(method, da_root, tmp_path):
    m = run_task(_da_cfg("da_um", da_root, f"method={method}"), tmp_path)
    assert m["steps"] == 1 and m["method"] == method
    if method == "dpdann":
        assert m["privacy"]["epsilon_spent"] <= 10.0 and m["privacy"]["epsilon_cross_check"]["opacus_rdp"] > 0


def test_resume_keeps_the_ledger(da_root, tmp_path):
    run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=3"), tmp_path)
    m = run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=3", "resume=true"), tmp_path)
    ck = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert ck["step"] == 3 and m["privacy"]["private_steps"] == 3  # nothing re-run, nothing forgotten
    assert ck["method"]["accountant"]["history"][0]["num_steps"] == 3


def test_resume_with_more_steps_keeps_the_noise_and_the_budget(da_root, tmp_path):
    """Audit finding 2 in the DA loop: a resume re-calibrated the noise for the new steps."""
    m1 = run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=3"), tmp_path)
    m2 = run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=6", "resume=true"), tmp_path)
    assert m2["privacy"]["noise_std"] == m1["privacy"]["noise_std"]
    assert m2["privacy"]["private_steps"] == m2["steps"] == 3
    assert m2 == m1  # the budget allows no more step: the finished run is left as it is (issue 52)
    with pytest.raises(ValueError, match="changed privacy settings.*method.target_grad"):
        run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=6", "resume=true",
                                        "method.target_grad=through"), tmp_path)


@pytest.mark.parametrize("method,relation", [("dpswd", "replace one"), ("dpdann", "add/remove")])
def test_da_privacy_report_names_relation_and_that_target_accuracy_is_not_private(da_root, tmp_path, method,
                                                                                   relation):
    m = run_task(_da_cfg("da_um", da_root, f"method={method}"), tmp_path)
    assert relation in m["privacy"]["neighbouring_relation"]
    assert "NOT private" in m["privacy"]["not_covered"] and "NOT private" in m["evaluation"]


def test_budget_stops_the_run(da_root, tmp_path):
    # fixed noise far too small for 50 steps: the run stops before exceeding epsilon
    m = run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=50", "method.noise_multiplier=0.6"),
                                tmp_path)
    assert m["steps"] < 50 and m["stop_reason"].startswith("privacy budget")
    assert m["privacy"]["epsilon_spent"] <= 10.0


# ---- DP-SWD: the private target reaches the update only through the mechanism ------------------------------------


def _dpswd(target_grad="mechanism", row_bound="clip"):
    cfg = _compose(["experiment=da_um", "trainer.epochs=null", "trainer.steps=10", "trainer.batch_size=8",
                    f"method.target_grad={target_grad}", f"method.row_bound={row_bound}", "method.bound=bernstein"])
    torch.manual_seed(0)
    g, h, _, d = make_da_nets("auto", (1, 28, 28), 10)
    return cfg, g, h, DADPSWD(cfg, d, 10, n_target=100, steps=10, batch_size=8)


def _grads(method, g, h, xs, ys, xt, U, ns, nt):
    g.zero_grad(), h.zero_grad()
    zs = g(xs)
    loss = method.classification_loss(h, zs, ys) + method.adaptation_loss(zs, g(xt), U, ns, nt)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in [*g.parameters(), *h.parameters()]])


def _neighbour_with_same_release(method, g, xt, U, nt, j=3):
    """Change target row j; pick the noise so that the released projections M stay identical."""
    xt2 = xt.clone()
    xt2[j] = torch.rand_like(xt2[j])
    with torch.no_grad():
        clean = bound_representation(g(xt), method.row_bound) @ U
        clean2 = bound_representation(g(xt2), method.row_bound) @ U
    nt2 = nt + (clean - clean2) / method.sigma
    return xt2, nt2


def test_dpswd_update_depends_on_target_only_through_released_projections():
    cfg, g, h, method = _dpswd("mechanism")
    torch.manual_seed(1)
    xs, ys, xt = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,)), torch.rand(8, 1, 28, 28)
    U = torch.nn.functional.normalize(torch.randn(method.feat_dim, method.k), dim=0)
    ns, nt = torch.randn(8, method.k), torch.randn(8, method.k)
    xt2, nt2 = _neighbour_with_same_release(method, g, xt, U, nt)
    with torch.no_grad():  # the release is the same ...
        assert torch.allclose(method.release_target(g(xt), U, nt), method.release_target(g(xt2), U, nt2), atol=1e-5)
    a = _grads(method, g, h, xs, ys, xt, U, ns, nt)
    b = _grads(method, g, h, xs, ys, xt2, U, ns, nt2)
    assert torch.allclose(a, b, atol=1e-6)  # ... so is every gradient: no other path from the target
    # the adaptation term does depend on the target through M (a different release, different update)
    c = _grads(method, g, h, xs, ys, xt, U, ns, torch.randn(8, method.k))
    assert float((a - c).abs().max()) > 1e-5 * float(a.abs().max())
    # the paper's Algorithm 2 (gradient through g(x_t)) has another path: the same release, different updates
    cfg, g2, h2, through = _dpswd("through")
    a = _grads(through, g2, h2, xs, ys, xt, U, ns, nt)
    b = _grads(through, g2, h2, xs, ys, xt2, U, ns, nt2)
    assert float((a - b).abs().max()) > 1e-5 * float(a.abs().max())
    assert through.privacy_report()["guarantee_holds"] is False


def test_dpswd_row_bound_is_per_row_unlike_batch_max():
    z = torch.rand(16, 40) * 5
    z2 = z.clone()
    z2[0] *= 10  # one person's row
    for how, others_unchanged in (("clip", True), ("batch_max", False)):
        a, b = bound_representation(z, how), bound_representation(z2, how)
        assert (a.norm(dim=1) <= 0.5 + 1e-6).all() and (b.norm(dim=1) <= 0.5 + 1e-6).all()
        assert torch.allclose(a[1:], b[1:]) is others_unchanged
    assert (torch.norm(bound_representation(z, "clip") - bound_representation(z2, "clip"), dim=1) <= 1 + 1e-6).all()
    cfg, g, h, method = _dpswd("mechanism", "batch_max")
    rep = method.privacy_report()
    assert rep["guarantee_holds"] is False and "does NOT cover" in rep["row_bound"]


def test_dpswd_sigma_is_the_privacy_core_calibration():
    from dpgen.privacy.projection import calibrate_dpswd_sigma

    cfg, g, h, method = _dpswd()
    ref = calibrate_dpswd_sigma(epsilon=10.0, delta=1e-5, k=200, d=1280, n=100, batch_size=8, steps=10)
    assert method.sigma == pytest.approx(ref["sigma"], rel=1e-9) and method.feat_dim == 1280


# ---- DP-DANN: per-sample clipping bounds each example's gradient; the noise has the stated std ------------------


def _dpdann(clip=0.05, z=None):
    over = ["experiment=da_um", "method=dpdann", "trainer.epochs=null", "trainer.steps=10", "trainer.batch_size=8",
            f"method.clip={clip}"] + ([f"method.noise_multiplier={z}"] if z else [])
    cfg = _compose(over)
    torch.manual_seed(0)
    g, h, disc, d = make_da_nets("auto", (1, 28, 28), 10)
    return g, h, disc, DPDANN(cfg, d, 10, n_target=100, steps=10, batch_size=8, disc=disc)


def test_dpdann_per_sample_gradients_match_and_are_clipped():
    g, h, disc, method = _dpdann(clip=0.05)
    xt = torch.rand(6, 1, 28, 28)
    names, ref = per_sample_grads(g, disc, xt)  # torch.func
    names2, fast = OpacusPerSample(g, disc)(xt)  # opacus hooks
    assert names == names2 and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ref, fast))
    # each example's gradient equals the gradient of its own loss alone
    one = torch.autograd.grad(
        torch.nn.functional.binary_cross_entropy_with_logits(disc(g(xt[2:3])).reshape(-1), torch.ones(1)),
        [*g.parameters(), *disc.parameters()])
    assert all(torch.allclose(r[2], o, atol=1e-5) for r, o in zip(ref, one))
    clipped, norms = clip_per_sample(ref, 0.05)
    assert (norms > 0.05).any()  # the bound is active
    after = torch.sqrt(sum(c.reshape(6, -1).pow(2).sum(1) for c in clipped))
    assert (after <= 0.05 * (1 + 1e-5)).all()
    # removing one example changes the clipped sum by at most C
    s_all = torch.cat([c.sum(0).flatten() for c in clipped])
    s_less = torch.cat([c[1:].sum(0).flatten() for c in clipped])
    assert float((s_all - s_less).norm()) <= 0.05 * (1 + 1e-5)
    # the default path (opacus ghost clipping) gives the same norms and the same clipped sum
    names3, sums, gnorms = OpacusGhostClip(g, disc, 0.05)(xt)
    assert names3 == names and torch.allclose(gnorms, norms, rtol=1e-4)
    assert all(torch.allclose(c.sum(0, dtype=torch.float64), s, atol=1e-6) for c, s in zip(clipped, sums))  # float64 sums


def test_dpdann_release_moves_by_at_most_clip_when_one_target_record_changes():
    """The default (ghost-clipped) release: swapping one target record moves the noiseless sum by <= 2C,
    removing it by <= C, whatever the record (a huge-gradient outlier included)."""
    g, h, disc, method = _dpdann(clip=0.05, z=1.0)
    assert method.per_sample == "ghost"
    method.noise_multiplier = 0.0  # look at the sum alone
    method.rng = torch.Generator().manual_seed(0)
    xt = torch.rand(6, 1, 28, 28)
    flat = lambda out: torch.cat([t.flatten() for t in out.values()]) * method.batch_size
    base = flat(method.private_target_grads(g, xt))
    assert method.last_norms.shape == (6,) and (method.last_norms > 0.05).any()
    outlier = xt.clone()
    outlier[3] = 1e3 * torch.randn(1, 28, 28)
    assert float((flat(method.private_target_grads(g, outlier)) - base).norm()) <= 2 * 0.05 * (1 + 1e-4)
    less = torch.cat([xt[:3], xt[4:]])
    assert float((flat(method.private_target_grads(g, less)) - base).norm()) <= 0.05 * (1 + 1e-4)


def test_dpdann_noise_std_is_z_times_clip():
    g, h, disc, method = _dpdann(clip=0.5, z=2.0)
    method.rng = torch.Generator().manual_seed(0)
    out = method.private_target_grads(g, torch.zeros(0, 1, 28, 28))  # empty Poisson batch: noise only
    v = torch.cat([t.flatten() for t in out.values()]) * method.batch_size
    assert v.numel() > 100_000
    assert float(v.std()) == pytest.approx(2.0 * 0.5, rel=0.02) and abs(float(v.mean())) < 0.02


def test_dpswd_frame_bound_draws_orthonormal_directions(da_root, tmp_path):
    """bound=frame's exact sensitivity needs orthonormal-block directions: the DA method draws them."""
    cfg = _da_cfg("da_office31_dw", da_root, "method.bound=frame")
    m = run_task(cfg, tmp_path)
    assert m["privacy"]["bound"] == "frame" and m["privacy"]["directions"].startswith("stacked")
    g, h, _, d = make_da_nets("auto", (2048,), 31)
    method = DADPSWD(cfg, d, 31, n_target=40, steps=1, batch_size=8)
    method.rng = torch.Generator().manual_seed(0)
    seen = {}

    def spy(ps, pt, p=2):
        seen["pt"] = pt
        return (ps - pt).pow(2).mean()

    import dpgen.methods.da_dpswd as mod

    orig, mod.sliced_from_projections = mod.sliced_from_projections, spy
    try:
        method.sigma = 0.0  # look at the directions alone
        z = torch.eye(d)[:8]
        method.adaptation_loss(z, z)
    finally:
        mod.sliced_from_projections = orig
    # rows e_1..e_8 projected on U: ||e_i^T U||^2 <= ceil(k / d) = 2 for orthonormal blocks
    assert (seen["pt"].pow(2).sum(1) <= 2 * 0.25 + 1e-5).all()


# ---- make table-dpswd-da -----------------------------------------------------------------------------------------


TINY_DA = ["trainer.epochs=null", "trainer.steps=2", "trainer.batch_size=8", "dataset.n_train=60"]


def _da_table(name, **kw):
    from dpgen.tables import declared

    return declared.run_table(name, "smoke", **kw)


def test_da_table_fills_its_cells_and_collects_partial_runs(da_root, outputs_tmp):
    from dpgen.tables import declared

    rows = _da_table("dpswd_table1_domain_adaptation", datasets=["um"], rows=["dann", "dpswd", "dpswd_frame"],
                     data_root=str(da_root), extra=TINY_DA)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    dann, dpswd, frame = rows
    assert dann["epsilon"] == "inf" and dann["acc_paper"] == 86.2 and 0 <= dann["acc"] <= 100
    assert dann["problem"] == "U-M" and dann["method"] == "DANN"
    assert 0 < dpswd["epsilon_spent"] <= 10 and dpswd["row_bound"] == "clip" and dpswd["noise_std"] > 0
    # dpgen's own column: the default mechanism (frame bound), beside the paper's DP-SWD number
    assert dpswd["bound"] == "bernstein" and frame["bound"] == "frame" and frame["acc_paper"] == 83.4
    assert 0 < frame["epsilon_spent"] <= 10 and frame["noise_std"] < dpswd["noise_std"]
    run = declared.run_dir("dpswd_table1_domain_adaptation", "smoke", "dpswd", "um", 0, TINY_DA)
    assert run.parts[-4:] == ("da_um", "dpswd", "seed0") or run.parts[-3:] == ("da_um", "dpswd", "seed0")
    # a table's run folder says what ran, like python run.py's (the one loop writes it)
    assert (run / "metrics.json").exists() and (run / "config.yaml").exists()
    # --collect-only: seed 1 never ran; seed 0 is counted, seed 1 named as missing, nothing is trained
    (row,) = _da_table("dpswd_table1_domain_adaptation", datasets=["um"], rows=["dpswd"], data_root=str(da_root),
                       extra=TINY_DA, seeds=[1, 0], collect_only=True)
    assert row["runs"] == 1 and row["acc"] == dpswd["acc"]
    assert row["status"].startswith("partial: 1 of 2") and "seeds 1 not run" in row["status"]
    assert not (run.parent / "seed1" / "metrics.json").exists()
    # Algorithm 2 as published runs only when asked for
    names = [c["name"] for c, _ in declared.cells_of(declared.load_table("dpswd_table1_domain_adaptation", "smoke"))]
    assert "DP-SWD (Alg. 2 as published)" not in names and len(names) == 5 * 9


def test_da_figure_for_the_frame_bound_writes_its_own_files(da_root, outputs_tmp):
    from dpgen.tables import declared

    rows = _da_table("dpswd_fig3_da_epsilon_dpswd_frame", datasets=["um"], data_root=str(da_root), extra=TINY_DA)
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[0]["noise_std"] > rows[1]["noise_std"]
    eps3 = declared.run_dir("dpswd_fig3_da_epsilon_dpswd_frame", "smoke", "epsilon 3", "um", 0, TINY_DA)
    eps10 = declared.run_dir("dpswd_fig3_da_epsilon_dpswd_frame", "smoke", "epsilon 10", "um", 0, TINY_DA)
    assert eps3.parent.name == "dpswd_frame_eps3" and (eps3 / "metrics.json").exists()
    # epsilon 10: Table 1's run, the same folder
    assert eps10 == declared.run_dir("dpswd_table1_domain_adaptation", "smoke", "dpswd_frame", "um", 0, TINY_DA)
    assert not (eps3.parent.parent / "dpswd").exists()  # the Bernstein figure's runs are not touched
    name = "dpswd_fig3_da_epsilon_dpswd_frame_" + declared.slug("_".join(TINY_DA))
    assert (outputs_tmp / "tables" / f"{name}.csv").exists()
    assert (outputs_tmp / "figures" / "dpswd_fig3_da_epsilon_dpswd_frame.png").exists()


@pytest.mark.parametrize("logger", ["csv", "tensorboard", "wandb"])
def test_da_loop_takes_every_logger_and_ema(da_root, tmp_path, logger, monkeypatch):
    pytest.importorskip(logger)
    monkeypatch.setenv("WANDB_MODE", "offline")
    m = run_task(_da_cfg("da_office31_dw", da_root, "trainer.steps=4", "trainer.log_every=2",
                                        f"logger={logger}", "trainer.ema=0.5"), tmp_path)
    assert m["ema"] == 0.5 and m["steps"] == 4
    ck = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert any(k.startswith("g.") for k in ck["ema"]) and any(k.startswith("h.") for k in ck["ema"])
    if logger == "csv":
        assert len((tmp_path / "metrics.csv").read_text().splitlines()) == 3  # header + steps 2, 4
    elif logger == "tensorboard":
        assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
