"""The checks that refuse a private run before step 0, before anything is trained or released: the declared size n
against the neighbouring relation of the method's guarantee, a held-out part against it, and every declared
mechanism against the budget (:func:`check_run`). Plain values in, a ``ValueError`` naming the setting and the
fix out; nothing computed from the private records is said."""

from __future__ import annotations

from typing import Callable

from dpgen.privacy.mechanisms import check_declared


def check_run(method, *, method_name: str, holdout: float, steps: int,
              refuse_other_size: Callable[[str], None]) -> None:
    """Refuse a run whose guarantee would not hold: :func:`check_declared_size`, then :func:`check_budget`."""
    check_declared_size(method, method_name=method_name, holdout=holdout, refuse_other_size=refuse_other_size)
    check_budget(method, steps)


def check_declared_size(method, *, method_name: str, holdout: float,
                        refuse_other_size: Callable[[str], None]) -> None:
    """The dataset size n is public: ``dataset.n_train`` declares it, and q = B / n, the steps of an epoch,
    the calibrated noise, ``n_synthetic`` and every published count take that number, never the loaded one.

    * Poisson methods (add/remove one record): sampling each loaded record at the declared q is
      add/remove-DP whatever the loaded size, so the loaded size is never compared with n. Refusing a run
      whose set has another size would itself tell D (n records) from D plus one record with certainty.
    * Replace-one methods (fixed-size batches without replacement, full-batch releases): neighbours have the
      same size, so a set of another size than the declared n is refused (the refusal tells no two
      neighbours apart); the message does not say the loaded size.
    * Local mechanisms (``local = True``: each record privatised once, entropic-LDP): their guarantee
      does not involve n, so nothing is compared.

    A held-out part (``dataset.validation``) composes with the run in parallel only under add/remove, so every
    private method whose neighbours replace one record is refused with it: the replace-one methods above (a
    full-batch release such as DP-MERF's mean included) and the local ones (a replaced record that moves to the
    held-out part is no longer released at all, which its "any two values of one record" does not cover)."""
    if holdout > 0 and method.private and method.sampling != "poisson":
        raise ValueError(
            f"dataset.validation={holdout:g} with {method_name}, whose neighbours replace one record (it "
            "samples without replacement, releases the whole set once, or privatises each record locally): a "
            "replaced record may move between the training and the validation part, so the two parts would not "
            "compose in parallel. Use a Poisson-sampling method (method.sampling=poisson where it has one), or set "
            "dataset.validation=0.")
    if not method.private or method.sampling == "poisson" or method.local:
        return
    refuse_other_size(
        f"{method_name}'s guarantee (replace one record: batches of a fixed size drawn without replacement "
        "from n records, or one release of the whole set) computes its sampling rate or its sensitivity from the "
        "declared n")


def check_budget(method, steps: int) -> None:
    """Every declared mechanism fits its budget before step 0, whatever its kind (a one-shot release, releases
    before training, a given per-step noise): :func:`dpgen.privacy.mechanisms.check_declared` refuses, naming the
    value and the fix, what would be trained or released above it (issue 83: a one-shot method with a fixed noise
    trained and released at epsilon 2.52 under a budget of 1.0)."""
    if method.private and method.ledger is not None:
        check_declared(method.ledger, steps if method.accounts_steps else 0)


__all__ = ["check_budget", "check_declared_size", "check_run"]
