"""Unit tests of the budget arithmetic that decides where a run stops (``stop_step`` and
``Ledger.steps_left``), without a training loop: every answer is checked against a brute-force count
of what the accountant allows."""

from types import SimpleNamespace

import pytest

from dpgen.privacy.ledger import Ledger
from dpgen.train.publication import stop_step


def _ledger(z=1.0, q=0.01, eps=2.0, prefix=(), sampling="poisson"):
    led = Ledger(epsilon=eps, delta=1e-5, sampling=sampling, sample_rate=q, prefix=prefix)
    led.use_noise(z)
    return led


def _method(ledger=None, private=True, accounts_steps=True, spent=0):
    return SimpleNamespace(private=private, accounts_steps=accounts_steps, ledger=ledger,
                           spent_steps=lambda: ledger.private_steps() if ledger is not None else spent)


def _brute_force(led, wanted):
    """The largest t <= wanted whose epsilon, after the ledger's history, is within budget."""
    best = 0
    for t in range(1, wanted + 1):
        if led.epsilon_after(t) <= led.epsilon_budget:
            best = t
        else:
            break
    return best


def test_a_public_or_unaccounted_method_runs_what_was_asked():
    assert stop_step(_method(private=False), step=7, requested=100) == 100
    assert stop_step(_method(accounts_steps=False), step=7, requested=100, max_steps=3) == 100


def test_without_a_ledger_the_cap_counts_the_spent_steps():
    m = _method(spent=30)
    assert stop_step(m, step=30, requested=100) == 100  # no per-step limit
    assert stop_step(m, step=30, requested=100, max_steps=50) == 50  # the budget ends it first
    # resumed from an older checkpoint (step 20) after 30 steps were spent: 20 more, not 30
    assert stop_step(m, step=20, requested=100, max_steps=50) == 40
    assert stop_step(m, step=20, requested=100, max_steps=10) == 20  # already above the cap: stop now


def test_steps_left_is_the_largest_count_that_fits():
    led = _ledger(z=1.5, q=0.05, eps=1.5)
    allowed = _brute_force(led, 400)
    assert 0 < allowed < 400  # the budget binds inside the range
    assert led.steps_left(400) == allowed
    assert led.steps_left(allowed) == allowed and led.steps_left(allowed - 1) == allowed - 1
    assert led.epsilon_after(allowed) <= 1.5 < led.epsilon_after(allowed + 1)


def test_stop_step_counts_the_ledgers_whole_history():
    led = _ledger(z=1.5, q=0.05, eps=1.5)
    allowed = _brute_force(led, 400)
    for _ in range(10):
        led.step()
    m = _method(led)
    # a run at step 10 that asked for 400 stops where the budget does
    assert stop_step(m, step=10, requested=400) == allowed
    # the same ledger resumed from a checkpoint at step 4: the 6 steps published after it still count
    assert stop_step(m, step=4, requested=400) == 4 + (allowed - 10)
    # asked for fewer than the budget allows: exactly that many in all
    assert stop_step(m, step=10, requested=15) == 15
    # asked for fewer than already spent: no further step
    assert stop_step(m, step=10, requested=5) == 10


def test_releases_before_training_shrink_the_steps_left():
    plain = _ledger(z=1.5, q=0.05, eps=1.5)
    with_prefix = _ledger(z=1.5, q=0.05, eps=1.5, prefix=(5.0,))
    with_prefix.release_prefix()
    assert with_prefix.private_steps() == 0  # a release is not a step
    left = with_prefix.steps_left(400)
    assert left == _brute_force(with_prefix, 400) < plain.steps_left(400)
    assert stop_step(_method(with_prefix), step=0, requested=400) == left


def test_a_full_batch_ledger_counts_every_step():
    """q = 1 (a full-batch run): each step is a release of the whole set; the arithmetic is the same."""
    led = _ledger(z=3.0, q=1.0, eps=2.0)
    allowed = _brute_force(led, 200)
    assert 0 < allowed < 200 and led.steps_left(200) == allowed
    for _ in range(allowed):
        led.step()
    assert stop_step(_method(led), step=allowed, requested=200) == allowed  # full: no further step
    assert led.epsilon() <= 2.0


@pytest.mark.parametrize("sampling", ["poisson", "without_replacement"])
def test_an_over_full_ledger_allows_nothing(sampling):
    led = _ledger(z=0.5, q=0.1, eps=1.0, sampling=sampling)
    for _ in range(_brute_force(led, 500) + 3):  # an earlier attempt went past the budget
        led.step()
    assert led.steps_left(100) == 0
    assert stop_step(_method(led), step=3, requested=1000) == 3
