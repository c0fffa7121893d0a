"""``task=generation``: a generator trained by the one loop (dpgen.train.loop) on a private set.

Per step the method draws the real batch (``sample_batch``: its sampling scheme is what its
accountant assumes); its ``step`` draws the generated batch with labels uniform (never the private
labels), applies its privacy mechanism to the real side and sets the generator's gradients. After
training: ``samples.png`` (8 rows; with labels, column j shows class j), downstream classifiers
trained on synthetic samples and tested on the real test split (``task.eval_models``) beside the
class-mean baseline and the intra-class spread ratio (dpgen.eval.fidelity), FID with precision / recall / density /
coverage (``task.fid``: auto computes them when the Inception weights are installed). The test split is read only then: nothing is selected or stopped on it.
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
    the generated batch and the device it is drawn on."""

    real: Optional[torch.Tensor]
    y: Optional[torch.Tensor]
    size: int
    device: torch.device


@trainable
class GenerationTask(Task):
    name = "generation"

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
        if not self.in_memory and method.needs_whole_set:
            raise ValueError(f"{cfg.method.name} with these settings transforms the whole private set before training "
                             f"(e.g. method.center=dp_mean); {cfg.dataset.name} is read lazily: set method.center=none")
        gen = generator_from_config(cfg.model, self.shape, self.num_classes).to(device)
        apply_memory_format(gen, str(getattr(cfg.model, "memory_format", "auto")), device)
        if cfg.trainer.batch_size < 2 and any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                                              for m in gen.modules()):
            raise ValueError(f"trainer.batch_size={cfg.trainer.batch_size}: the generator ({cfg.model.generator}) has "
                             "batch normalisation, which needs at least 2 generated samples per step; use "
                             "trainer.batch_size >= 2")
        return method, {"generator": gen}

    def prepare(self, method, output_dir: Path) -> bool:
        if not self.in_memory:
            return False
        # a method may transform the whole set once (a DP mean, local privatisation), under its own ledger
        self.data.replace(*method.prepare_data(*self.data.whole(), output_dir))
        return True

    def next_batch(self, method, sampler_gen, step: int, target_steps: int):
        b = self.cfg.trainer.batch_size
        drawn = self.data.batch(method, b, sampler_gen)
        if drawn is None:  # an empty batch: nothing to learn; a private method still releases its noise
            return GenerationBatch(None, None, b, self.device) if method.private else None
        return GenerationBatch(*drawn, b, self.device)

    quick_overrides = "trainer.steps=<fewer> task.n_synthetic=<fewer> task.eval_models=[logreg]"

    def evaluation_estimate(self, cfg):
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
                         f"{cfg.task.eval_max_epochs} epochs each; task.n_synthetic and task.eval_models change that)")
        if fid_enabled(cfg) and len(getattr(self, "shape", cfg.dataset.shape or ())) == 3 and device.type == "cpu":
            from dpgen.eval.fid import estimate_seconds as fid_seconds

            n_fid = fid_samples(cfg.task, int(cfg.dataset.n_test or 0) or 10000)
            secs += fid_seconds(n_fid)
            parts.append(f"FID on {n_fid:,} generated images (Inception at 299 x 299; the test split's features once "
                         "more when not cached; task.fid=false or task.fid_samples change that)")
        return secs, "; ".join(parts)

    def evaluate(self, cfg, models, method, device, output_dir: Path) -> Dict[str, Any]:
        from dpgen.models import count_parameters

        from dpgen.models import released_generator

        gen = models["generator"]
        m: Dict[str, Any] = {"generator": type(gen).__name__, "generator_parameters": count_parameters(gen)}
        gen = released_generator(gen, cfg.model)  # model.sharpen: what is evaluated is what a release draws
        if gen is not models["generator"]:
            m["sharpen"] = {"slope": gen.k, "at": gen.at}
        with torch.no_grad():  # 8 rows; with labels, column j shows class j
            k = self.num_classes
            y_grid = torch.arange(k, device=device).repeat(8) if k else None
            xg, _ = gen.sample(8 * (k or 8), y=y_grid, device=device,
                               generator=torch.Generator(device=device).manual_seed(cfg.seed + 1))
            if len(self.shape) == 3:
                save_grid(xg, output_dir / "samples.png", nrow=k or 8)
                m["samples_png"] = str(output_dir / "samples.png")
        if cfg.task.eval_models:
            m["downstream"] = evaluate_generator(cfg, gen, self.shape, device, n_private=self.n_private)
        elif k:  # no classifiers: still the class-mean baseline and the spread (on at most 2,000 samples)
            m["downstream"] = fidelity_without_classifiers(cfg, gen, device, self.n_private)
        if self.fid_on:
            m.update(fid_of_generator(cfg, gen, self.shape, device, progress=bool(cfg.trainer.progress),
                                      resume_dir=output_dir / "fid_partial"))
        elif cfg.task.fid == "auto" and len(self.shape) == 3:
            m.update({"fid": None, "fid_missing": "task.fid=auto and the FID Inception weights are not installed "
                                                  "(make fid-weights installs them)"})
        return m

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
                      f"images), trained on {ds['n_synthetic']} synthetic samples ({r.get('time_s', 0):.1f} s)")
        if ds.get("n_classes"):
            print(f"  chance level: {100.0 / ds['n_classes']:.1f}%" + (f"; {ds['reference']}" if ds.get("reference")
                                                                       else ""))
        if isinstance(ds.get("class_mean"), dict):
            print(f"  class-mean baseline: {ds['class_mean']['test_acc']:.2f}% (nearest synthetic class mean, "
                  "pixels): a classifier above adds something beyond ten averages")
        if "spread_ratio" in ds:
            print(f"  intra-class spread, synthetic / real test: {ds['spread_ratio']:.3f} (1: as varied as real "
                  "images; near 0: templates)")
        if "fid" in m:
            print(f"  FID: {m['fid']:.2f} ({m.get('fid_samples')} generated vs {m.get('fid_real_images')} real test "
                  f"images); precision {m['precision']:.3f}, recall {m['recall']:.3f}, density {m['density']:.3f}, "
                  f"coverage {m['coverage']:.3f}" if isinstance(m["fid"], (int, float))
                  else f"  FID: n/a ({str(m.get('fid_missing', 'not computed')).split(';')[0]}; metrics.json says more)")
        if "eval_seconds" in m:
            print(f"  evaluation: {m['eval_seconds']:.1f} s; {m.get('threads', '')}")
        print(f"  files: {out / 'metrics.json'}" + (f", {m['samples_png']}" if "samples_png" in m else ""))


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


