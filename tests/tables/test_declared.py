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
            assert spec["cells"] and spec["columns"] and spec["seeds"]


def test_bad_names_and_scales_say_what_exists(tmp_path):
    with pytest.raises(ValueError, match="choose one of .*default_batch"):
        declared.table_path("defualt_batch")
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
    assert rows[0]["sigma"] < rows[1]["sigma"]  # larger batches, larger q: more noise at the same budget
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
    spec = declared.load_table("dpsinkhorn_dct", "cpu")
    cells = declared.expand_cells(spec)
    assert len(cells) == 3 * 2 and spec["generations"] == 1
    fm = [c for c in cells if c["dataset"] == "fashion_mnist"]
    assert {c["preset"] for c in fm} == {"dpsinkhorn_dct_fmnist", "dpsinkhorn_param_dct_fmnist"}
    assert all("fashion_mnist" in c["name"] and c["folder"].endswith("_fashion_mnist") for c in fm)
    assert declared.load_table("dpsinkhorn_dct", "smoke")["datasets"] == ["mnist"]
    assert declared.load_table("dpsinkhorn_dct", "paper")["generations"] == 5
