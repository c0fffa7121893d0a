"""Entropic-LDP GAN Figure 2 (section 4.3) on the MNIST of ../shared: ``conf/table/ldp_mnist.yaml`` (its sizes
per scale), run by ``dpgen table ldp_mnist --scale smoke|paper`` (``make fig-ldp-mnist``).

The 8,000 training images of ``dataset=mnist10k`` (``--datasets mnist``: the full 60,000, the paper's data;
its files go to ``ldp_mnist_mnist``) are privatised once without ball projection, the
sensitivity being the largest norm an image in [0, 1]^784 can have (l1: 784 for Laplace, l2: 28
for Gaussian), as section 4.3 does (we use the diameter 2r, the correct LDP sensitivity, where the
paper's text uses r). Columns of the figure, per mechanism:

1. raw images; 2. privatised images; 3. wavelet-denoised privatised images (PyWavelets, basis /
level / threshold tuned against the clean images as the paper does: an oracle);
4. a W_p GAN (exact W_p, POT) trained on the privatised images; 5. a WGAN-GP trained on the
wavelet-denoised images; 6. the entropic W_p GAN (p and lambda matched to the noise) trained on
the privatised images. Generators: ``dcgan28`` (uniform latent of 100).

The epsilons are enormous (LDP on whole images without projection); the paper's own values are
lost from the text, so we fix the noise scale (Laplace b, Gaussian s) and report the epsilon it
gives. Quantitative companion: exact W2 between ``n_eval`` images of each column and as many clean
held-out images, and (``fid: true``, the paper scale) FID with precision / recall of the same ``n_eval`` images of
every released or generated column against the whole test split (issue 53: W2 on 2,000 images in 784-D cannot rank
the generators; the raw column is the private training set and gets none). Writes outputs/tables/ldp_mnist.csv
(+ .md) and outputs/figures/ldp_fig2_mnist.png.

Splitting it: ``--rows 'laplace_*'`` trains only those run folders (shell patterns), so two processes (or
sessions) with disjoint ``--rows`` share the figure; each writes the table from every finished run, naming
the missing ones (no verdict until all exist). FID: a process computes the cells of each mechanism whose three runs
it trained or found finished, after its training, and keeps them in ``<runs>/fid_cells/`` (keyed by the column's
images), so the Laplace and the Gaussian process each do their own five columns, a rerun reads them back, and
``--collect-only`` trains nothing and writes the whole table from the finished runs and those cells. ``make``
passes these as ``ARGS="..."``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from dpgen.baselines import tune_wavelet, wavelet_denoise
from dpgen.losses.entropic import matched_loss_params
from dpgen.methods.entropic_ldp import epsilon_for_noise_scale, privatise
from dpgen.tables.declared import RunSelection
from dpgen.tables.ldp_common import (MNIST_SETS, checkpoint_every, fit_generator, fit_on_release, generate,
                                     load_mnist_images, w2)

DELTA = 1e-5
RADIUS = {"laplace": 784.0, "gaussian": 28.0}  # max l1 / l2 norm of an image in [0, 1]^784
#: the random stream of each mechanism's release, fixed per mechanism: one release per mechanism, whatever else a
#: process trains. Until 2026-11-27 it was the number of rows made before it, which for the Gaussian release was 3
#: in a process that trained only ``gaussian_*`` (as the paper-length runs did) and 6 in one that trained or read
#: back the Laplace runs too: a split figure's table showed another draw than its Gaussian runs had trained on.
#: The values keep the paper-length runs' releases.
RELEASE_STREAM = {"laplace": 0, "gaussian": 3}
COLS = ("raw", "privatised", "wavelet_denoised", "wp_gan", "wavelet_wgan_gp", "entropic_wp_gan")


def compute(settings, run_root, data_root=None, seed=0, progress=True, dataset="mnist10k", select=None):
    """Rows and pictures of every column; the three trained columns of each mechanism (run folders
    ``run_root/<mechanism>_{wasserstein,entropic,wgan_gp}``) only where ``select`` (:class:`~dpgen.tables.declared.
    RunSelection`; default: all) trains them or finds them finished. ``settings``: the scale's sizes."""
    s = settings
    select = select or RunSelection()
    folder = Path(run_root)
    select.check([f"{m}_{k}" for m in ("laplace", "gaussian") for k in ("wasserstein", "entropic", "wgan_gp")])
    xtr, xte = load_mnist_images(data_root, dataset)
    ne = s["n_eval"]
    ref = xte[:ne].reshape(ne, -1).numpy()
    rows, pics, pending = [], {}, []
    for mech in ("laplace", "gaussian"):
        noise = s["noise"]
        eps = epsilon_for_noise_scale(mech, noise, RADIUS[mech], DELTA)
        z, sc = privatise(xtr.numpy(), mech, eps, DELTA, RADIUS[mech], project=False,
                          rng=np.random.default_rng([seed, 21, RELEASE_STREAM[mech]]))
        zimg = torch.tensor(z, dtype=torch.float32).reshape(xtr.shape)
        p, reg = matched_loss_params(mech, sc)
        base = {"mechanism": mech, "noise_scale": sc, "epsilon": eps, "delta": DELTA if mech == "gaussian" else 0.0}

        def add(col, imgs, detail="", sec=None):
            imgs = torch.as_tensor(imgs, dtype=torch.float32)
            rows.append({**base, "column": col, "w2_to_clean": w2(imgs[:ne].reshape(ne, -1).numpy(), ref),
                         "fid": None, "precision": None, "recall": None,
                         "detail": detail, "seconds": None if sec is None else round(sec, 1)})
            pending.append((rows[-1], col, imgs[:ne].reshape(ne, 1, 28, 28).clone()))
            pics[(mech, col)] = imgs[:8].reshape(-1, 1, 28, 28)

        add("raw", xtr, "clean training images (W2 to held-out clean: the sampling floor)")
        add("privatised", zimg, f"{mech} noise scale {sc:g}, no projection, sensitivity 2 x {RADIUS[mech]:g}")
        t0 = time.time()
        nt = s["n_tune"]
        best = tune_wavelet(z[:nt].reshape(nt, 28, 28), xtr[:nt].numpy().reshape(nt, 28, 28), sc)
        den = np.clip(wavelet_denoise(z.reshape(-1, 28, 28), best["wavelet"], best["level"], best["threshold"],
                                      best["mode"]), 0, 1)
        den_t = torch.tensor(den, dtype=torch.float32).reshape(xtr.shape)
        add("wavelet_denoised", den_t, f"{best['wavelet']} level {best['level']} {best['mode']} threshold "
            f"{best['threshold']:.3g}; mean l2 error {best['error']:.3g} (privatised: {best['error_noisy']:.3g})",
            time.time() - t0)
        for col, kind in (("wp_gan", "wasserstein"), ("entropic_wp_gan", "entropic")):
            if not select.wants(f"{mech}_{kind}", folder / f"{mech}_{kind}"):
                continue
            gen, sec, _ = fit_generator(
                zimg, kind, p, reg, generator="dcgan28", code_dim=100, steps=s["steps"], batch_size=s["batch"],
                lr=1e-3, optimizer="adam", seed=seed, progress=progress, preset="ldp_mnist_convergence",
                dataset=dataset,
                release={"method.mechanism": mech, "privacy.epsilon": eps, "method.radius": RADIUS[mech],
                         "method.project": "false"},
                run_dir=folder / f"{mech}_{kind}")
            add(col, generate(gen, ne), f"{kind} p={p}" + (f" lambda={reg:.3g}" if kind == "entropic" else "")
                + f", {s['steps']} steps of batch {s['batch']}", sec)
        if not select.wants(f"{mech}_wgan_gp", folder / f"{mech}_wgan_gp"):
            continue
        gen, sec, _ = fit_on_release(den_t, [  # WGAN-GP's paper settings: Adam lr 1e-4, betas (0.5, 0.9)
            "method=wgan_gp", f"dataset={dataset}", "task.eval_models=[]", "model.generator=dcgan28", "model.code_dim=100",
            "trainer.epochs=null", f"trainer.steps={s['wgan_steps']}", "trainer.batch_size=64", "trainer.lr=1e-4",
            "trainer.optimizer=adam", "trainer.betas=[0.5,0.9]", f"seed={seed}",
            f"trainer.checkpoint_every={checkpoint_every(s['wgan_steps'])}"], folder / f"{mech}_wgan_gp", progress)
        add("wavelet_wgan_gp", generate(gen, ne), f"WGAN-GP, {s['wgan_steps']} generator steps x 5 critic", sec)
    fill_fid(pending, s, dataset, xte, select, progress, cache_dir=folder / "fid_cells")
    return rows, pics


