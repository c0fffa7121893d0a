"""``make fig-dpswd-toy`` (DP-SWD Figure 2) at smoke scale: files, columns and the claim's verdict."""

import csv


def test_dpswd_toy_smoke(outputs_tmp):
    from dpgen.tables import dpswd_toy

    rows = dpswd_toy.main(["--scale", "smoke"])
    path = outputs_tmp / "tables" / "dpswd_toy.csv"
    with open(path) as f:
        assert next(csv.reader(f)) == dpswd_toy.COLUMNS
    assert (outputs_tmp / "figures" / "dpswd_fig2_toy.png").stat().st_size > 10_000
    md = (outputs_tmp / "tables" / "dpswd_toy.md").read_text()
    assert "Verdict" in md and "Noise offset" in md
    s = dpswd_toy.SCALES["smoke"]
    assert len(rows) == len(s["c"]) * len(s["n"]) * len(dpswd_toy.SIGMAS)
    for r in rows:
        # the noise adds a positive finite-sample offset; SWD tracks the population c^2
        assert r["offset"] > 0
        assert abs(r["swd_mean"] - r["population"]) < 0.1 + 0.3 * r["population"]
    for f in dpswd_toy.findings(rows):
        assert f["spearman"] > 0.9 and f["min_at_c0"]
