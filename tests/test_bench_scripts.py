"""``make bench``'s training rows run through the real loop: a config change that the loop refuses (such
as a declared dataset size) must fail here, not only in a bench run on a GPU node (it did, 2026-11-26)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def test_bench_sinkhorn_training_row_runs_through_the_loop(capsys):
    import bench_sinkhorn

    assert bench_sinkhorn.bench_training(2) > 0
    assert "epsilon spent" in capsys.readouterr().out


def test_bench_da_step_rate_runs():
    import bench_da

    assert bench_da.da_steps_per_second("dpswd", 2) > 0


def test_bench_da_takes_table_1s_settings_from_its_yaml(monkeypatch):
    """make bench's DA step rates run Table 1's methods with the table's own overrides (the Bernstein bound for
    DP-SWD), read from conf/table/dpswd_table1_domain_adaptation.yaml: the driver they came from is gone."""
    import bench_da

    seen = []
    monkeypatch.setattr(bench_da, "da_steps_per_second", lambda base, steps, extra=(): seen.append((base, extra)) or 1.0)
    bench_da.bench_steps(1)
    assert seen == [("dann", []), ("swd", []), ("dpswd", ["+variant=dpswd_bernstein"]), ("dpdann", [])]


def test_bench_headline_child_reports_speed_memory_and_floor(capsys):
    """The headline_training row's child trains the shipped preset through the real loop on MNIST-sized data and
    reports a positive rate, peak memory and per-step FLOPs (the generator's convolutions at least)."""
    import json

    import bench_speed

    bench_speed._headline_child("dpkernel_mnist", 1)
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["steps_per_second"] > 0 and res["run_steps_per_second"] > 0 and res["peak_mb"] > 0
    assert res["preset_steps"] == 50000  # read from the preset, not the override
    assert res["flops_per_step"] > 1e9  # the DCGAN at batch 60 is ~19 GFLOP forward + backward


def _run_folder(path: Path, metrics: dict, config: str = "") -> Path:
    import json

    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps(metrics))
    (path / "config.yaml").write_text(config)
    return path


