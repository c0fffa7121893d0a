"""Tables as configuration (dpgen/tables/declared.py): a YAML runs through the one grid runner."""

import pytest

from dpgen.tables import declared


def test_every_table_of_conf_table_loads_at_each_of_its_scales():
    names = declared.table_names()
    assert "default_batch" in names
    for name in names:
        from omegaconf import OmegaConf

        scales = OmegaConf.load(declared.table_path(name)).get("scales") or {"smoke": {}}
        for scale in scales:
            spec = declared.load_table(name, scale)
            if spec.get("compute"):  # a computed table: its code makes the rows from the scale's settings
                assert spec["settings"] and spec["columns"]
                continue
            assert spec["cells"] and spec["columns"] and spec["seeds"]


def test_the_ldp_figures_are_computed_tables_whose_hooks_import():
    """The entropic-LDP figures are YAMLs of conf/table/ run by the one runner: their sizes per scale (the figures'
    own: no cpu scale for Figures 2 and 11), their compute, notes and plot functions."""
    from dpgen.utils.objects import import_object

    for name, scales in (("ldp_manifolds", ["cpu", "paper", "smoke"]), ("ldp_convergence", ["cpu", "paper", "smoke"]),
                         ("ldp_mnist", ["paper", "smoke"]), ("ldp_trainsize", ["paper", "smoke"])):
        from omegaconf import OmegaConf

        raw = OmegaConf.to_container(OmegaConf.load(declared.table_path(name)))
        assert sorted(raw["scales"]) == scales
        for hook in [raw["compute"], raw["notes_from"], *raw["plots"].values()]:
            assert callable(import_object(hook, "hook"))
    assert declared.load_table("ldp_mnist", "paper")["settings"]["steps"] == 9000
    with pytest.raises(ValueError, match="scale=cpu is not one of its scales \\(smoke, paper\\)"):
        declared.load_table("ldp_mnist", "cpu")


@pytest.mark.parametrize("argv, says", [
    (["ldp_manifolds", "--rows", "half_circle_*"], "cannot split its runs over processes"),
    (["ldp_manifolds", "--collect-only"], "cannot split its runs over processes"),
    (["ldp_manifolds", "--datasets", "mnist"], "reads no dataset; leave --datasets out"),
    (["ldp_mnist", "--seeds", "0,1"], "--seeds 0,1: table ldp_mnist is computed from one seed"),
    (["ldp_mnist", "--set", "trainer.lr=1"], "--set trainer.lr=1: table ldp_mnist is computed by "
                                             "dpgen.tables.ldp_mnist.compute; its settings at scale=smoke are"),
    (["ldp_mnist", "--generations", "2"], "--generations: table ldp_mnist is computed"),
    (["ldp_mnist", "--datasets", "cifar10"], "'cifar10' is not one of mnist10k, mnist"),
    (["ldp_trainsize", "--scale", "cpu"], "scale=cpu is not one of its scales"),
])
def test_a_computed_table_refuses_what_does_not_apply_to_it(argv, says, capsys):
    """Refused before anything trains, each with the value and the fix."""
    assert declared.main(argv) == 2
    assert says in capsys.readouterr().err


def test_bad_names_and_scales_say_what_exists(tmp_path):
    with pytest.raises(ValueError, match="did you mean default_batch\\?\\): choose one of .*default_batch"):
        declared.table_path("defualt_batch")
    assert declared.main(["dpsinkhorn_tabel1"]) == 2  # the command line: the same error, exit 2
    with pytest.raises(ValueError, match="scale=huge is not one of its scales"):
        declared.load_table("default_batch", "huge")
    bad = tmp_path / "t.yaml"
    bad.write_text("title: no cells\ncolumns: [cell]\n")
    with pytest.raises(ValueError, match="no `cells:`"):
        declared.load_table(str(bad), "smoke")
    assert declared.main(["nope"]) == 2 and declared.main([]) == 0


def test_the_default_batch_table_runs_then_reads_its_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("DPGEN_OUTPUTS", str(tmp_path))
    rows = declared.run_table("default_batch", "smoke")
    assert [r["status"] for r in rows] == ["ok", "ok"] and all(r["runs"] == 1 for r in rows)
    assert all(0 < r["epsilon_spent"] <= 10 for r in rows)
    for k in ("noise_multiplier", "noise_std"):  # larger batches, larger q: more noise at the same budget
        assert 0 < rows[0][k] < rows[1][k]
    cfg = tmp_path / "runs" / "default_batch" / "smoke" / "batches_of_100_the_default" / "seed0" / "config.yaml"
    before = cfg.stat().st_mtime_ns
    again = declared.run_table("default_batch", "smoke")  # read, not trained again
    assert cfg.stat().st_mtime_ns == before and [r["logreg"] for r in again] == [r["logreg"] for r in rows]
    assert (tmp_path / "tables" / "default_batch.md").read_text().count("batches of") == 2


