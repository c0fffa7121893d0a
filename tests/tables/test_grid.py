"""The one grid runner of the training tables (dpgen/tables/grid.py): run folders, reuse, collect-only,
skip-with-reason, mean/std. The runs here are stand-ins (a runner that writes metrics.json); the drivers'
smoke tests run the real loop through it."""

import json

import pytest

from dpgen.tables.grid import Cell, add_grid_arguments, compose_cell, mean_std, run_cell, run_cells


def _fake_runner(calls):
    def runner(cfg, out):
        calls.append((cfg.seed, str(out)))
        out.mkdir(parents=True, exist_ok=True)
        m = {"acc": 50.0 + cfg.seed, "wall_seconds": 2.0}
        (out / "metrics.json").write_text(json.dumps(m))
        return m

    return runner


def test_mean_std():
    assert mean_std([]) == (None, None)
    assert mean_std([3.0]) == (3.0, 0.0)
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)


def test_each_seed_has_its_own_folder_and_finished_runs_are_read(outputs_tmp, fake_data_root):
    calls = []
    cell = Cell("mnist SWD", "swd_mnist", "t/mnist/SWD", ["trainer.steps=3"], seeds=[0, 1])
    res = run_cell(cell, data_root=str(fake_data_root), runner=_fake_runner(calls))
    assert res.status == "ok" and len(res.runs) == 2 and res.wall_s == 4.0
    assert [c[1] for c in calls] == [str(outputs_tmp / "runs" / "t/mnist/SWD" / f"seed{k}") for k in (0, 1)]
    assert [c[0] for c in calls] == [0, 1]  # seed=<k> reaches the config
    assert mean_std(res.values(lambda m: m["acc"])) == (50.5, 0.71)
    # again: both are read, nothing runs; --reuse false runs them again (resume=auto continues a checkpoint)
    again = run_cell(cell, data_root=str(fake_data_root), runner=_fake_runner(calls))
    assert len(calls) == 2 and again.values(lambda m: m["acc"]) == [50.0, 51.0]
    run_cell(cell, data_root=str(fake_data_root), runner=_fake_runner(calls), reuse=False)
    assert len(calls) == 4


def test_a_folder_holding_a_run_made_with_other_settings_is_named_not_read(outputs_tmp, fake_data_root):
    """A cell's folder whose run was made with other settings (an older preset or other overrides) is neither
    read as the cell's result nor resumed with the new settings: the error names the settings. Where and how fast
    it ran (threads, data_root, progress) do not count."""
    from omegaconf import OmegaConf

    def runner(cfg, out):  # what the loop writes: the composed config beside the result
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        (out / "metrics.json").write_text(json.dumps({"acc": 1.0}))
        return {"acc": 1.0}

    cell = Cell("mnist SWD", "swd_mnist", "t/mnist/SWD", ["trainer.steps=3", "trainer.threads=1"])
    run_cell(cell, data_root=str(fake_data_root), runner=runner)
    same = Cell("mnist SWD", "swd_mnist", "t/mnist/SWD", ["trainer.steps=3", "trainer.threads=2",
                                                          "model.memory_format=contiguous"])
    assert run_cell(same, data_root="/elsewhere", runner=runner, collect_only=True).status == "ok"
    other = Cell("mnist SWD", "swd_mnist", "t/mnist/SWD", ["trainer.steps=4"])
    for kw in ({}, {"collect_only": True}, {"reuse": False}):
        with pytest.raises(ValueError, match=r"other settings than this cell's \(trainer.steps: 3 -> 4\)"):
            run_cell(other, data_root=str(fake_data_root), runner=runner, **kw)


def test_collect_only_runs_nothing_and_names_the_missing_seeds(outputs_tmp, fake_data_root):
    calls = []
    cell = Cell("mnist SWD", "swd_mnist", "t/mnist/SWD", seeds=[0, 1, 2])
    run_cell(Cell("x", "swd_mnist", "t/mnist/SWD", seeds=[1]), data_root=str(fake_data_root),
             runner=_fake_runner(calls))
    res = run_cell(cell, data_root=str(fake_data_root), collect_only=True, runner=_fake_runner(calls))
    assert len(calls) == 1 and res.missing == [0, 2] and len(res.runs) == 1
    assert res.status == "partial: 1 of 3 runs finished (seeds 0, 2 not run yet)"
    none = run_cell(Cell("y", "swd_mnist", "t/other", seeds=[0]), data_root=str(fake_data_root), collect_only=True)
    assert none.status == "not run (--collect-only)"


def test_a_cell_without_its_data_is_skipped_with_the_reason_and_the_others_run(outputs_tmp, fake_data_root, tmp_path):
    calls = []
    empty = tmp_path / "empty"

    def runner(cfg, out):
        if cfg.dataset.data_root == str(empty):
            raise FileNotFoundError(f"MNIST: {empty}/MNIST/raw/train-images-idx3-ubyte.gz is missing; put it there")
        return _fake_runner(calls)(cfg, out)

    a = Cell("a", "swd_mnist", "t/a", [f"dataset.data_root={empty}"])
    b = Cell("b", "swd_mnist", "t/b", [f"dataset.data_root={fake_data_root}"])
    ra, rb = run_cells([a, b], runner=runner)
    assert ra.status.startswith("skipped: MNIST: ") and "is missing; put it there" in ra.status and not ra.runs
    assert rb.status == "ok" and len(calls) == 1
    # collect-only says "skipped" (the data are absent), not "not run yet"
    rc = run_cell(Cell("c", "swd_mnist", "t/c"), data_root=str(empty), collect_only=True)
    assert rc.status.startswith("skipped: ")


def test_two_cells_never_share_a_folder_and_the_config_is_the_presets():
    cfg = compose_cell(Cell("a", "dpswd_mnist_b", "t/a", ["method.k=7"], seeds=[3]), 3, ["trainer.steps=5"])
    assert cfg.method.k == 7 and cfg.seed == 3 and cfg.trainer.steps == 5 and cfg.resume == "auto"
    assert Cell("a", "p", "x/a").run_dir(0) != Cell("b", "p", "x/b").run_dir(0)
    assert Cell("a", "p", "x/a", seed_folders=False).run_dir(0).name == "a"


def test_every_training_table_takes_the_same_grid_arguments():
    import argparse

    ap = argparse.ArgumentParser()
    add_grid_arguments(ap)
    a = ap.parse_args(["--reuse", "false", "--collect-only", "--runs", "2"])
    assert a.reuse is False and a.collect_only and a.runs == 2 and ap.parse_args([]).reuse is True
    with pytest.raises(SystemExit):
        ap.parse_args(["--reuse", "maybe"])
    from dpgen.tables import declared

    for mod, extra in ((declared, ["dpsinkhorn_table1"]),):
        with pytest.raises(SystemExit) as e:
            mod.main([*extra, "--reuse", "maybe"])
        assert e.value.code == 2, mod.__name__
