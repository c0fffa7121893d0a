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
