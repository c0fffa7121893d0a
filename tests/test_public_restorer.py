"""scripts/public_restorer.py: a post-processing learnt on public images only."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def test_the_blur_keeps_flat_images_and_mass_and_the_restorer_stays_in_range():
    import public_restorer as pr

    flat = torch.full((2, 1, 12, 12), 0.3)
    assert torch.allclose(pr._blur(flat, 1.0), flat, atol=1e-6)  # normalised kernel, replicate padding
    dot = torch.zeros(1, 1, 15, 15)
    dot[..., 7, 7] = 1.0
    b = pr._blur(dot, 1.0)
    assert abs(float(b.sum()) - 1.0) < 1e-5 and float(b.max()) < 0.2 and pr._blur(dot, 0.0) is dot
    y = pr.Restorer(8, 3)(torch.rand(4, 1, 12, 12))
    assert y.shape == (4, 1, 12, 12) and 0 <= float(y.min()) and float(y.max()) <= 1


def test_a_sensitive_dataset_is_refused_before_anything_is_read(tmp_path):
    import public_restorer as pr

    args = SimpleNamespace(dataset="mnist", band=10, blur=0.0, size=0, inner=0, epochs=1, batch=64, lr=1e-3,
                           width=8, depth=3, seed=0, out=str(tmp_path / "r.pt"))
    with pytest.raises(SystemExit, match="--dataset mnist: a restorer learns on a public proxy only"):
        pr.train(args)
    assert not (tmp_path / "r.pt").exists()


def test_training_reads_the_public_training_split_and_records_what_it_learnt(tmp_path, monkeypatch):
    """Ten epochs on digits (8 x 8, band 4): the checkpoint names its public data, band and frame,
    and the restorer undoes part of the band's loss on the test split it never saw."""
    import public_restorer as pr
    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.utils.dct import lowpass

    out = tmp_path / "r.pt"
    args = SimpleNamespace(dataset="digits", band=4, blur=0.5, size=0, inner=0, epochs=10, batch=64, lr=3e-3,
                           width=16, depth=4, seed=0, out=str(out))
    pr.train(args)
    saved = torch.load(out)
    assert (saved["public_dataset"], saved["band"], saved["blur"]) == ("digits", 4, 0.5)
    net = pr.Restorer(saved["width"], saved["depth"])
    net.load_state_dict(saved["state"])
    x = as_tensors(load_split(compose_config(["dataset=digits"]).dataset, "test"))[0].float()
    band = lowpass(x, 4)
    with torch.no_grad():
        err_band = float(((band - x) ** 2).mean())
        err_restored = float(((net(band) - x) ** 2).mean())
    assert err_restored < 0.9 * err_band, (err_restored, err_band)
    assert np.isfinite(err_restored)


def test_a_labelled_restorer_learns_from_the_labels_and_is_checked_against_the_run(tmp_path):
    """--labelled: the file records the classes, the restorer needs the labels and uses them (the true label
    restores the test split better than a wrong one), a run of another class count is refused by name, and a
    restored generator passes its own labels through."""
    import public_restorer as pr
    from dpgen.config import compose_config
    from dpgen.data import as_tensors, load_split
    from dpgen.models.restorer import RestoredSamples, load_restorer, read_restorer
    from dpgen.utils.dct import lowpass

    out = tmp_path / "r.pt"
    args = SimpleNamespace(dataset="digits", band=2, blur=0.0, size=0, inner=0, epochs=6, batch=64, lr=3e-3,
                           width=16, depth=4, seed=0, out=str(out), labelled=True)
    pr.train(args)
    net, info = read_restorer(out)
    assert info["num_classes"] == 10 and net.num_classes == 10
    x, y = as_tensors(load_split(compose_config(["dataset=digits"]).dataset, "test"))
    x, band = x.float(), lowpass(x.float(), 2)
    with torch.no_grad():
        right = float(((net(band, y) - x) ** 2).mean())
        wrong = float(((net(band, (y + 5) % 10) - x) ** 2).mean())
    assert right < 0.9 * wrong, (right, wrong)
    with pytest.raises(ValueError, match="learnt with labels"):
        net(band)
    with pytest.raises(ValueError, match="learnt with 10 class labels, the run's generator draws 2 classes"):
        load_restorer(out, "mnist", (1, 8, 8), 2, num_classes=2)
    assert load_restorer(out, "mnist", (1, 8, 8), 2, num_classes=10)[0].num_classes == 10

    class Inner(torch.nn.Module):
        num_classes, code_dim, out_shape = 10, 4, (1, 8, 8)

        def sample(self, n, y=None, generator=None, device=None):
            return band[:n], y[:n] if y is not None else torch.arange(n) % 10

    drawn, labels = RestoredSamples(Inner(), net).sample(6, y=y[:6])
    with torch.no_grad():
        assert torch.allclose(drawn, net(band[:6], y[:6]).clamp(0, 1)) and torch.equal(labels, y[:6])