#: what a user compares a result with (measured here, docs/RESULTS.md): dataset -> text
REFERENCES = {
    "digits": "references on digits (docs/DEFAULT.md): this default (Poisson batches of 100 since issue 53, "
              "model.sharpen 8 at 0.3 since 2026-11-29) LogReg 88.6-89.4 % against its own class-mean baseline "
              "86.4-86.9 %, spread ratio 0.50-0.51, FID 45.1-47.1 (2 runs); without the curve LogReg 91.7-92.2 %, "
              "class-mean baseline 88.9-90.3 %, FID 48.9-50.4 (5 runs, FID 2); batches of 30 before it: LogReg 89.7-90.6 %, class-mean baseline 88.9-90.0 %, spread 0.20, "
              "FID 67.3-67.4 (templates); non-private SWD LogReg 89-93 %, DP-MERF at epsilon 10 (method=dpmerf) 81-86 % (3 "
              "runs each, measured earlier under autodp RDP)",
}


def reference_numbers(dataset: str) -> str:
    return REFERENCES.get(dataset, "")


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


def evaluate_generator(cfg, gen, shape, device, n_private: int) -> Dict[str, Any]:
    """Downstream classifiers trained on synthetic samples, tested on the real test split."""
    from dpgen.data import as_tensors, load_split
    from dpgen.eval import evaluate_downstream

    task = cfg.task
    test_ds = load_split(cfg.dataset, "test")
    X_test, Y_test = as_tensors(test_ds)
    n_syn = n_synthetic(task, n_private)
    x_syn, y_syn = synthetic_set(gen, n_syn, cfg.seed + 2, device)
    res = evaluate_downstream(x_syn, y_syn, X_test, Y_test, models=tuple(task.eval_models),
                              image_shape=tuple(shape) if len(shape) == 3 else None,
                              max_epochs=task.eval_max_epochs, seed=cfg.seed, device=str(device),
                              progress=bool(cfg.trainer.progress),
                              logreg_solver=task.logreg_solver)
    res["n_synthetic"] = n_syn
    if res.get("n_classes"):  # what ten averages give, and how much the samples vary within a class
        from dpgen.eval.fidelity import set_fidelity

        res.update(set_fidelity(x_syn, y_syn, X_test, Y_test, seed=cfg.seed))
    ref = reference_numbers(cfg.dataset.name)
    if ref:
        res["reference"] = ref
    res["n_test"] = int(X_test.shape[0])
    return res


