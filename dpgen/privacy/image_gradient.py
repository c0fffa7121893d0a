"""DP-Sinkhorn's image-gradient mechanism (dp-sinkhorn.txt, section 3 and appendix D.4).

The gradient of the Sinkhorn loss with respect to the batch of generated images is clipped to
l2 norm C (the whole batch gradient, as one vector) and Gaussian noise N(0, (2 C sigma)^2) is
added before it is backpropagated into the generator. Two real batches that differ in one
record give clipped gradients at most 2C apart, so the l2 sensitivity is 2C and the noise
multiplier (std / sensitivity) is sigma. The real batch is Poisson-sampled with rate q, and
the steps are composed by the Poisson-subsampled Gaussian RDP accountant.

(The paper's text states the per-step RDP as alpha C^2 / (2 sigma^2); with sensitivity 2C and
std 2 C sigma it is alpha / (2 sigma^2), which is what the accountant uses and what reproduces
the paper's step counts.)
"""

from __future__ import annotations

from dataclasses import dataclass

from dpgen.privacy.accountants import RDPAccountant
from dpgen.privacy.calibration import steps_to_epsilon
from dpgen.privacy.validation import check_positive, check_sample_rate


@dataclass
class ImageGradientMechanism:
    """Clip the image gradient to ``clip`` and add N(0, (2 clip sigma)^2) noise.

    ``clip`` is C (0.5 in the paper), ``noise_multiplier`` is sigma (1.1 for MNIST, 0.8 for
    CelebA), ``sample_rate`` is q (batch_size / N under Poisson sampling).
    """

    clip: float = 0.5
    noise_multiplier: float = 1.1
    sample_rate: float = 50 / 60000

    def __post_init__(self) -> None:
        self.clip = check_positive(self.clip, "clip", "the image-gradient clipping bound C")
        self.noise_multiplier = check_positive(self.noise_multiplier, "noise_multiplier")
        self.sample_rate = check_sample_rate(self.sample_rate)

    @property
    def sensitivity(self) -> float:
        return 2.0 * self.clip

    @property
    def noise_std(self) -> float:
        return 2.0 * self.clip * self.noise_multiplier

    def privatize(self, grad, generator=None):
        """Clip a gradient tensor (torch) to l2 norm C as a whole and add the Gaussian noise. A gradient
        whose norm is not finite (a record with inf / NaN values in the batch) is replaced by 0 before
        the noise: the sensitivity 2C holds for every input, and the release stays finite."""
        from dpgen.privacy.clipping import clip_whole
        from dpgen.utils.noise import gaussian

        noise = gaussian(grad.shape, generator=generator, device=grad.device, dtype=grad.dtype)
        return clip_whole(grad, self.clip) + self.noise_std * noise

    def accountant(self) -> RDPAccountant:
        return RDPAccountant(sampling="poisson")

    def account(self, acc, num_steps: int = 1) -> None:
        acc.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate, num_steps=num_steps)

    def epsilon(self, steps: int, delta: float, accountant: str = "rdp") -> float:
        from dpgen.privacy.accountants import epsilon_for

        return epsilon_for(self.noise_multiplier, self.sample_rate, steps, delta, "poisson", accountant)

    def steps_to(self, epsilon: float, delta: float, accountant: str = "rdp") -> int:
        return steps_to_epsilon(epsilon, delta, self.noise_multiplier, self.sample_rate, "poisson", accountant)


@dataclass
class PerSampleGradientMechanism(ImageGradientMechanism):
    """DP-SGD on a loss that is a sum over records: each record's gradient clipped to ``clip`` on its
    own, the clipped gradients summed and N(0, (clip sigma)^2) added per coordinate. Adding or
    removing one record changes the sum by at most C (the l2 sensitivity), so the noise multiplier
    is sigma and the Poisson-subsampled Gaussian accountant applies as for Algorithm 1."""

    clip: float = 1.0

    @property
    def sensitivity(self) -> float:
        return self.clip

    @property
    def noise_std(self) -> float:
        return self.clip * self.noise_multiplier

    def privatize_sum(self, grads, generator=None):
        """(noisy sum of the clipped per-record gradients [one tensor per parameter], in the gradients' dtypes;
        norms before clipping). The sum is accumulated in float64 (:func:`dpgen.privacy.clipping.clipped_sum`)."""
        from dpgen.privacy.clipping import clipped_sum

        sums, norms = clipped_sum(grads, self.clip)
        return self.noise_sum(sums, generator=generator, dtypes=[g.dtype for g in grads]), norms

    def noise_sum(self, sums, generator=None, dtypes=None):
        """The release of sums of per-record gradients each clipped to C (by
        :func:`dpgen.privacy.clipping.clipped_sum`, in float64, e.g. a chunk at a time): N(0, (C sigma)^2) added
        per coordinate in float64, the result then rounded to ``dtypes`` (one per sum, the dtype the noise is
        drawn in; default: each sum's own) by :func:`dpgen.privacy.clipping.release_sum`."""
        from dpgen.privacy.clipping import release_sum
        from dpgen.utils.noise import gaussian

        dtypes = [s.dtype for s in sums] if dtypes is None else list(dtypes)
        return [release_sum(s, gaussian(s.shape, generator=generator, device=s.device, dtype=dt), self.noise_std, dt)
                for s, dt in zip(sums, dtypes)]