def test_headline_table_joins_evaluations_to_their_training_run(tmp_path):
    """A training run's own classifiers stand; an evaluation with fid_samples >= 10,000 adds the papers' FID, one
    with protocol=dpimagebench adds DPImageBench's cells with their counts, and a restorer's evaluation is its own
    row marked with its public data, as is one through another contrast curve (task.sharpen); DPImageBench's
    reported rows sit beside ours."""
    import headline_table

    run = _run_folder(tmp_path / "runs" / "train", {
        "task": "generation", "method": "dpkernel", "dataset": "mnist", "seed": 0, "steps": 50000,
        "train_seconds": 600.0, "privacy": {"epsilon_spent": 9.99, "delta": 1.5e-6}, "fid": 70.0, "fid_samples": 300,
        "downstream": {"logreg": {"test_acc": 80.0}, "mlp": {"test_acc": 81.0}, "cnn": {"test_acc": 90.0},
                       "class_mean": {"test_acc": 70.0}}}, "seed: 0\nexperiment_name: dpkernel_mnist\n")
    _run_folder(tmp_path / "runs" / "ev_papers", {
        "task": "evaluate", "run": str(run), "fidelity_counts": {"fid_samples": 10000},
        "summary": {"logreg": {"mean": 1.0}, "fid": {"mean": 40.0}, "precision": {"mean": 0.5},
                    "recall": {"mean": 0.1}}})
    _run_folder(tmp_path / "runs" / "ev_dib", {
        "task": "evaluate", "run": str(run), "protocol": "dpimagebench", "fidelity_counts": {"fid_samples": None},
        "summary": {"dpimagebench_resnet": {"mean": 92.0}, "dpimagebench_fid": {"mean": 45.0}},
        "dpimagebench": [{"n_synthetic": 5000, "fid_real": 5000, "resnet": {"depth": 20, "epochs": 10}}]})
    _run_folder(tmp_path / "runs" / "ev_restored", {
        "task": "evaluate", "run": str(run), "restorer": {"public_dataset": "usps", "file": "r.pt"},
        "fidelity_counts": {"fid_samples": 10000},
        "summary": {"cnn": {"mean": 91.0}, "fid": {"mean": 30.0}}})
    _run_folder(tmp_path / "runs" / "ev_curve", {  # through a curve the run's own evaluation did not use
        "task": "evaluate", "run": str(run), "sharpen": {"slope": 8.0, "at": 0.4},
        "fidelity_counts": {"fid_samples": 10000}, "protocol": "dpimagebench",
        "summary": {"cnn": {"mean": 93.0}, "fid": {"mean": 33.0}, "dpimagebench_resnet": {"mean": 89.0}},
        "dpimagebench": [{"n_synthetic": 5000, "fid_real": 5000, "resnet": {"depth": 20, "epochs": 10}}]})
    short = _run_folder(tmp_path / "runs" / "train_logreg_only", {  # its own evaluation: LogReg only
        "task": "generation", "method": "dpsinkhorn", "dataset": "mnist", "seed": 1, "steps": 100,
        "privacy": {"epsilon_spent": 1.0, "delta": 1e-5},
        "downstream": {"logreg": {"test_acc": 60.0}, "class_mean": {"test_acc": 50.0}}},
        "seed: 1\nexperiment_name: ours_eps1\n")
    _run_folder(tmp_path / "runs" / "ev_short", {
        "task": "evaluate", "run": str(short), "fidelity_counts": {"fid_samples": 10000},
        "summary": {"logreg": {"mean": 61.0}, "mlp": {"mean": 62.0}, "cnn": {"mean": 63.0},
                    "class_mean": {"mean": 51.0}, "fid": {"mean": 99.0}}})
    rows = headline_table.build_rows([tmp_path / "runs"])
    ours = {r["row"]: r for r in rows if r["source"] == "dpgen, measured"}
    # one draw per row: the evaluation's three classifiers replace the run's lone LogReg
    assert [ours["ours_eps1 (seed 1)"][k] for k in ("logreg", "mlp", "cnn", "class_mean", "fid_test")] == \
        [61.0, 62.0, 63.0, 51.0, 99.0]
    plain, restored = ours["dpkernel_mnist (seed 0)"], ours["dpkernel_mnist (seed 0) + restorer (usps)"]
    curved = ours["dpkernel_mnist (seed 0), curve slope 8 at 0.4"]
    assert (curved["cnn"], curved["fid_test"], curved["resnet_dib"], curved["logreg"]) == (93.0, 33.0, 89.0, None)
    assert curved["public_data"] == "none" and curved["epsilon"] == 9.99
    assert (plain["logreg"], plain["cnn"], plain["epsilon"], plain["delta"]) == (80.0, 90.0, 9.99, 1.5e-6)
    assert (plain["fid_test"], plain["fid_test_samples"], plain["precision_test"]) == (40.0, 10000, 0.5)
    assert (plain["resnet_dib"], plain["fid_train_dib"]) == (92.0, 45.0)
    assert plain["dib_counts"] == "5000 synthetic, ResNet-20 x 10 ep, FID vs 5000 train"
    assert (restored["cnn"], restored["fid_test"], restored["logreg"]) == (91.0, 30.0, None)
    assert restored["public_data"].startswith("usps") and restored.get("resnet_dib") is None
    assert plain["epsilon_with_choice"] is None and curved["epsilon_with_choice"] is None
    reported = {r["row"]: r for r in rows if r["source"] == "DPImageBench, reported"}
    assert (reported["DP-Kernel"]["fid_train_dib"], reported["DP-Kernel"]["resnet_dib"]) == (38.9, 93.6)
    # a run drawn among several on held-out records states the scored runs composed; a preset its settings' choice
    (short / "selection.json").write_text(json.dumps({"epsilon_total": 15.43}))
    assert {r["row"]: r for r in headline_table.build_rows([tmp_path / "runs"])}[
        "ours_eps1 (seed 1)"]["epsilon_with_choice"] == 15.43
    assert headline_table.choice_epsilon(tmp_path, {"epsilon_spent": 9.9994, "epsilon_with_settings_choice": 16.42}) \
        == 16.42
    out = tmp_path / "t" / "headline"
    headline_table.main([str(tmp_path / "runs"), "--out", str(out)])
    assert "| dpkernel_mnist (seed 0) + restorer (usps) |" in out.with_suffix(".md").read_text()
    assert "1.0000 (1e-05); 15.43 with its settings' choice" in out.with_suffix(".md").read_text()
    assert out.with_suffix(".csv").read_text().startswith("dataset,row,source")