def fill_fid(pending, settings, dataset, x_test, select, progress=True, cache_dir=None):
    """FID cells of every column (``pending``: row, column, images), after this process's training. A mechanism
    gets them only when all three of its runs are here (trained or found finished): a process that trains the
    other mechanism's runs (``--rows``) leaves those cells to the process that trains them and says so. Each
    cell is kept in ``cache_dir`` (``<mechanism>_<column>_<images' digest>_<weights>.json``, atomically; the
    images are released or generated ones, never private records), so neither a second process, a rerun nor
    ``--collect-only`` repeats an hour of Inception; an interrupted pass continues from ``cache_dir/partial``."""
    if not settings.get("fid"):
        return
    waiting = sorted({name.split("_")[0] for name in select.missing})
    for row, col, imgs in pending:
        if row["mechanism"] in waiting:
            continue
        row.update(cached_column_fid(row["mechanism"], col, imgs, settings, dataset, x_test, progress, cache_dir))
    if waiting and pending:
        pending[0][0]["fid_missing"] = (
            f"the {' and '.join(waiting)} columns wait for their runs; the process that finishes them computes "
            "their FID (or the same command with --collect-only then)")


def cached_column_fid(mech, col, imgs, settings, dataset, x_test, progress=True, cache_dir=None):
    """:func:`column_fid`, read back from ``cache_dir`` when this column's images were measured before with the
    same Inception weights."""
    from dpgen.eval.fid import FIDUnavailable, _safe, content_digest, get_extractor
    from dpgen.utils.io import write_json

    if cache_dir is None or not settings.get("fid") or col == "raw":
        return column_fid(col, imgs, settings, dataset, x_test, progress)
    try:
        weights = get_extractor(device="cpu").weights_name
    except FIDUnavailable:  # column_fid names what is missing
        return column_fid(col, imgs, settings, dataset, x_test, progress)
    imgs = imgs.clamp(0, 1)
    path = Path(cache_dir) / f"{mech}_{col}_{content_digest(imgs)}_{_safe(weights)}.json"
    if path.exists():
        import json

        return json.loads(path.read_text())
    cells = column_fid(col, imgs, settings, dataset, x_test, progress, resume_dir=Path(cache_dir) / "partial")
    if cells.get("fid") is not None:
        write_json(path, cells)
    return cells


