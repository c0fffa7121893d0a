"""Entropic-LDP Figure 2's FID cells: measured per mechanism by the process that has its runs, kept, read back."""

import torch

from dpgen.tables import ldp_mnist
from dpgen.tables.declared import RunSelection

SETTINGS = {"fid": True}


def _pending(seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for mech in ("laplace", "gaussian"):
        for col in ldp_mnist.COLS:
            row = {"mechanism": mech, "column": col, "fid": None, "precision": None, "recall": None}
            out.append((row, col, torch.rand(6, 1, 28, 28, generator=g)))
    return out


class _Weights:  # get_extractor's stand-in: the cells are keyed by the weights' name
    weights_name = "stand-in"


def _fake_fid(calls, monkeypatch):
    from dpgen.eval import fid as fidmod

    monkeypatch.setattr(fidmod, "get_extractor", lambda *a, **k: _Weights())

    def fid_of_images(fake, real_name, x_real, device="cpu", progress=False, resume_dir=None, image_shape=None):
        calls.append(float(fake.sum()))
        return {"fid": 100.0 + len(calls), "precision": 0.5, "recall": 0.25}
    return fid_of_images


def test_a_process_measures_only_the_mechanisms_whose_runs_it_has(tmp_path, monkeypatch):
    import dpgen.tasks.generation as generation

    calls = []
    monkeypatch.setattr(generation, "fid_of_images", _fake_fid(calls, monkeypatch))
    select = RunSelection(only=["laplace_*"])
    for name in ("laplace_wasserstein", "laplace_entropic", "laplace_wgan_gp"):
        assert select.wants(name, tmp_path / name)
    for name in ("gaussian_wasserstein", "gaussian_entropic", "gaussian_wgan_gp"):
        assert not select.wants(name, tmp_path / name)  # not selected, not finished: another process's
    pending = _pending()
    ldp_mnist.fill_fid(pending, SETTINGS, "mnist", torch.zeros(4, 784), select, progress=False,
                       cache_dir=tmp_path / "fid_cells")
    cells = {(r["mechanism"], r["column"]): r["fid"] for r, _, _ in pending}
    assert len(calls) == len(ldp_mnist.COLS) - 1  # Laplace's five columns; raw (private images) never
    assert cells[("laplace", "raw")] is None
    assert all(cells[("laplace", c)] is not None for c in ldp_mnist.COLS[1:])
    assert all(cells[("gaussian", c)] is None for c in ldp_mnist.COLS)
    assert "gaussian" in pending[0][0]["fid_missing"] and "laplace" not in pending[0][0]["fid_missing"]
    assert len(list((tmp_path / "fid_cells").glob("laplace_*.json"))) == 5


def test_kept_cells_are_read_back_and_new_images_are_measured(tmp_path, monkeypatch):
    import dpgen.tasks.generation as generation

    calls = []
    monkeypatch.setattr(generation, "fid_of_images", _fake_fid(calls, monkeypatch))
    first = _pending(seed=0)
    ldp_mnist.fill_fid(first, SETTINGS, "mnist", torch.zeros(4, 784), RunSelection(), progress=False,
                       cache_dir=tmp_path)
    assert len(calls) == 10 and "fid_missing" not in first[0][0]
    again = _pending(seed=0)  # --collect-only, or a rerun: the same images
    ldp_mnist.fill_fid(again, SETTINGS, "mnist", torch.zeros(4, 784), RunSelection(collect_only=True),
                       progress=False, cache_dir=tmp_path)
    assert len(calls) == 10
    assert [r["fid"] for r, _, _ in again] == [r["fid"] for r, _, _ in first]
    other = _pending(seed=1)  # a retrained generator's images are not another's cells
    ldp_mnist.fill_fid(other, SETTINGS, "mnist", torch.zeros(4, 784), RunSelection(), progress=False,
                       cache_dir=tmp_path)
    assert len(calls) == 20


def test_no_cells_without_fid_or_without_weights(tmp_path, monkeypatch):
    import dpgen.tasks.generation as generation

    pending = _pending()
    ldp_mnist.fill_fid(pending, {"fid": False}, "mnist", torch.zeros(4, 784), RunSelection(), cache_dir=tmp_path)
    assert all(r["fid"] is None for r, _, _ in pending) and not list(tmp_path.iterdir())
    from dpgen.eval import fid as fidmod

    def absent(*a, **k):
        raise fidmod.FIDUnavailable("no weights (make fid-weights)")

    monkeypatch.setattr(fidmod, "get_extractor", absent)
    monkeypatch.setattr(generation, "fid_of_images",
                        lambda *a, **k: {"fid": None, "fid_missing": "no weights (make fid-weights)"})
    ldp_mnist.fill_fid(pending, SETTINGS, "mnist", torch.zeros(4, 784), RunSelection(), progress=False,
                       cache_dir=tmp_path)
    assert pending[1][0]["fid_missing"] == "no weights (make fid-weights)"
    assert not list(tmp_path.glob("*.json"))  # nothing kept: the weights may be installed later


def test_panel_titles_carry_w2_and_only_a_measured_fid():
    rows = [{"mechanism": "gaussian", "column": "entropic_wp_gan", "w2_to_clean": 5.3769, "fid": 73.634},
            {"mechanism": "laplace", "column": "privatised", "w2_to_clean": 39.867, "fid": None},
            {"mechanism": "laplace", "column": "wp_gan", "w2_to_clean": float("nan"), "fid": None}]
    assert ldp_mnist.column_title(rows, "gaussian", "entropic_wp_gan") == "entropic_wp_gan\nW2 5.38 / FID 73.6"
    assert ldp_mnist.column_title(rows, "laplace", "privatised", first=True) == "laplace privatised\nW2 39.87"
    assert ldp_mnist.column_title(rows, "laplace", "wp_gan") == "wp_gan"
    assert ldp_mnist.column_title(rows, "gaussian", "raw") == "raw"  # no row
    rows.append({"mechanism": "gaussian", "column": "raw", "w2_to_clean": 6.41, "fid": None})
    assert ldp_mnist.column_title(rows, "gaussian", "raw", first=True) == "gaussian raw"  # private images: no score