def test_headline_runs_plan_composes_and_resumes(tmp_path, capsys):
    """make headline's plan: every training command composes (the presets exist and take the overrides), the
    DPImageBench evaluation at cpu scale carries a CPU's counts and at paper scale none (theirs), a finished step
    is skipped, and a bad scale, data set or preset is refused by name."""
    import pytest

    import headline_runs
    from dpgen.config import compose_config

    plan = headline_runs.steps("cpu", ["mnist", "fashion_mnist"], [0], tmp_path)
    trains = [a for what, a, _ in plan if what.startswith("train")]
    assert len(trains) == 8 and len(plan) == 16
    for argv in trains:
        cfg = compose_config([a for a in argv if not a.startswith("hydra.")])
        assert cfg.task.fid_samples == 10000 and cfg.resume == "auto" and cfg.privacy.epsilon == 10
    dib = [a for what, a, _ in plan if what.startswith("DPImageBench")]
    assert all("task.dpimagebench.depth=20" in a and "task.protocol=dpimagebench" in a for a in dib)
    assert all("task.fid_samples=300" in a for a in dib)  # the papers' 10,000-sample FID is not measured twice
    paper = headline_runs.steps("paper", ["mnist"], [0], tmp_path)
    assert not any(a.startswith("task.dpimagebench.") for _, argv, _ in paper for a in argv)
    done = tmp_path / "dpmerf_best_mnist_seed0"
    done.mkdir()
    (done / "metrics.json").write_text("{}")
    headline_runs.main(["--datasets", "mnist", "--only", "dpmerf_best_mnist", "--out", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    assert "done already: train dpmerf_best_mnist seed 0" in out and "dpimagebench" in out
    # a training run whose fidelity pass was cut off has a metrics.json too: it is resumed, not skipped
    (done / "metrics.json").write_text('{"steps": 3000, "evaluation_complete": false}')
    (done / "checkpoints").mkdir()
    import torch
    torch.save({"step": 3000}, done / "checkpoints" / "last.pt")
    headline_runs.main(["--datasets", "mnist", "--only", "dpmerf_best_mnist", "--out", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    assert "done already" not in out and "resuming (evaluating): train dpmerf_best_mnist seed 0" in out
    for bad, kwargs in (("--scale 'gpu'", {"scale": "gpu", "datasets": ["mnist"]}),
                        ("'celeba'", {"scale": "cpu", "datasets": ["celeba"]}),
                        ("dpswd_mnist_c", {"scale": "cpu", "datasets": ["mnist"], "only": ["dpswd_mnist_c"]})):
        with pytest.raises(SystemExit, match=bad):
            headline_runs.steps(seeds=[0], out=tmp_path, **kwargs)
    one = headline_runs.steps("cpu", ["mnist"], [0], tmp_path, only=["dpmerf_best_mnist"], epsilons=(10.0, 1.0))
    assert [d.name for _, _, d in one] == ["dpmerf_best_mnist_seed0", "dpmerf_best_mnist_seed0_dib_cpu",
                                           "dpmerf_best_mnist_eps1_seed0", "dpmerf_best_mnist_eps1_seed0_dib_cpu"]
    assert compose_config(one[2][1][:-1]).privacy.epsilon == 1.0
    # ours at epsilon 1 takes the settings chosen at epsilon 1's noise (conf/experiment/dpsinkhorn_best_mnist_eps1.yaml)
    ours = headline_runs.steps("cpu", ["mnist"], [0], tmp_path, only=["dpsinkhorn_best_mnist"], epsilons=(10.0, 1.0))
    assert [a[0] for _, a, _ in ours[::2]] == ["experiment=dpsinkhorn_best_mnist", "experiment=dpsinkhorn_best_mnist_eps1"]
    eps1 = compose_config(ours[2][1][:-1])
    assert (eps1.privacy.epsilon, eps1.model.dct_size, eps1.privacy.selected_on_private) == (1.0, 10, None)
    # and so does Fashion-MNIST's, with the digit proxy's picks (conf/experiment/dpsinkhorn_best_fmnist_eps1.yaml)
    ours = headline_runs.steps("cpu", ["fashion_mnist"], [0], tmp_path, only=["dpsinkhorn_best_fmnist"],
                               epsilons=(10.0, 1.0))
    assert [a[0] for _, a, _ in ours[::2]] == ["experiment=dpsinkhorn_best_fmnist",
                                              "experiment=dpsinkhorn_best_fmnist_eps1"]
    eps1 = compose_config(ours[2][1][:-1])
    assert (eps1.privacy.epsilon, eps1.model.dct_size, eps1.privacy.selected_on_private) == (1.0, 10, None)