FID_PROTOCOL = ("pytorch-fid's FID Inception v3 (2048-d pool features; grayscale repeated to 3 channels, bilinear "
                "resize to 299 x 299); reference: the whole real test split, its features cached under "
                "outputs/fid_stats keyed by content")


def fidelity_without_classifiers(cfg, gen, device, n_private: int) -> Dict[str, Any]:
    """The class-mean baseline and spread ratio of a run that trains no classifier (task.eval_models=[]: a run that
    asked for a quick evaluation), on at most 2,000 samples and 10 per test image (at least 20 a class): a
    comparison with the test split needs no more, and a large generator on a CPU draws 500 a minute."""
    from dpgen.data import as_tensors, load_split
    from dpgen.eval.fidelity import set_fidelity

    X_test, Y_test = as_tensors(load_split(cfg.dataset, "test"))
    k = int(getattr(gen, "num_classes", 0) or cfg.dataset.num_classes or 1)
    n = min(n_synthetic(cfg.task, n_private), 2000, max(10 * len(X_test), 20 * k))
    x_syn, y_syn = synthetic_set(gen, n, cfg.seed + 2, device)
    return {"n_synthetic": n, "n_test": int(X_test.shape[0]), **set_fidelity(x_syn, y_syn, X_test, Y_test, cfg.seed)}


def fid_samples(task, n_test: int) -> int:
    """Generated images for FID: task.fid_samples, else min(10,000, 5 x the test split)."""
    return int(task.fid_samples) if task.fid_samples else min(10000, 5 * int(n_test))


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
                     seed: Optional[int] = None) -> Dict[str, Any]:
    """FID and precision / recall / density / coverage (dpgen.eval.fidelity.prdc) of ``fid_samples`` generated
    images against the whole real test split; ``{"fid": None, "fid_missing": reason}`` when they cannot be
    computed. The test split's Inception features are computed once and cached (outputs/fid_stats). With
    ``resume_dir`` (the run folder's ``fid_partial/``) the generated images' features are saved as they are
    computed, and an interrupted pass continues there (the same generator and seed draw the same images)."""
    from dpgen.data import as_tensors, load_split
    from dpgen.eval.fid import FIDUnavailable, get_extractor

    if len(shape) != 3:
        return {"fid": None, "fid_missing": f"FID needs images; {cfg.dataset.name} rows have shape {shape}"}
    try:
        get_extractor(device=str(device))  # the weights first: no images drawn without them
    except FIDUnavailable as e:
        return {"fid": None, "fid_missing": " ".join(str(e).split())}
    x_test = as_tensors(load_split(cfg.dataset, "test"))[0]
    n = fid_samples(cfg.task, len(x_test)) if n is None else int(n)  # n, seed: another draw (scripts/fid_draws.py)
    g = torch.Generator(device=device).manual_seed(cfg.seed + 3 if seed is None else int(seed))
    with torch.no_grad():
        fake = torch.cat([gen.sample(min(500, n - i), generator=g, device=device)[0].cpu()
                          for i in range(0, n, 500)])
    return fid_of_images(fake, f"{cfg.dataset.name}_test", x_test, device, progress, resume_dir, tuple(shape))


def fid_of_images(fake, real_name: str, x_real, device="cpu", progress: bool = False, resume_dir=None,
                  image_shape=None) -> Dict[str, Any]:
    """FID and precision / recall / density / coverage of the images ``fake`` (a released set, or generated:
    never private records) against the evaluation images ``x_real`` (a test split; its features cached under
    outputs/fid_stats as ``real_name``); ``{"fid": None, "fid_missing": reason}`` without the Inception weights."""
    from dpgen.eval.fid import FIDUnavailable, activation_statistics, frechet_distance, get_extractor, real_features
    from dpgen.eval.fidelity import PRDC_K, PRDC_MAX_SAMPLES, prdc
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
    out.update(prdc(real, act))
    out["prdc"] = (f"k = {PRDC_K}, Inception features, at most {PRDC_MAX_SAMPLES} a side: "
                   f"{min(len(real), PRDC_MAX_SAMPLES)} real, {min(n, PRDC_MAX_SAMPLES)} generated")
    return out
