"""Every `make tables` target runs and writes its files with the columns the issue names."""

import csv
import json
import statistics

import pytest


def _header(path):
    with open(path) as f:
        return next(csv.reader(f))


def _table2(**kw):
    """DP-SWD Table 2 (conf/table/dpswd_table2_generation.yaml) at the smoke scale on MNIST's cells."""
    from dpgen.tables import declared

    return declared.run_table("dpswd_table2_generation", "smoke", datasets=["mnist"], **kw)


def _table2_run(row, extra=()):
    from dpgen.tables import declared

    return declared.run_dir("dpswd_table2_generation", "smoke", row, "mnist", 0, extra)


def test_dpswd_generation_table_smoke(outputs_tmp, fake_data_root, tmp_path):
    rows = _table2(data_root=str(fake_data_root), rows=["SWD", "DP-SWD-b", "DP-SWD-f (dpgen)"],
                   extra=["dataset.n_train=1000"])  # the fake files' size
    for r in rows:
        assert r["status"] == "ok", r
        assert 0 <= r["mlp"] <= 100 and 0 <= r["logreg"] <= 100
        if r["method"] != "SWD":
            assert 0 < r["epsilon_spent"] <= 10 and r["epsilon"] == 10
    paper = {r["method"]: r for r in rows}
    assert paper["DP-SWD-b"]["mlp_paper"] == 76 and paper["SWD"]["logreg_paper"] == 82
    assert paper["SWD"]["epsilon"] == "inf"
    # each cell's verdict says the smoke scale is not the paper's setting; dpgen's row has no paper number
    assert "at SCALE=smoke" in paper["SWD"]["mlp_verdict"] and "not the paper's setting" in paper["SWD"]["mlp_verdict"]
    assert paper["DP-SWD-f (dpgen)"]["logreg_verdict"] == "no paper number"
    assert paper["DP-SWD-f (dpgen)"]["mlp_paper"] is None  # dpgen's row: no paper number
    assert (outputs_tmp / "tables" / "dpswd_table2_generation_dataset.n_train_1000.csv").exists()
    # every row has its own run folder (the epsilon-1 rows used to share their epsilon-10 row's)
    from dpgen.tables import declared

    names = [c["name"] for c in declared.load_table("dpswd_table2_generation", "smoke")["cells"]]
    assert len({_table2_run(n) for n in names}) == len(names) == 12
    # absent data: the row says why instead of failing the table
    missing = _table2(data_root=str(tmp_path / "empty"), rows=["SWD"], reuse=False)
    assert missing[0]["status"].startswith("skipped:") and "MNIST" in missing[0]["status"]


def test_dpswd_generation_table_reuses_finished_runs(outputs_tmp, fake_data_root, monkeypatch):
    """A table assembled over several sessions: finished cells are read, not trained again; cells with
    other --set overrides get their own folders; the unbounded rows compare with the paper's rows; a scale's
    method.k reaches only the methods that have it."""
    import dpgen.tasks
    from dpgen.tables import declared

    first = _table2(data_root=str(fake_data_root), rows=["SWD"])

    def no_training(cfg, out):
        raise AssertionError(f"trained again in {out}")

    monkeypatch.setattr(dpgen.tasks, "run", no_training)
    again = _table2(data_root=str(fake_data_root), rows=["SWD"])
    assert again[0]["mlp"] == first[0]["mlp"] and again[0]["wall_s"] == first[0]["wall_s"] > 0
    with pytest.raises(AssertionError, match="trained again"):
        _table2(data_root=str(fake_data_root), rows=["SWD"], extra=["trainer.epochs=2"])
    assert _table2_run("SWD", ["trainer.epochs=2"]) != _table2_run("SWD")
    spec = declared._with_choices(declared.load_table("dpswd_table2_generation", "smoke"), ["mnist"], None)
    cells = {c["name"]: (c, cell) for c, cell in declared.cells_of(spec)}
    assert declared.paper_cells(spec, cells["DP-SWD-c (rows unbounded)"][0]) == {"mlp_paper": 77.0,
                                                                                 "logreg_paper": 78.0}
    assert "method.k=100" in cells["DP-SWD-b"][1].overrides
    assert not any(o.startswith("method.k=") for o in cells["DP-MERF (baseline)"][1].overrides)
    with pytest.raises(ValueError, match="--rows: 'bogus' is not a row"):
        _table2(rows=["bogus"])
    with pytest.raises(ValueError, match="--datasets: 'cifar10' is not one of"):
        declared.run_table("dpswd_table2_generation", "smoke", datasets=["cifar10"])