def test_the_app_runs_a_table_given_as_table_equals_name(monkeypatch, capsys):
    """``dpgen table=<name> scale=<scale>`` is the declared runner, through the one app's entry point."""
    import sys

    from dpgen import cli

    monkeypatch.setattr(sys, "argv", ["dpgen", "table=defualt_batch", "scale=smoke"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2 and "choose one of default_batch" in capsys.readouterr().err


def test_a_paper_table_expands_cells_by_dataset_with_the_presets_aliases():
    spec = declared.load_table("dpsinkhorn_table1", "cpu")
    cells = declared.expand_cells(spec)
    assert len(cells) == 13 * 2 and spec["generations"] == 1
    fm = [c for c in cells if c["dataset"] == "fashion_mnist"]
    assert {c["preset"] for c in fm} >= {"dpsinkhorn_dct_fmnist", "dpsinkhorn_param_dct_fmnist", "dpmerf_fmnist"}
    assert all(c["folder"].startswith("fashion_mnist/") for c in fm)
    assert declared.load_table("dpsinkhorn_table1", "paper")["generations"] == 5
    # a dataset without a row's preset (the 60,000-record recipe on mnist10k) leaves the row out
    ten = declared.expand_cells({**spec, "datasets": ["mnist10k"]})
    assert len(ten) == 8 and not any("dct_mnist10k" in c["preset"] for c in ten)


def test_a_paper_tables_cells_carry_the_papers_numbers_and_verdicts():
    """Each cell names its row of the paper's table; the runner puts the paper's numbers beside ours and a
    verdict for each, the same rule in every table (dpgen.utils.paper.verdict)."""
    spec = declared._with_choices(declared.load_table("dpsinkhorn_table1", "paper"), ["fashion_mnist"], None)
    cells = {c["name"]: c for c, _ in declared.cells_of(spec)}
    assert declared.paper_cells(spec, cells["DP-Sinkhorn"]) == {"fid_paper": 193.8, "logreg_paper": 73.4,
                                                                "mlp_paper": 72.2, "cnn_paper": 67.5}
    assert set(declared.paper_cells(spec, cells["DP-MERF (baseline), eps 1"]).values()) == {None}
    spec45 = declared.load_table("dpsinkhorn_table4_5", "smoke")
    last = declared.expand_cells(spec45)[-1]  # Table 5: Adam 1e-5, batch 200, noise 2
    assert declared.paper_cells(spec45, last)["fid_paper"] == 113.8
    row = {"mlp": 80.0, "mlp_std": 0.5, "mlp_paper": 80.8, "logreg": 70.0, "logreg_paper": None, "cnn_paper": 79.9}
    from dpgen.tables.grid import CellResult

    declared._verdicts(spec, row, [CellResult(None, runs=[{"mlp_values": [79.5, 80.5]}])], ["trainer.steps=9"])
    assert row["mlp_verdict"].startswith("reproduced (-0.8, within 1.0)")
    assert "trainer.steps=9" in row["mlp_verdict"] and row["logreg_verdict"] == "no paper number"
    assert row["cnn_verdict"] == "not run"


def test_a_computed_table_keeps_each_seed_in_its_own_run_folders_and_files(monkeypatch):
    """`--seeds 1` on a computed table read seed 0's finished runs back (resume=auto) beside a release drawn with
    seed 1, and overwrote seed 0's table: a seed other than 0 now gets its own suffix (run folders, table, figure)."""
    seen = []
    monkeypatch.setattr(declared, "_compute", lambda spec, dataset, suffix, data_root, seed, progress, select:
                        seen.append((dataset, suffix, seed)) or [])
    spec = declared.load_table("ldp_mnist", "smoke")
    declared.run_computed(spec, datasets=["mnist"])
    declared.run_computed(spec, datasets=["mnist"], seeds=[0])
    declared.run_computed(spec, datasets=["mnist"], seeds=[1])
    declared.run_computed(spec, seeds=[2])
    first = spec["datasets"][0]
    assert seen[:3] == [("mnist", "_mnist", 0), ("mnist", "_mnist", 0), ("mnist", "_mnist_seed1", 1)]
    assert seen[3] == (first, "_seed2", 2)
