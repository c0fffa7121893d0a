"""``task=generation``: a generator trained by the one loop (dpgen.train.loop) on a private set.

Per step the method draws the real batch (``sample_batch``: its sampling scheme is what its
accountant assumes); its ``step`` draws the generated batch with labels uniform (never the private
labels), applies its privacy mechanism to the real side and sets the generator's gradients. After
training: ``samples.png`` (8 rows; with labels, column j shows class j), downstream classifiers
trained on synthetic samples and tested on the real test split (``task.eval_models``) beside the
class-mean baseline and the intra-class spread ratio (dpgen.eval.fidelity), FID with precision / recall / density /
coverage (``task.fid``: auto computes them when the Inception weights are installed). The test split is read only then: nothing is selected or stopped on it.
``task.protocol=dpimagebench`` adds DPImageBench's evaluation beside these (dpgen.eval.dpimagebench: FID and
precision / recall against the private training split, which the privacy report lists under not_covered, and their
ResNet with the epoch kept on synthetic validation), in metrics.json's ``dpimagebench``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from dpgen.tasks.registry import trainable
from dpgen.train.loop import Task


@dataclass
class GenerationBatch:
    """One step's data: the real private batch (None when a Poisson batch is empty), the size of
    the generated batch, the device it is drawn on and, for a padded batch, its record mask."""

    real: Optional[torch.Tensor]
    y: Optional[torch.Tensor]
    size: int
    device: torch.device
    #: trainer.static_shapes: which rows of the padded ``real`` are records (None: all of them)
    mask: Optional[torch.Tensor] = None


@trainable
class GenerationTask(Task):
    name = "generation"

    def reads_training_records(self, cfg) -> Optional[str]:
        # DPImageBench's FID and precision / recall are computed against the training records
        return "dpimagebench" if cfg.task.protocol == "dpimagebench" else None

    def setup(self, cfg, device) -> None:
        from dpgen.data.private import PrivateData
        from dpgen.methods.registry import method_class

        method_class(cfg, "generation")  # a method this task trains, before any data is read
        self.fid_missing = fid_unavailable(cfg)
        self.fid_on = fid_enabled(cfg)
        if self.fid_missing:  # said before training, not found after it
            print(f"[dpgen] WARNING: task.fid=true, but FID cannot be computed here: {self.fid_missing}. The run "
                  "continues; its summary and metrics.json say fid: n/a (task.fid=false silences this)",
                  file=sys.stderr, flush=True)

        self.device = device
        # the private records: only through their owner (dpgen.data.private), which hands out batches, never sizes
        self.data = PrivateData(cfg.dataset, "train", device)
        self.n_private = self.data.n  # declared, public: q, epochs, n_synthetic (dpgen.train.loop)
        self.shape = self.data.shape
        self.num_classes = self.data.num_classes
        self.in_memory = self.data.in_memory
        # a private method maps a record whose label is out of range to a zero contribution (dpgen.utils.labels),
        # so refusing the run would itself tell D from D plus such a record; a non-private one is refused here,
        # once, so that no training step reads labels on the host
        if not cfg.method.private and not self.data.labels_in_range():
            raise ValueError(f"{cfg.dataset.name}: some labels lie outside [0, {self.num_classes - 1}] "
                             f"({self.num_classes} classes): check dataset.num_classes or the label file")

    def build(self, cfg, steps: int, device):
        from dpgen.methods.registry import DataInfo, build
        from dpgen.models import generator_from_config
        from dpgen.models.generators import apply_memory_format

        method = build(cfg, DataInfo(self.n_private, self.shape, self.num_classes), steps, "generation")
        self.capacity = None
        if cfg.trainer.static_shapes:  # every batch padded to one capacity, from public facts only
            from dpgen.data.private import poisson_capacity

            if not method.takes_masked_batch:
                raise ValueError(f"trainer.static_shapes=true: {cfg.method.name} does not take a padded batch with "
                                 "a record mask (dpsinkhorn with method.clip_mode=batch does, the paper's recipe); "
                                 "set trainer.static_shapes=false")
            b = cfg.trainer.batch_size
            q = method.sample_rate if method.sample_rate is not None else b / self.n_private
            self.capacity = poisson_capacity(q * self.n_private) if method.sampling == "poisson" else b
        if not self.in_memory and method.needs_whole_set:
            raise ValueError(f"{cfg.method.name} with these settings transforms the whole private set before training "
                             f"(e.g. method.center=dp_mean); {cfg.dataset.name} is read lazily: set method.center=none")
        gen = generator_from_config(cfg.model, self.shape, self.num_classes).to(device)
        apply_memory_format(gen, str(cfg.model.memory_format), device)
        fake_batch = getattr(cfg.method, "fake_batch", None)  # dpsinkhorn's generated samples a step (null: the batch)
        drawn, name = (fake_batch, "method.fake_batch") if fake_batch else (cfg.trainer.batch_size, "trainer.batch_size")
        if drawn < 2 and any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in gen.modules()):
            raise ValueError(f"{name}={drawn}: the generator ({cfg.model.generator}) has batch normalisation, which "
                             f"needs at least 2 generated samples per step; use {name} >= 2")
        return method, {"generator": gen}

    def prepare(self, method, output_dir: Path) -> bool:
        if not self.in_memory:
            return False
        # a method may transform the whole set once (a DP mean, local privatisation), under its own ledger
        self.data.replace(*method.prepare_data(*self.data.whole(), output_dir))
        return True

    def next_batch(self, method, sampler_gen, step: int, target_steps: int):
        b = self.cfg.trainer.batch_size
        if self.capacity is not None:  # trainer.static_shapes: the same draw, padded, with its record mask
            drawn = self.data.static_batch(method, b, sampler_gen, self.capacity)
            if drawn is not None:
                return GenerationBatch(drawn[0], drawn[1], b, self.device, mask=drawn[2])
            return GenerationBatch(None, None, b, self.device) if method.private else None
        drawn = self.data.batch(method, b, sampler_gen)
        if drawn is None:  # an empty batch: nothing to learn; a private method still releases its noise
            return GenerationBatch(None, None, b, self.device) if method.private else None
        return GenerationBatch(*drawn, b, self.device)

    quick_overrides = "trainer.steps=<fewer> task.n_synthetic=<fewer> task.eval_models=[logreg]"

    def evaluation_estimate(self, cfg, n_test: Optional[int] = None, real_cached: bool = False,
                            evaluating: bool = False):
        """(seconds on a CPU, what): the classifiers on the synthetic set, and the fidelity pass over its generated
        images and (unless ``real_cached``) the real test images' features; ``n_test``: the test split's size when
        known (else the declared ``dataset.n_test``, else 10,000). ``evaluating``: for ``task=evaluate`` of this
        run, whose overrides are task.eval_models and task.fid_samples (what the text suggests)."""
        from dpgen.eval.downstream import estimate_seconds
        from dpgen.utils.device import resolve_device

        models = list(cfg.task.eval_models or [])
        device = resolve_device(cfg.trainer.device)
        secs, parts = 0.0, []
        if models:
            n_syn = n_synthetic(cfg.task, self.n_private)
            secs = estimate_seconds(models, n_syn, self.shape, cfg.task.eval_max_epochs, device=device)
            names = {"logreg": "LogReg", "mlp": "MLP", "cnn": "CNN"}
            parts.append(f"{'/'.join(names.get(m, m) for m in models)} on {n_syn:,} synthetic samples (up to "
                         f"{cfg.task.eval_max_epochs} epochs each; "
                         + ("task.eval_models changes that)" if evaluating else
                            "task.n_synthetic and task.eval_models change that)"))
        if fid_enabled(cfg) and len(self.shape) == 3 and device.type == "cpu":
            from dpgen.eval.fid import estimate_seconds as fid_seconds

            c = fid_counts(cfg.task, n_test or int(cfg.dataset.n_test or 0) or 10000, device)
            secs += fid_seconds(c.generated + (0 if real_cached else c.real))
            parts.append(f"fidelity, {c.protocol} protocol, on {c.describe()}"
                         + ("" if real_cached else " (the real images' features once, then cached)")
                         + ("; task.fid_samples=<fewer> changes that" if evaluating else
                            "; task.fid_samples=<fewer> or task.fid=false change that" if c.protocol == "quick"
                            else "; task.fidelity=quick, task.fid_samples=<fewer> or task.fid=false change that"))
        if cfg.task.protocol == "dpimagebench" and device.type == "cpu":
            from dpgen.eval.dpimagebench import estimate_seconds as dib_seconds

            s, what = dib_seconds(cfg.task.dpimagebench, self.shape, self.n_private, fid_enabled(cfg))
            secs += s
            parts.append(what)
        return secs, "; ".join(parts)

    def evaluate(self, cfg, models, method, device, output_dir: Path) -> Dict[str, Any]:
        from dpgen.data import as_tensors, load_split
        from dpgen.models import count_parameters, released_generator

        gen = models["generator"]
        m: Dict[str, Any] = {"generator": type(gen).__name__, "generator_parameters": count_parameters(gen)}
        if cfg.task.protocol != "papers":  # the run's privacy report (metrics.json, checkpoints) names it as not
            m["protocol"] = cfg.task.protocol  # covered: reads_training_records
        gen = released_generator(gen, cfg.model)  # model.sharpen: what is evaluated is what a release draws
        if gen is not models["generator"]:
            m["sharpen"] = {"slope": gen.k, "at": gen.at}
        test = as_tensors(load_split(cfg.dataset, "test"))  # read once: the classifiers and the fidelity pass
        self.say_estimate(cfg, device, test[0])
        with torch.no_grad():  # 8 rows; with labels, column j shows class j
            k = self.num_classes
            y_grid = torch.arange(k, device=device).repeat(8) if k else None
            xg, _ = gen.sample(8 * (k or 8), y=y_grid, device=device,
                               generator=torch.Generator(device=device).manual_seed(cfg.seed + 1))
            if len(self.shape) == 3:
                save_grid(xg, output_dir / "samples.png", nrow=k or 8)
                m["samples_png"] = str(output_dir / "samples.png")
        if cfg.task.eval_models:
            m["downstream"] = evaluate_generator(cfg, gen, self.shape, device, n_private=self.n_private, test=test)
        elif k:  # no classifiers: still the class-mean baseline and the spread (on at most 2,000 samples)
            m["downstream"] = fidelity_without_classifiers(cfg, gen, device, self.n_private, test=test)
        if self.fid_on:
            self.part_done(m, left="the fidelity pass (FID, KID, precision / recall)")
            m.update(fid_of_generator(cfg, gen, self.shape, device, progress=bool(cfg.trainer.progress),
                                      resume_dir=output_dir / "fid_partial", test=test))
        elif cfg.task.fid == "auto" and len(self.shape) == 3:
            m.update({"fid": None, "fid_missing": "task.fid=auto and the FID Inception weights are not installed "
                                                  "(make fid-weights installs them)"})
        if cfg.task.protocol == "dpimagebench":
            from dpgen.eval import dpimagebench

            self.part_done(m, left="DPImageBench's protocol (their ResNet; FID, precision / recall vs the training split)")
            m["dpimagebench"] = dpimagebench.evaluate(cfg, gen, self.shape, device, self.n_private, test, synthetic_set,
                                                      self.fid_on, progress=bool(cfg.trainer.progress))
        return m

    def say_estimate(self, cfg, device, x_test) -> None:
        """Before an evaluation of more than a minute: what it does, about how long, how to shorten it."""
        real_cached = False
        if self.fid_on and len(self.shape) == 3 and torch.device(device).type == "cpu":
            from dpgen.eval.fid import FIDUnavailable, features_cached, get_extractor

            c = fid_counts(cfg.task, len(x_test), device)
            try:
                real_cached = features_cached(f"{cfg.dataset.name}_test", real_subset(x_test, c.real),
                                              get_extractor(device=str(device)).weights_name)
            except FIDUnavailable:
                pass
        secs, what = self.evaluation_estimate(cfg, n_test=len(x_test), real_cached=real_cached)
        if secs > EVAL_NOTICE_S and what:
            print(f"[dpgen] evaluation: {what}: about {_duration(secs)} on this CPU", flush=True)

    def summary(self, m: Dict[str, Any], out: Path) -> None:
        from dpgen.privacy.report import PrivacyReport

        p = m["privacy"]
        rep = PrivacyReport.of(p, m.get("method"))  # a private report without epsilon_spent or delta is refused
        print(f"\n{m['method']} on {m['dataset']}: {m['steps']} steps ({m['stop_reason']}), "
              f"{m['train_seconds']:.1f} s training on {m['device']}")
        if rep.private and "noise_scale" in p:  # a local mechanism (entropic_ldp): one release, per record
            print(f"  privacy: ({rep.epsilon:g}, {rep.delta:.3g})-LDP per record, {p['mechanism']}; "
                  "independent of the training steps (Remark 1)")
        elif rep.private:
            q = f"q={rep.sample_rate:.4g}" if rep.sample_rate is not None else "q not stated"
            detail = (f"{p['bound']} bound, k={p['k']}, rows: {p['row_bound']}" if "bound" in p else
                      "one release before training, the steps are post-processing" if p.get("depends_on_steps") is False
                      else f"{p.get('sampling', '')} sampling, {q}")
            budget = f"{rep.epsilon_budget:g}" if rep.epsilon_budget is not None else "n/a"
            print(f"  privacy: epsilon spent {rep.epsilon:.4f} of {budget} at delta {rep.delta:.3g} "
                  f"({rep.noise_text()}, {detail})")
            if isinstance(p.get("epsilon_with_settings_choice"), (int, float)):
                print(f"  with the choice of its settings on these records (privacy.selection_cost): epsilon "
                      f"{p['epsilon_with_settings_choice']:.4f} at delta {rep.delta:.3g} (its report's not_covered)")
            check = p.get("cross_check") or {}
            if check.get("passed") is not None:  # the charged epsilon is the one above; the others only check it
                others = ", ".join(f"{k} {v:.4f}" for k, v in (p.get("epsilon_cross_check") or {}).items())
                print(f"  cross-check ({others}): {'passed' if check['passed'] else 'FAILED'}, {check['rule']}; "
                      "the epsilon charged is the one above")
            if p.get("validation_holdout"):  # the held-out records, unread: where a setting may be chosen
                print(f"  held out: {p['validation_holdout'].split(':')[0]}, never read by this run; choose a contrast "
                      f"curve there under its own epsilon: python scripts/select_on_validation.py {out}")
        else:
            print("  privacy: none (non-private baseline)")
        ds = m.get("downstream") or {}
        for name, r in ds.items():
            if isinstance(r, dict) and "test_acc" in r and name != "class_mean":
                print(f"  downstream {name}: {r['test_acc']:.2f}% on the real test split ({ds['n_test']} "
                      f"records), trained on {ds['n_synthetic']} synthetic samples ({r.get('time_s', 0):.1f} s)")
        k = ds.get("n_classes")
        if k:
            print(f"  chance level: {100.0 / k:.1f}%")
        if isinstance(ds.get("class_mean"), dict):
            print(f"  class-mean baseline: {ds['class_mean']['test_acc']:.2f}% (nearest of the {f'{k} ' if k else ''}"
                  f"synthetic class means): a classifier above it adds something beyond {k or 'the'} class averages")
        if "spread_ratio" in ds:
            print(f"  intra-class spread, synthetic / real test: {ds['spread_ratio']:.3f} (1: as varied as the real "
                  "test records; near 0: one template a class)")
        if ds.get("compare_with"):
            print(f"  compare with: {ds['compare_with']}")
        if "fid" in m:
            for line in fidelity_lines(m):
                print(line)
        if isinstance(m.get("dpimagebench"), dict):
            from dpgen.eval.dpimagebench import summary_lines

            for line in summary_lines(m["dpimagebench"]):
                print(line)
        if "eval_seconds" in m:
            print(f"  evaluation: {m['eval_seconds']:.1f} s; {m.get('threads', '')}")
        print(f"  files: {out / 'metrics.json'}" + (f", {m['samples_png']}" if "samples_png" in m else ""))


def fidelity_lines(m: Dict[str, Any]) -> list:
    """The summary's fidelity lines: which protocol ran (its counts, estimator, features), its headline (quick:
    KID, unbiased at any count; full: FID) and the other numbers of the same feature pass."""
    fid = m.get("fid")
    if not isinstance(fid, (int, float)):
        return [f"  FID: n/a ({str(m.get('fid_missing', 'not computed')).split(';')[0]}; metrics.json says more)"]
    n_gen, n_real = int(m.get("fid_samples") or 0), int(m.get("fid_real_images") or 0)
    n_test = int(m.get("fid_test_split") or n_real)
    counts = f"{n_gen:,} generated vs {n_real:,} real test images" + (f" (of {n_test:,})" if n_test > n_real else "")
    kid_t = f"KID {m['kid']:.4f} +- {m['kid_se']:.4f}" if isinstance(m.get("kid"), (int, float)) else "KID n/a"
    prdc_t = (f"  precision {m['precision']:.3f}, recall {m['recall']:.3f}, density {m['density']:.3f}, coverage "
              f"{m['coverage']:.3f} (the same features)") if "precision" in m else ""
    if m.get("fidelity_protocol") == "quick":
        full = min(10000, 5 * n_test)
        lines = [f"  fidelity, quick protocol (task.fidelity=auto on a CPU): {kid_t} on {counts}, Inception v3 pool "
                 "features; KID is unbiased at any count, so it compares with KIDs at other counts",
                 f"  FID at this count: {fid:.2f} (biased upward below thousands of images: compare FIDs at equal "
                 f"counts only; task.fidelity=full for FID on {full:,} generated vs all {n_test:,}, about "
                 f"{_minutes(full + (n_test if n_test > n_real else 0))} on this CPU)"]  # the whole split: cached
    else:
        lines = [f"  FID: {fid:.2f} ({counts}, Inception v3 pool features, full protocol); {kid_t}"]
    return lines + ([prdc_t] if prdc_t else [])


def _minutes(n_images: int) -> str:
    from dpgen.eval.fid import estimate_seconds

    return _duration(estimate_seconds(n_images))


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


#: an evaluation expected to take longer than this (seconds, on a CPU) says what it does and for how long first
EVAL_NOTICE_S = 60.0


def save_grid(images: torch.Tensor, path: Path, nrow: int = 10, scale: int = 3) -> None:
    """Save a grid of images in [0, 1] (N, C, H, W) as PNG (atomically), each pixel ``scale`` x
    ``scale`` (nearest neighbour: small digits stay legible). PIL only: no matplotlib import."""
    import io

    from PIL import Image
    from torchvision.utils import make_grid

    from dpgen.utils.io import atomic_write_bytes

    grid = make_grid(images.detach().cpu().float().clamp(0, 1), nrow=nrow, padding=1, pad_value=1.0)
    arr = (grid * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    img = Image.fromarray(arr[..., 0] if images.shape[1] == 1 else arr)
    img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())


def n_synthetic(task, n_private: int) -> int:
    """Synthetic samples the downstream classifiers train on: task.n_synthetic, else min(60000, 10 N)."""
    return int(task.n_synthetic) if task.n_synthetic else min(60000, 10 * n_private)


#: where a run's numbers can be compared with measured ones: dataset -> the page that holds them (a summary states
#: what this run measured; the measurements it compares with live in the docs, with their dates and commands)
COMPARE_WITH = {
    "digits": "docs/DEFAULT.md (the embedded default's measured runs)",
    "mnist": "docs/RESULTS.md (the papers' cells and ours)",
    "fashion_mnist": "docs/RESULTS.md (the papers' cells and ours)",
}


def synthetic_set(gen, n: int, seed: int, device) -> tuple:
    """``n`` samples (x, y on the CPU) drawn in chunks of 1,000 from ``gen`` seeded ``seed``: the set the
    downstream evaluation trains on (seed: the run's seed + 2), and what ``dpgen sample`` releases."""
    xs, ys = [], []
    g = torch.Generator(device=device).manual_seed(int(seed))
    with torch.no_grad():
        for i in range(0, n, 1000):
            x, y = gen.sample(min(1000, n - i), generator=g, device=device)
            xs.append(x.cpu())
            ys.append(y.cpu())
    return torch.cat(xs), torch.cat(ys)


def _test_split(cfg, test):
    """(x, y) of the real test split: ``test`` when the caller has read it already."""
    from dpgen.data import as_tensors, load_split

    return test if test is not None else as_tensors(load_split(cfg.dataset, "test"))


def evaluate_generator(cfg, gen, shape, device, n_private: int, test=None) -> Dict[str, Any]:
    """Downstream classifiers trained on synthetic samples, tested on the real test split (``test``: its (x, y)
    when read already)."""
    from dpgen.eval import evaluate_downstream

    task = cfg.task
    X_test, Y_test = _test_split(cfg, test)
    n_syn = n_synthetic(task, n_private)
    x_syn, y_syn = synthetic_set(gen, n_syn, cfg.seed + 2, device)
    res = evaluate_downstream(x_syn, y_syn, X_test, Y_test, models=tuple(task.eval_models),
                              image_shape=tuple(shape) if len(shape) == 3 else None,
                              max_epochs=task.eval_max_epochs, seed=cfg.seed, device=str(device),
                              progress=bool(cfg.trainer.progress),
                              logreg_solver=task.logreg_solver)
    res["n_synthetic"] = n_syn
    if res.get("n_classes"):  # what the class averages give, and how much the samples vary within a class
        from dpgen.eval.fidelity import set_fidelity

        res.update(set_fidelity(x_syn, y_syn, X_test, Y_test, seed=cfg.seed))
    if cfg.dataset.name in COMPARE_WITH:
        res["compare_with"] = COMPARE_WITH[cfg.dataset.name]
    res["n_test"] = int(X_test.shape[0])
    return res


FID_PROTOCOL = ("pytorch-fid's FID Inception v3 (2048-d pool features; grayscale repeated to 3 channels, bilinear "
                "resize to 299 x 299); reference: real test images (the whole split, or a seeded subset), their "
                "features cached under outputs/fid_stats keyed by content")


def fidelity_without_classifiers(cfg, gen, device, n_private: int, test=None) -> Dict[str, Any]:
    """The class-mean baseline and spread ratio of a run that trains no classifier (task.eval_models=[]: a run that
    asked for a quick evaluation), on at most 2,000 samples and 10 per test image (at least 20 a class): a
    comparison with the test split needs no more, and a large generator on a CPU draws 500 a minute."""
    from dpgen.eval.fidelity import set_fidelity

    X_test, Y_test = _test_split(cfg, test)
    k = int(gen.num_classes or cfg.dataset.num_classes or 1)
    n = min(n_synthetic(cfg.task, n_private), 2000, max(10 * len(X_test), 20 * k))
    x_syn, y_syn = synthetic_set(gen, n, cfg.seed + 2, device)
    return {"n_synthetic": n, "n_test": int(X_test.shape[0]), **set_fidelity(x_syn, y_syn, X_test, Y_test, cfg.seed)}


#: task.fidelity=quick: generated images, and real test images at most (a seeded subset of a larger split). KID
#: at 300 generated reads as at 1,800 (dpgen's default on digits: 0.0217 +- 0.0009 over 12 draws of 300, 0.0218 at
#: 1,800; FID 48.0 +- 1.2 at 300, 43.9 at 1,800; experiments/fid/kid_vs_fid_sample_size_default_2026-12-05.json)
QUICK_GENERATED, QUICK_REAL = 300, 1000


@dataclass(frozen=True)
class FidelityCounts:
    """What a fidelity pass compares: ``protocol`` (quick: KID is the headline; full: FID), ``generated``
    images against ``real`` of the ``n_test`` test images."""

    protocol: str
    generated: int
    real: int
    n_test: int

    def describe(self) -> str:
        part = "the whole test split" if self.real == self.n_test else f"a seeded {self.real:,} of its {self.n_test:,}"
        return f"{self.generated:,} generated vs {self.real:,} real test images ({part})"


def fidelity_protocol(task, device) -> str:
    """task.fidelity, with auto resolved: full on a GPU or when task.fid_samples is set, else quick (a CPU)."""
    p = str(task.fidelity)
    if p != "auto":
        return p
    return "full" if task.fid_samples or torch.device(device).type != "cpu" else "quick"


def fid_counts(task, n_test: int, device="cpu") -> FidelityCounts:
    """The images a fidelity pass compares. quick: task.fid_samples or 300 generated vs at most task.fid_real or
    1,000 real test images; full: task.fid_samples or min(10,000, 5 x the test split) generated vs task.fid_real
    or the whole test split."""
    protocol, n_test = fidelity_protocol(task, device), int(n_test)
    fid_real = task.fid_real
    if protocol == "quick":
        gen = int(task.fid_samples) if task.fid_samples else QUICK_GENERATED
        real = min(n_test, int(fid_real) if fid_real else QUICK_REAL)
    else:
        gen = int(task.fid_samples) if task.fid_samples else min(10000, 5 * n_test)
        real = min(n_test, int(fid_real)) if fid_real else n_test
    return FidelityCounts(protocol, gen, real, n_test)


def real_subset(x_test: torch.Tensor, n: int) -> torch.Tensor:
    """``n`` of the test images, a seeded subset (the same on every run, so that their features are cached once),
    in their order; all of them when ``n`` is not smaller."""
    if n >= len(x_test):
        return x_test
    idx = torch.randperm(len(x_test), generator=torch.Generator().manual_seed(0))[:n].sort().values
    return x_test[idx]


def cache_test_features(dataset: str = "digits", protocol: str = "quick") -> str:
    """Compute and cache the Inception features of ``dataset``'s real test images that ``protocol`` compares with
    on a CPU (``make fid-reference``, run by ``make install``: the default's first run then finds them); returns
    what it did. Public test splits only: never run on private records."""
    from dpgen.config import compose_config
    from dpgen.eval.fid import features_cached, get_extractor, real_features
    from dpgen.utils.io import outputs_dir

    cfg = compose_config([f"dataset={dataset}", f"task.fidelity={protocol}"])
    x_test = _test_split(cfg, None)[0]
    c = fid_counts(cfg.task, len(x_test), "cpu")
    real, ext = real_subset(x_test, c.real), get_extractor(device="cpu")
    name = f"{cfg.dataset.name}_test"
    if features_cached(name, real, ext.weights_name):
        return f"{name}: the features of {c.real:,} test images are cached already"
    real_features(name, real, outputs_dir() / "fid_stats", extractor=ext, image_shape=tuple(cfg.dataset.shape))
    return f"{name}: cached the features of {c.real:,} test images under {outputs_dir() / 'fid_stats'}"


def fid_enabled(cfg) -> bool:
    """Whether this run computes FID: task.fid true, or auto with the Inception weights installed."""
    if cfg.task.fid == "auto":
        return not _weights_missing()
    return bool(cfg.task.fid)


def _weights_missing() -> str:
    from dpgen.eval.fid import FIDUnavailable, find_fid_weights

    try:
        find_fid_weights()
    except FIDUnavailable as e:
        return " ".join(str(e).split()).rstrip(".")
    return ""


def fid_unavailable(cfg) -> str:
    """Why ``task.fid=true`` cannot give a FID on this machine ("" when it can, or when FID is off or auto)."""
    if cfg.task.fid is not True:
        return ""
    return _weights_missing()


def fid_of_generator(cfg, gen, shape, device, progress: bool = False, resume_dir=None, *, n: Optional[int] = None,
                     seed: Optional[int] = None, test=None) -> Dict[str, Any]:
    """FID, KID (dpgen.eval.kid) and precision / recall / density / coverage (dpgen.eval.fidelity.prdc) of the
    generated images against the real test images that :func:`fid_counts` names; ``{"fid": None, "fid_missing": reason}`` when they cannot be
    computed. The test split's Inception features are computed once and cached (outputs/fid_stats). With
    ``resume_dir`` (the run folder's ``fid_partial/``) the generated images' features are saved as they are
    computed, and an interrupted pass continues there (the same generator and seed draw the same images)."""
    from dpgen.eval.fid import FIDUnavailable, get_extractor

    if len(shape) != 3:
        return {"fid": None, "fid_missing": f"FID needs images; {cfg.dataset.name} rows have shape {shape}"}
    try:
        get_extractor(device=str(device))  # the weights first: no images drawn without them
    except FIDUnavailable as e:
        return {"fid": None, "fid_missing": " ".join(str(e).split())}
    x_test = _test_split(cfg, test)[0]
    # n, seed: another draw (scripts/fid_draws.py), against the whole test split
    counts = (fid_counts(cfg.task, len(x_test), device) if n is None
              else FidelityCounts("full", int(n), len(x_test), len(x_test)))
    n = counts.generated
    g = torch.Generator(device=device).manual_seed(cfg.seed + 3 if seed is None else int(seed))
    with torch.no_grad():
        fake = torch.cat([gen.sample(min(500, n - i), generator=g, device=device)[0].cpu()
                          for i in range(0, n, 500)])
    out = fid_of_images(fake, f"{cfg.dataset.name}_test", real_subset(x_test, counts.real), device, progress,
                        resume_dir, tuple(shape))
    if out.get("fid") is not None:
        out.update(fidelity_protocol=counts.protocol, fid_test_split=counts.n_test)
    return out


def fid_of_images(fake, real_name: str, x_real, device="cpu", progress: bool = False, resume_dir=None,
                  image_shape=None) -> Dict[str, Any]:
    """FID and precision / recall / density / coverage of the images ``fake`` (a released set, or generated:
    never private records) against the evaluation images ``x_real`` (a test split; its features cached under
    outputs/fid_stats as ``real_name``); ``{"fid": None, "fid_missing": reason}`` without the Inception weights."""
    from dpgen.eval.fid import FIDUnavailable, activation_statistics, frechet_distance, get_extractor, real_features
    from dpgen.config import FIDELITY_MIN_IMAGES
    from dpgen.eval.fidelity import PRDC_K, PRDC_MAX_SAMPLES, prdc
    from dpgen.eval.kid import KID_PROTOCOL, kid
    from dpgen.utils.io import outputs_dir

    try:
        ext = get_extractor(device=str(device))
        real = real_features(real_name, x_real, outputs_dir() / "fid_stats", extractor=ext, progress=progress)
        act = ext(fake, image_shape, progress=progress, name="synthetic", resume_dir=resume_dir)
    except FIDUnavailable as e:
        return {"fid": None, "fid_missing": " ".join(str(e).split())}
    n, (h, w) = len(act), (tuple(image_shape) if image_shape else tuple(fake.shape))[-2:]
    out = {"fid": frechet_distance(*activation_statistics(act), *activation_statistics(real)), "fid_samples": n,
           "fid_real_images": int(len(real)),
           "fid_protocol": f"{n} generated vs {len(real)} real test images ({h} x {w}); " + FID_PROTOCOL}
    if min(n, len(real)) >= FIDELITY_MIN_IMAGES:  # KID on the same features: unbiased at any count
        out.update(kid(act, real))
        out["kid_protocol"] = f"{out['kid_generated']} generated vs {out['kid_real']} real; {KID_PROTOCOL}"
    out.update(prdc(real, act))
    out["prdc"] = (f"k = {PRDC_K}, Inception features, at most {PRDC_MAX_SAMPLES} a side: "
                   f"{min(len(real), PRDC_MAX_SAMPLES)} real, {min(n, PRDC_MAX_SAMPLES)} generated")
    return out
