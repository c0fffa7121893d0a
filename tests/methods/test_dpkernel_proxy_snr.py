"""scripts/dpkernel_proxy_snr.py: the noise norm it divides by is the GP derivative's, and its signal vanishes where
the kernel says it must (a bandwidth far below the distance to every record of the class)."""

import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


def test_noise_norm_is_the_gp_derivatives_expected_norm():
    """E||grad G(y)||^2 = d sum_s 1 / s^2 at one point (a class of one sample: no joint correlation), by 4,000 draws
    of the method's own sampler: within 3 % (the mean of 4,000 chi-square-like norms has a relative std near 1 %)."""
    import dpkernel_proxy_snr as snr
    from dpgen.methods.dpkernel import gradient_noise

    d, bws = 16, [0.5, 2.0, 8.0]
    gen = torch.Generator().manual_seed(0)
    y = torch.rand(10, d, dtype=torch.float64, generator=gen)
    labels = torch.arange(10)  # one sample per class: each draw is independent
    sq = torch.stack([gradient_noise(y, labels, bws, gen).pow(2).sum(1) for _ in range(400)]).flatten()
    expected = snr.noise_norm(1.0, d, bws) ** 2
    assert math.isclose(expected, d * (4 + 0.25 + 1 / 64))
    assert abs(sq.mean().item() / expected - 1) < 0.03


def test_signal_vanishes_for_a_bandwidth_below_the_class_distances_and_ranks_the_settings():
    """Records of a class lie at distance 10 from the points: bandwidth 0.5 carries exp(-200) of signal (0 in float64
    terms), 8 does; the table's rows hold the calibrated sigma and a finite ratio for every setting."""
    import dpkernel_proxy_snr as snr

    gen = torch.Generator().manual_seed(1)
    d = 4
    real = torch.zeros(200, d, dtype=torch.float64)
    real[:, 0] = 10.0
    real_labels = torch.zeros(200, dtype=torch.long)
    sharp = torch.zeros(5, d, dtype=torch.float64)
    sharp[:, 1] = 0.5
    blurred = torch.zeros(5, d, dtype=torch.float64)
    labels = torch.zeros(5, dtype=torch.long)
    small, _ = snr.mean_signal(blurred, labels, real, real_labels, [0.5], 50, 2, gen)
    wide, along = snr.mean_signal(blurred, labels, real, real_labels, [8.0], 50, 2, gen,
                                  torch.nn.functional.normalize(sharp - blurred, dim=1))
    assert small < 1e-60 < wide
    assert abs(along) < 1e-12  # the records pull along axis 0, the detail direction is axis 1
    rows = snr.table(200, 10.0, 1e-5, 5, real, real_labels, sharp, blurred, labels, draws=1,
                     bandwidth_sets=([0.5], [8.0]), batches=(20,))
    assert [r["bandwidths"] for r in rows] == [[0.5], [8.0]] and rows[0]["sigma"] == rows[1]["sigma"] > 0
    assert rows[0]["steps"] == 50 and all(math.isfinite(r["detail_ratio_x_sqrtT"]) for r in rows)
