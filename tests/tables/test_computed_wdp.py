"""The WDP and DP-Sinkhorn privacy tables as computed tables (``conf/table/<name>.yaml`` + ``compute``), run
through the one runner ``dpgen table <name> --scale smoke``: the values are the closed forms (or the numbers the
former argparse programs wrote), each run writes its table and its figure, and none of them is a program."""

import csv
import importlib
import inspect
import math

import pytest

MODULES = ("wdp_mechanisms", "wdp_composition", "wdp_beta_delta", "dpsinkhorn_privacy")


def _table(outputs_tmp, name, scale="smoke"):
    """Run table ``name`` through ``dpgen table`` and read back its CSV (header, rows) and Markdown."""
    from dpgen.tables import declared

    assert declared.main([name, "--scale", scale]) == 0
    with open(outputs_tmp / "tables" / f"{name}.csv") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    return reader.fieldnames, rows, (outputs_tmp / "tables" / f"{name}.md").read_text()


@pytest.mark.parametrize("module", MODULES)
def test_each_is_a_registered_table_not_a_program(module):
    """Issue 85 section 3: no argparse program in dpgen/tables/; the YAML names the module's hooks."""
    from dpgen.tables.declared import TABLES, load_table

    mod = importlib.import_module(f"dpgen.tables.{module}")
    source = inspect.getsource(mod)
    assert not hasattr(mod, "main") and "argparse" not in source and "__main__" not in source
    assert module in TABLES.names()
    spec = load_table(module, "paper")
    assert spec["compute"] == f"dpgen.tables.{module}.compute"
    assert spec["notes_from"] == f"dpgen.tables.{module}.notes_for"
    assert set(load_table(module, "smoke")["settings"]) == set(spec["settings"])  # smoke: the same keys


def test_wdp_mechanisms_closed_forms(outputs_tmp):
    header, rows, md = _table(outputs_tmp, "wdp_mechanisms")
    assert header == ["mechanism", "framework", "scale", "order", "epsilon"]
    assert len(rows) == 2 * 2 * 4 * 10  # mechanisms x frameworks x the paper's scales 1 2 3 5 x orders 1..10
    eps = {(r["mechanism"], r["framework"], float(r["scale"]), int(r["order"])): float(r["epsilon"]) for r in rows}
    for s in (1.0, 2.0, 3.0, 5.0):
        for o in range(1, 11):
            # Gaussian: RDP alpha / (2 sigma^2) (order 1: the KL limit, the same formula), WDP 1/2 (1/sigma)^(1/mu)
            assert eps["gaussian", "RDP", s, o] == pytest.approx(o / (2 * s * s))
            assert eps["gaussian", "WDP", s, o] == pytest.approx(0.5 * (1 / s) ** (1 / o))
            kl = 1 / s + math.exp(-1 / s) - 1  # Laplace at order 1: the KL divergence of two shifted Laplaces
            assert eps["laplace", "WDP", s, o] == pytest.approx(0.5 * math.sqrt(2 * kl) ** (1 / o))
        assert eps["laplace", "RDP", s, 1] == pytest.approx(1 / s + math.exp(-1 / s) - 1)
        assert eps["laplace", "RDP", s, 10] < 1 / s  # RDP of the Laplace mechanism stays below its pure-DP 1/b
    assert "Propositions 7-8" in md
    assert (outputs_tmp / "figures" / "wdp_fig1_orders.png").stat().st_size > 1000  # one run: table and figure


def test_wdp_beta_delta_corollary_1(outputs_tmp):
    header, rows, md = _table(outputs_tmp, "wdp_beta_delta")
    assert header == ["panel", "beta", "delta", "total_loss", "epsilon"]
    assert sum(r["panel"] == "a" for r in rows) == 50 * 4 and sum(r["panel"] == "b" for r in rows) == 4 * 26
    L = float(rows[0]["total_loss"])
    assert L == pytest.approx(1.09275, abs=1e-5)  # the former program's L (one WA step, seed 0)
    for r in rows:  # Corollary 1: eps = L - log(delta) / beta
        assert float(r["epsilon"]) == pytest.approx(L - math.log(float(r["delta"])) / float(r["beta"]))
    a = {(float(r["delta"]), float(r["beta"])): float(r["epsilon"]) for r in rows if r["panel"] == "a"}
    assert a[1e-10, 1.0] == pytest.approx(24.1186, abs=1e-4)  # the former Markdown's summary
    assert "delta 1e-10: 24.12, 12.61" in md  # that summary, now a note
    assert (outputs_tmp / "figures" / "wdp_fig3_beta_delta.png").exists()


def test_wdp_composition_smoke(outputs_tmp):
    header, rows, md = _table(outputs_tmp, "wdp_composition")
    assert header == ["quantile", "step", "accountant", "epsilon"]
    assert len(rows) == 4 * 10 * 4  # quantiles x the smoke scale's 10 steps x accountants
    eps = {(float(r["quantile"]), int(r["step"]), r["accountant"]): float(r["epsilon"]) for r in rows}
    # MA and WA at step t do not depend on T (BA's Hoelder correction does): the paper scale's numbers at step 10
    for qu in (0.05, 0.5, 0.75, 0.99):
        assert eps[qu, 10, "MA"] == pytest.approx(123.358, abs=1e-3)
    assert eps[0.05, 10, "WA"] == pytest.approx(1414.6331, abs=1e-3)
    assert eps[0.99, 10, "WA"] == pytest.approx(2277.4386, abs=1e-3)
    for qu in (0.05, 0.99):  # every accountant's epsilon grows with the steps
        for acc in ("MA", "BA", "BA (lambda=16)", "WA"):
            assert all(eps[qu, t, acc] < eps[qu, t + 1, acc] for t in range(1, 10))
    assert "T = 10 steps" in md and "C = 0.05-quantile, epsilon at steps 1 / 5 / 10" in md
    assert (outputs_tmp / "figures" / "wdp_fig2_composition.png").exists()


def test_dpsinkhorn_privacy_smoke(outputs_tmp):
    header, rows, md = _table(outputs_tmp, "dpsinkhorn_privacy")
    assert header == ["dataset", "delta", "noise_multiplier", "sampling_rate", "steps_stated", "accountant",
                      "epsilon_at_stated_steps", "steps_to_eps10"]
    assert {r["accountant"] for r in rows} == {"rdp", "moments", "opacus_rdp"}  # smoke: no PRV
    by = {(r["dataset"].split("/")[0], r["accountant"]): r for r in rows}
    assert float(by["MNIST", "rdp"]["epsilon_at_stated_steps"]) == pytest.approx(9.925, abs=0.01)
    assert int(by["MNIST", "rdp"]["steps_to_eps10"]) == 3441794
    assert float(by["CelebA", "rdp"]["epsilon_at_stated_steps"]) == pytest.approx(16.419, abs=0.01)
    assert int(by["CelebA", "rdp"]["steps_to_eps10"]) == 462804
    assert "statement holds" in md and "does NOT hold" in md
