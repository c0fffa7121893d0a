"""One picture of several runs' sample grids, a labelled band per run (the first rows of each run's
``samples.png``: one row per draw, column j = class j).

    python scripts/sample_montage.py OUT.png "LABEL=RUN_FOLDER_OR_PNG" ... [--rows 2] [--title TEXT]

Only released samples go in (post-processing of each run's generator): no private record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

LABEL_H = 22


def _grid_path(spec: str) -> Path:
    p = Path(spec)
    return p / "samples.png" if p.is_dir() else p


def montage(items, out: Path, rows: int = 2, title: str = "") -> Path:
    bands = []
    for label, spec in items:
        path = _grid_path(spec)
        if not path.is_file():
            raise SystemExit(f"sample_montage: {path} does not exist (give a run folder with samples.png, or a PNG)")
        im = Image.open(path).convert("RGB")
        # the grid holds 8 rows of draws; keep the first ``rows`` of them
        keep = round(im.height * min(rows, 8) / 8)
        bands.append((label, im.crop((0, 0, im.width, keep))))
    width = max(b.width for _, b in bands)
    height = sum(b.height + LABEL_H for _, b in bands) + (LABEL_H if title else 0)
    sheet = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    y = 0
    if title:
        draw.text((4, 4), title, fill="black", font=font)
        y += LABEL_H
    for label, band in bands:
        draw.text((4, y + 5), label, fill="black", font=font)
        y += LABEL_H
        sheet.paste(band, (0, y))
        y += band.height
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.png")
    sheet.save(tmp)
    tmp.replace(out)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("items", nargs="+", metavar="LABEL=PATH")
    ap.add_argument("--rows", type=int, default=2, help="rows of draws kept from each grid (default 2)")
    ap.add_argument("--title", default="")
    args = ap.parse_args(argv)
    items = []
    for it in args.items:
        if "=" not in it:
            ap.error(f"{it!r} is not LABEL=PATH")
        label, _, path = it.partition("=")
        items.append((label, path))
    print(montage(items, args.out, args.rows, args.title))


if __name__ == "__main__":
    main()