def column_fid(col, imgs, settings, dataset, x_test, progress=True, resume_dir=None):
    """FID / precision / recall of one column's images against the whole test split (``settings["fid"]``);
    None in the cells when off, for the raw column (private training images: nothing computed from them leaves)
    or without the Inception weights (``fid_missing``, outside the table's columns: its notes say why)."""
    from dpgen.tasks.generation import fid_of_images

    cells = {"fid": None, "precision": None, "recall": None}
    if not settings.get("fid") or col == "raw":
        return cells
    r = fid_of_images(imgs.clamp(0, 1), f"{dataset}_test", x_test.reshape(len(x_test), 1, 28, 28),
                      progress=progress, resume_dir=resume_dir)
    if r["fid"] is None:
        return {**cells, "fid_missing": r["fid_missing"]}
    return {"fid": r["fid"], "precision": r["precision"], "recall": r["recall"]}


def column_title(rows, mech, col, first=False):
    """A panel's title: the column, its W2 to clean and, where measured, its FID (``fid_protocol`` in the notes)."""
    row = next((r for r in rows if r.get("mechanism") == mech and r.get("column") == col), {})
    if col == "raw":  # the private training images: their W2 stays in the table, not on the picture
        row = {}
    scores = [f"{k} {row[key]:.{d}f}" for k, key, d in (("W2", "w2_to_clean", 2), ("FID", "fid", 1))
              if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])]
    return "\n".join([f"{mech} {col}" if first else col, *([" / ".join(scores)] if scores else [])])


