"""DP-Sinkhorn's image-gradient mechanism: clipping, noise std and accounting."""

import numpy as np
import pytest
import torch

from dpgen.privacy.image_gradient import ImageGradientMechanism
from dpgen.privacy.validation import PrivacyParameterError


def test_clipped_gradient_never_exceeds_C_and_noise_has_std_2C_sigma():
    m = ImageGradientMechanism(clip=0.5, noise_multiplier=1.1, sample_rate=1 / 1200)
    g = torch.Generator().manual_seed(0)
    big = torch.randn(50, 1, 28, 28) * 10
    small = torch.randn(50, 1, 28, 28) * 1e-4
    for grad in (big, small):
        noiseless = ImageGradientMechanism(clip=0.5, noise_multiplier=1e-12, sample_rate=0.1)
        out = noiseless.privatize(grad)
        assert out.flatten().norm() <= 0.5 + 1e-6
        if grad is small:
            torch.testing.assert_close(out, grad, rtol=1e-4, atol=1e-9)
    noise = m.privatize(torch.zeros(200, 784), generator=g)
    assert m.noise_std == pytest.approx(2 * 0.5 * 1.1)
    n = noise.numel()
    assert abs(noise.std().item() - m.noise_std) < 5 * m.noise_std / np.sqrt(2 * n)
    assert m.sensitivity == pytest.approx(1.0)


def test_paper_statement_for_mnist_holds_and_for_celeba_does_not():
    mnist = ImageGradientMechanism(0.5, 1.1, 1 / 1200)
    assert mnist.epsilon(3_400_000, 1e-5) == pytest.approx(9.925, abs=0.01)
    celeba = ImageGradientMechanism(0.5, 0.8, 0.00123)
    assert celeba.epsilon(1_100_000, 1e-6) > 16
    assert celeba.steps_to(10, 1e-6) < 500_000


def test_accountant_steps_match_mechanism_epsilon():
    m = ImageGradientMechanism(0.5, 1.1, 0.01)
    acc = m.accountant()
    m.account(acc, num_steps=500)
    assert acc.get_epsilon(1e-5) == pytest.approx(m.epsilon(500, 1e-5))


@pytest.mark.parametrize("kw,param", [({"clip": 0}, "clip"), ({"noise_multiplier": -1}, "noise_multiplier"),
                                      ({"sample_rate": 2}, "sample_rate")])
def test_bad_input(kw, param):
    with pytest.raises(PrivacyParameterError, match=param):
        ImageGradientMechanism(**kw)