def test_dpswd_generation_table_evaluates_more_generations_of_a_finished_run(outputs_tmp, fake_data_root,
                                                                              monkeypatch):
    """``--generations G`` (the paper's "5 runs of generation" at the cost of one training run): a run finished
    without it gives generation 1 as it is and is not trained again; generations 2..G sample the same
    generator again, each kept as it finishes; the row's mean / std are over every generation; asking again
    reads them, asking for more evaluates only the new ones."""
    import dpgen.tasks
    import dpgen.tasks.generation as G

    kw = dict(data_root=str(fake_data_root), rows=["DP-SWD-b"], extra=["dataset.n_train=1000"])
    (first,) = _table2(**kw)
    assert first["runs"] == 1 and first["generations"] == 1 and first["mlp_std"] == 0.0

    def no_training(cfg, out):
        raise AssertionError(f"trained again in {out}")

    calls, real = [], G.evaluate_generator

    def counted(cfg, *a, **k):
        calls.append(cfg.seed)
        return real(cfg, *a, **k)

    monkeypatch.setattr(dpgen.tasks, "run", no_training)
    monkeypatch.setattr(G, "evaluate_generator", counted)
    (three,) = _table2(generations=3, **kw)
    assert len(calls) == 2 and len(set(calls)) == 2  # generations 2 and 3, each its own synthetic set
    assert three["status"] == "ok" and three["runs"] == 1 and three["generations"] == 3
    run = _table2_run("DP-SWD-b", ["dataset.n_train=1000"])
    from dpgen.tables.grid import GENERATIONS_DIR, RESULT_FILE

    result = json.loads((run / RESULT_FILE).read_text())
    mlp = result["mlp_values"]
    assert len(mlp) == 3 and mlp[0] == pytest.approx(first["mlp"], abs=0.01)
    assert three["mlp"] == pytest.approx(statistics.mean(mlp), abs=0.01)
    assert three["mlp_std"] == pytest.approx(statistics.stdev(mlp), abs=0.01)
    # the privacy facts are the trained run's: sampling more is post-processing and charges nothing
    assert three["epsilon_spent"] == first["epsilon_spent"]
    assert three["noise_multiplier"] == first["noise_multiplier"] > 0 and three["noise_std"] == first["noise_std"] > 0
    assert sorted(p.name for p in (run / GENERATIONS_DIR).iterdir()) == ["0.json", "1.json", "2.json"]
    calls.clear()
    (again,) = _table2(generations=3, **kw)
    assert calls == [] and again["mlp"] == three["mlp"]
    (four,) = _table2(generations=4, **kw)
    assert len(calls) == 1 and four["generations"] == 4
    # the table without generations still reads the run's own evaluation
    (one,) = _table2(**kw)
    assert one["mlp"] == first["mlp"] and one["generations"] == 1
    with pytest.raises(ValueError, match="generations=0"):
        _table2(generations=0, **kw)