def plot(rows, pics, settings, dataset="mnist10k"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torchvision.utils import make_grid

    fig, axes = plt.subplots(2, len(COLS), figsize=(2.2 * len(COLS), 5.0))
    for i, mech in enumerate(("laplace", "gaussian")):
        for j, col in enumerate(COLS):
            axes[i, j].axis("off")
            if (mech, col) not in pics:  # a run that has not finished (--rows / --collect-only)
                axes[i, j].text(0.5, 0.5, "not run yet", ha="center", va="center", fontsize=8)
            else:
                grid = make_grid(pics[(mech, col)].clamp(0, 1), nrow=2, pad_value=1.0)
                axes[i, j].imshow(grid.permute(1, 2, 0).numpy())
            axes[i, j].set_title(column_title(rows, mech, col, first=j == 0), fontsize=7)
    fig.suptitle(f"Entropic-LDP GAN Figure 2 on {dataset}")
    fig.tight_layout()
    return fig


def notes_for(rows, settings, scale, dataset="mnist10k"):
    s = settings
    val = {(r["mechanism"], r["column"]): r["w2_to_clean"] for r in rows}
    notes = [f"Setting ({scale}): {MNIST_SETS[dataset]}, noise scale {s['noise']} for both mechanisms, dcgan28 "
             f"generators, {s['steps']} steps (entropic / W_p, Adam lr 1e-3, batch {s['batch']}), WGAN-GP "
             f"{s['wgan_steps']} generator steps; W2 exact on {s['n_eval']} images vs as many held-out clean images.",
             "Paper (Figure 2, images only): wavelet denoising cannot recover the digits, GANs with the plain W_p or "
             "on wavelet-denoised data fail, the entropic W_p GAN produces digits."]
    missing = next((r["fid_missing"] for r in rows if r.get("fid_missing")), None)
    if s.get("fid"):
        notes.append(f"FID protocol: the same {s['n_eval']} images of each column vs the whole {dataset} test split "
                     "(pytorch-fid's Inception, features of the test split cached); precision / recall k = 5; "
                     "the raw column (private training images) gets none."
                     + (f" Not computed: {missing}" if missing else ""))
    else:
        notes.append(f"FID: off at the {scale} scale (the paper scale computes it).")
    for mech in ("laplace", "gaussian"):
        have = [c for c in COLS if (mech, c) in val]
        order = sorted((c for c in COLS[2:] if (mech, c) in val), key=lambda c: val[(mech, c)])
        # the sampling floor: clean training images are this far from as many held-out clean images
        below = [c for c in order if (mech, "raw") in val and val[(mech, c)] < val[(mech, "raw")]]
        if len(have) < len(COLS):
            best = (f". Not run yet: {', '.join(c for c in COLS if c not in have)} (no best named until they "
                    f"are).")
        elif len(below) >= 2:
            best = (f". {' and '.join(below)} are closer to the held-out images than the clean training images "
                    f"themselves are (raw {val[(mech, 'raw')]:.3g}): W2 on {s['n_eval']} images in 784-D, mostly "
                    f"finite-sample bias, cannot rank them; the figure's images decide between them.")
        else:
            best = f". Best of the denoisers/generators: {order[0]}."
        notes.append(f"{mech}: W2 to clean -- " + ", ".join(f"{c} {val[(mech, c)]:.3g}" for c in have) + best)
    return notes

