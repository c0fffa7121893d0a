"""dataset.validation: a validation split carved from the private training set by a public hash of each record."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from dpgen.data import load_split
from dpgen.data.base import ArrayDataset
from dpgen.data.holdout import check_fraction, holdout_part, record_positions


def _digits(validation):
    return OmegaConf.create({"name": "digits", "options": {}, "loader": None, "data_root": None, "download": False,
                             "validation": validation, "path": None})


def test_parts_are_disjoint_cover_the_set_and_are_stable():
    full = load_split(_digits(0.0), "train")
    train, val = load_split(_digits(0.2), "train"), load_split(_digits(0.2), "validation")
    assert train.split == "train" and val.split == "validation"
    assert len(train) + len(val) == len(full)
    rows = lambda ds: {tuple(x.flatten().tolist()) + (int(y),) for x, y in zip(*ds.tensors)}  # noqa: E731
    assert not rows(train) & rows(val)
    # about a fifth held out (binomial: 1,437 records, 6 standard deviations)
    n, f = len(full), 0.2
    assert abs(len(val) - n * f) < 6 * np.sqrt(n * f * (1 - f))
    again = load_split(_digits(0.2), "validation")
    assert torch.equal(again.tensors[0], val.tensors[0])


def test_adding_or_removing_a_record_moves_no_other_record():
    """Parallel composition needs each record's part to depend on that record alone."""
    rng = np.random.default_rng(0)
    X = torch.from_numpy(rng.random((400, 1, 8, 8), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 400))
    pos = record_positions(X, y)
    extra = torch.rand(1, 1, 8, 8)
    pos_plus = record_positions(torch.cat([X[:150], extra, X[150:]]), torch.cat([y[:150], torch.tensor([3]),
                                                                                  y[150:]]))
    assert np.array_equal(np.delete(pos_plus, 150), pos)
    assert np.array_equal(record_positions(X[1:], y[1:]), pos[1:])
    assert ((pos >= 0) & (pos < 1)).all()
    # the label is part of the record: the same pixels with another label may land elsewhere
    assert record_positions(X[:1], torch.tensor([(int(y[0]) + 1) % 10]))[0] != pos[0]


@pytest.mark.parametrize("bad", [-0.1, 0.6, "half", float("nan")])
def test_a_bad_fraction_is_named_with_the_fix(bad):
    with pytest.raises(ValueError, match="dataset.validation"):
        check_fraction(bad)


def test_validation_needs_a_holdout_and_an_in_memory_set():
    with pytest.raises(ValueError, match="dataset.validation=<fraction>"):
        load_split(_digits(0.0), "validation")

    class Lazy:
        name = "celeba"

    with pytest.raises(ValueError, match="lazily"):
        holdout_part(Lazy(), 0.1, "train")
    ds = ArrayDataset(torch.zeros(4, 1, 2, 2), torch.zeros(4), name="x", num_classes=2)
    with pytest.raises(ValueError, match="split='test'"):
        holdout_part(ds, 0.1, "test")


def test_the_config_refuses_a_bad_fraction():
    from dpgen.config import ConfigError, DatasetConfig

    with pytest.raises(ConfigError, match="dataset.validation=0.9"):
        DatasetConfig(name="digits", n_train=1437, validation=0.9)
    assert DatasetConfig(name="digits", n_train=1437, validation=0.05).validation == 0.05


def _task(loaded: int, declared: int = 100):
    """A task whose private records' owner holds ``loaded`` records with ``declared`` declared."""
    from types import SimpleNamespace

    import torch

    from dpgen.data import ArrayDataset
    from dpgen.data.private import PrivateData

    ds = ArrayDataset(torch.zeros(loaded, 1, 2, 2), torch.zeros(loaded, dtype=torch.int64), name="digits",
                      num_classes=10)
    return SimpleNamespace(data=PrivateData.holding(ds, n=declared, name="digits"))


def _check(method, cfg, loaded: int) -> None:
    """The declared-size check a run makes before step 0, on a set of ``loaded`` records declared as 100."""
    from dpgen.privacy.preflight import check_declared_size

    check_declared_size(method, method_name=cfg.method.name, holdout=cfg.dataset.validation,
                        refuse_other_size=_task(loaded).data.refuse_other_size)


def test_a_replace_one_method_is_refused_with_a_holdout():
    from types import SimpleNamespace

    cfg = SimpleNamespace(dataset=SimpleNamespace(validation=0.05, n_train=100), method=SimpleNamespace(
        name="dpsinkhorn_adv"))
    method = SimpleNamespace(private=True, sampling="without_replacement", accounts_steps=True)
    with pytest.raises(ValueError, match="dataset.validation=0.05 with dpsinkhorn_adv"):
        _check(method, cfg, 95)
    poisson = SimpleNamespace(private=True, sampling="poisson", accounts_steps=True)
    _check(poisson, cfg, 95)  # add/remove: parallel composition holds


def test_full_batch_and_local_releases_are_refused_with_a_holdout_and_keep_their_size_rules():
    """DP-MERF (one release of the whole set, sensitivity 2 / n) and entropic-LDP (each record privatised) are
    replace-one too: a replaced record that moves to the held-out part changes the training part's size and
    content, so neither composes in parallel with a selection there. DP-MERF's n is the declared one (a set of
    another size is refused without printing it); a local mechanism's guarantee has no n."""
    from types import SimpleNamespace

    merf = SimpleNamespace(private=True, sampling="without_replacement", accounts_steps=False, local=False)
    ldp = SimpleNamespace(private=True, sampling="without_replacement", accounts_steps=False, local=True)
    for name, method in (("dpmerf", merf), ("entropic_ldp", ldp)):
        cfg = SimpleNamespace(dataset=SimpleNamespace(validation=0.05, n_train=100), method=SimpleNamespace(name=name))
        with pytest.raises(ValueError, match=f"dataset.validation=0.05 with {name}, whose neighbours replace one"):
            _check(method, cfg, 95)
    cfg = SimpleNamespace(dataset=SimpleNamespace(validation=0.0, n_train=100, name="digits"),
                          method=SimpleNamespace(name="dpmerf"))
    with pytest.raises(ValueError, match="dataset.n_train=100 is not the size") as err:
        _check(merf, cfg, 95)
    assert "95" not in str(err.value)
    _check(merf, cfg, 100)
    _check(ldp, cfg, 95)  # local: n is not in its guarantee


@pytest.mark.parametrize("method", ["dpmerf", "entropic_ldp"])
def test_run_py_refuses_a_replace_one_release_with_a_holdout_before_reading_a_part(run_cli, tmp_path, method):
    """Until 2026-12-01 DP-MERF ran with dataset.validation and stopped at its release with 'built for 1437
    records, got <the training part's size>': a number computed from the private records, in an error message."""
    from dpgen.data import as_tensors

    code, out = run_cli(f"method={method}", "dataset=digits", "dataset.validation=0.1", "trainer.steps=2",
                        "task.eval_models=[]", "task.fid=false")
    assert code == 2 and f"dataset.validation=0.1 with {method}, whose neighbours replace one record" in out, \
        out[-1500:]
    part = len(as_tensors(load_split(_digits(0.1), "train"))[0])
    assert part != 1437 and f" {part}" not in out and f"{part} " not in out


def test_run_py_names_a_bad_fraction_and_leaves_no_folder(run_cli, tmp_path):
    code, out = run_cli("dataset.validation=0.9", "trainer.steps=5")
    assert code == 2 and "dataset.validation=0.9 is out of range" in out, out[-1500:]
    assert not (tmp_path / "run").exists()