def test_a_resumed_cells_wall_time_counts_every_sitting(tmp_path, monkeypatch):
    """A run trained in two sittings (stopped, then resumed by the table) reports the wall time of both, as its
    own metrics.json does, not only the last sitting's: the table's wall column is never below its training."""
    import dpgen.tasks
    from dpgen.tables.grid import RESULT_FILE, evaluate_run

    m = {"steps": 60000, "stop_reason": "completed", "train_seconds": 2000.0, "wall_seconds": 2070.0,
         "privacy": {"private": True, "epsilon_spent": 9.99, "delta": 1e-5, "noise_multiplier": 2.0},
         "downstream": {"logreg": {"test_acc": 10.0}}}
    monkeypatch.setattr(dpgen.tasks, "run", lambda cfg, out: dict(m))  # the resumed sitting returns at once
    out = evaluate_run({"seed": 0}, tmp_path / "run", generations=1)
    assert out["wall_s"] == 2070.0 and out["wall_s"] >= out["train_s"]
    assert json.loads((tmp_path / "run" / RESULT_FILE).read_text())["wall_s"] == 2070.0


@pytest.mark.slow
def test_dpswd_generation_table_every_row(outputs_tmp, fake_data_root):
    from dpgen.tables import declared

    assert declared.main(["dpswd_table2_generation", "--scale", "smoke", "--datasets", "mnist,fashion_mnist",
                          "--data-root", str(fake_data_root)]) == 0
    with open(outputs_tmp / "tables" / "dpswd_table2_generation.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 12 and all(r["status"] == "ok" for r in rows)


def test_dpswd_celeba_table_reports_missing_data(outputs_tmp, tmp_path, monkeypatch):
    from dpgen.tables import declared

    rows = declared.run_table("dpswd_celeba_fid", "smoke", str(tmp_path / "empty"))
    assert [r["method"] for r in rows] == ["SWD", "DP-SWD-c", "DP-SWD-b"]
    assert all(r["status"].startswith("skipped:") and "celeba" in r["status"] for r in rows)
    assert [r["fid_paper"] for r in rows] == [58, 97, 149]


def test_paper_tables_ship_with_the_package(monkeypatch, tmp_path):
    """The papers' numbers are package data: read without ../shared, equal to its copies when present."""
    from dpgen.utils.paper import paper_table_names, paper_table_path, read_paper_table, shared_dir

    names = paper_table_names()
    assert "dpswd_table4_noise" in names and len(names) >= 11
    shared = shared_dir() / "paper-tables"
    monkeypatch.setenv("DPGEN_SHARED", str(tmp_path / "no_shared"))
    assert read_paper_table("dpswd_table4_noise")  # no ../shared needed
    with pytest.raises(FileNotFoundError, match="dpswd_table4_noise"):
        read_paper_table("no_such_table")
    if shared.is_dir():
        for f in shared.glob("*.csv"):
            assert paper_table_path(f.name).read_text() == f.read_text(), f.name


def test_a_cells_verdict_follows_one_rule_for_every_table():
    """Reproduced when ours lies within max(paper std, our std, 1 point) of the paper's number; else how far above
    or below; one run and a shortened setting are said."""
    from dpgen.utils.paper import verdict

    assert verdict(80.44, 79.9, 0.59, runs=5) == "reproduced (+0.5, within 1.0)"
    assert verdict(92.92, 93.9, 1.77, 0.0, 10).startswith("reproduced (-1.0, within 1.8)")
    assert verdict(96.69, 95.5, 0.58, 1.0, 10) == "not reproduced: 1.2 above"  # outside the paper's std of 1.0
    assert verdict(92.14, 94.0, 1.12, 0, 10) == "not reproduced: 1.9 below"
    assert verdict(85.69, 90, runs=1) == "not reproduced: 4.3 below; 1 run"
    assert verdict(70.5, 77, shortened="trainer.epochs=10").endswith("at trainer.epochs=10, not the paper's setting")
    assert verdict(None, 77) == "not run" and verdict(70.0, None) == "no paper number"
    assert verdict(76.5, 76, paper_std=None, tolerance=0.4) == "not reproduced: 0.5 above"
