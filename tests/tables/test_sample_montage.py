"""scripts/sample_montage.py: one labelled band per run, the first rows of each run's sample grid."""

import sys
from pathlib import Path

import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import sample_montage  # noqa: E402


def test_montage_keeps_the_first_rows_of_each_grid(tmp_path):
    a = tmp_path / "run_a"
    a.mkdir()
    Image.new("RGB", (100, 80), "red").save(a / "samples.png")  # a run folder: 8 rows of 10 px
    Image.new("RGB", (100, 80), "blue").save(tmp_path / "b.png")  # or a PNG
    out = sample_montage.montage([("A", str(a)), ("B", str(tmp_path / "b.png"))], tmp_path / "m.png", rows=2,
                                 title="t")
    im = Image.open(out).convert("RGB")
    assert im.size == (100, sample_montage.LABEL_H * 3 + 2 * 20)
    assert im.getpixel((50, 2 * sample_montage.LABEL_H + 10)) == (255, 0, 0)  # A's band
    assert im.getpixel((50, im.height - 5)) == (0, 0, 255)  # B's band, last
    with pytest.raises(SystemExit, match="does not exist"):
        sample_montage.montage([("C", str(tmp_path / "nope"))], tmp_path / "x.png")
