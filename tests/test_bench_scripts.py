"""``make bench``'s training rows run through the real loop: a config change that the loop refuses (such
as a declared dataset size) must fail here, not only in a bench run on a GPU node (it did, 2026-11-26)."""

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
