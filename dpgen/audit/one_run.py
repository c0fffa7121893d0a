"""``make audit-run``: a whole-run privacy audit through dpgen's real training loop, with ONE run per row.

The method of Steinke, Nasr & Jagielski (NeurIPS 2023, "Privacy Auditing with One (1) Training Run"),
white-box: m canary records, each put into the private set independently with probability 1/2; one full
training run by :func:`dpgen.train.loop.fit` (the method's own sampler, mechanism, accountant, ledger,
checkpoints; nothing of the loop is replaced); the auditor watches what the mechanism RELEASES at every
step (the noisy gradient that reaches the optimizer) together with public information (the parameters
before each step, which are post-processing of earlier releases, and the generated codes), scores each
canary, guesses "in" for the highest scores and "out" for the lowest, and the theorem
(:mod:`dpgen.privacy.one_run_bound`) turns the correct guesses into a 95 % lower bound on the run's epsilon
under add/remove of one canary. Each row states that bound beside the run's claimed whole-run epsilon (its
ledger); a row whose bound exceeds its claim would be a privacy bug. The ``noise_scale=0.5`` rows run the
same mechanism with half its noise while the ledger still charges the full noise (a deliberate bug): the
audit must show a clearly larger bound there, or it has no power.

Canaries (designed so that each one's released signal is separable from the data and from the others):

* **DP-SGD** (``dpsgd``: WDP Table 2's privacy settings: epsilon 2.2 at delta 1e-5, C = 1, batch 256,
  10 epochs, Adam 1e-3, the moments-accountant ledger; on scikit-learn's digits). Each record gets m extra
  input coordinates, 0 for every real record; canary i is ``A e_{64+i}`` with a random label, so its
  gradient lives (up to the bias) in its own weight column: the "Dirac canary" of the paper in input space.
  The model is a logistic regression on the 64 + m inputs (DP-SGD's guarantee does not depend on the
  model). Score: the sum over steps of the released gradient's column i against the canary's own gradient
  direction at the public parameters of that step.
* **DP-Sinkhorn, dct recipe** (``dpsinkhorn_dct``: sigma 1.1, C 0.5, Poisson batches of 50, the barrier on
  the generator's 10 x 10 DCT coefficients, run to its epsilon-10 budget; on 2,000 records of mnist10k
  (1,500 real images + the included canaries) so that the whole run fits minutes). Canary i is an image
  far from the data along a random direction v_i of the released coefficient space (pixels ``A v_i`` through
  the fixed inverse DCT); when it is in a batch it pulls the generated sample nearest to it, and the
  released coefficient gradient of that sample points away from it. Score: the sum over steps of
  ``-<released gradient of the nearest generated sample of the canary's label, v_i>``.

What it does not cover: one run gives one draw of the guesses (the bound holds at 95 % for this draw);
the bound is an empirical LOWER bound (far below the claim is the expected outcome: SNJ report the same
gap for one-run audits), never a proof of privacy.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from dpgen.privacy.one_run_bound import CONFIDENCE, best_epsilon_lower_bound

RELATION = "add/remove one canary (Poisson sampling; dataset size declared per run)"
COLUMNS = ("method", "setting", "noise_scale", "claimed_epsilon", "epsilon_at_actual_noise", "delta",
           "epsilon_lb", "m", "included", "guesses", "correct", "k_plus", "k_minus", "steps", "runtime_s", "verdict")


@dataclass
class Canaries:
    """m canary records and which of them the run holds (S_i = +1: included)."""

    x: torch.Tensor
    y: torch.Tensor
    included: np.ndarray

    @property
    def m(self) -> int:
        return int(self.included.shape[0])


def draw_inclusion(m: int, rng: np.random.Generator) -> np.ndarray:
    """Each canary in the private set independently with probability 1/2."""
    return rng.random(m) < 0.5


def under_noise(obj, noise_scale: float) -> None:
    """The control's deliberate bug: ``obj`` (a method or mechanism with a ``noise_std`` property) adds
    ``noise_scale`` times its noise, while everything that accounts (its noise multiplier) is unchanged."""
    if noise_scale == 1.0:
        return
    base = type(obj)
    std = base.noise_std
    obj.__class__ = type(f"UnderNoised{base.__name__}", (base,),
                         {"noise_std": property(lambda self: noise_scale * std.fget(self))})


# ----------------------------------------------------------------------------------------------
# DP-SGD: Dirac canaries in m extra input coordinates
# ----------------------------------------------------------------------------------------------
def _dpsgd_task(canaries: Canaries, noise_scale: float, amplitude: float):
    from dpgen.methods.dpsgd import DPSGD
    from dpgen.methods.registry import DataInfo
    from dpgen.tasks.classification import ClassificationTask

    class CanaryClassification(ClassificationTask):
        name = "classification"

        def setup(self, cfg, device) -> None:
            super().setup(cfg, device)
            real = self.X.flatten(1)
            self.d0 = real.shape[1]
            pad = torch.zeros(real.shape[0], canaries.m, device=device)
            inc = torch.as_tensor(canaries.included, device=device)
            self.X = torch.cat([torch.cat([real, pad], 1), canaries.x.to(device)[inc]])
            self.Y = torch.cat([self.Y, canaries.y.to(device)[inc]])
            self.n_private = int(self.X.shape[0])
            self.shape = (int(self.X.shape[1]),)
            self.steps_per_epoch = math.ceil(self.n_private / cfg.trainer.batch_size)
            self.scores = torch.zeros(canaries.m, device=device)

        def build(self, cfg, steps: int, device):
            method = DPSGD.from_config(cfg, DataInfo(self.n_private, self.shape, self.num_classes), steps)
            under_noise(method, noise_scale)  # the ledger keeps charging the full noise
            self.method = method
            model = torch.nn.Linear(self.shape[0], self.num_classes).to(device)
            real_step = method.step
            task = self
            onehot = torch.nn.functional.one_hot(canaries.y.to(device), self.num_classes).float()

            def step(models, batch):
                with torch.no_grad():  # the canaries' own gradient direction at the public parameters
                    w, b = model.weight, model.bias
                    delta = torch.softmax(amplitude * w[:, task.d0:].T + b, dim=1) - onehot  # (m, classes)
                    u = delta / delta.norm(dim=1, keepdim=True).clamp_min(1e-12)
                out = real_step(models, batch)
                with torch.no_grad():  # the released noisy gradient, canary i's column
                    task.scores += (model.weight.grad[:, task.d0:].T * u).sum(1)
                return out

            method.step = step
            return method, {"model": model}

        def evaluate(self, cfg, models, method, device, output_dir: Path):
            return {}

        def summary(self, metrics, output_dir) -> None:
            pass

    return CanaryClassification()


def dpsgd_canaries(m: int, num_classes: int, d0: int, amplitude: float, rng: np.random.Generator) -> Canaries:
    x = torch.zeros(m, d0 + m)
    x[torch.arange(m), d0 + torch.arange(m)] = amplitude
    y = torch.as_tensor(rng.integers(0, num_classes, m), dtype=torch.long)
    return Canaries(x, y, draw_inclusion(m, rng))


def dpsgd_overrides(n: int, quick: bool) -> List[str]:
    """WDP Table 2's privacy settings (experiment=wdp_dl_mnist10k) on digits plus the included canaries."""
    return ["task=classification", "method=dpsgd", "dataset=digits", f"dataset.n_train={n}", "privacy.epsilon=2.2",
            "privacy.delta=1e-5", "method.clip=1.0", "method.accountants=[moments]",
            f"trainer.batch_size={64 if quick else 256}", f"trainer.epochs={2 if quick else 10}",
            "trainer.optimizer=adam", "trainer.lr=1e-3", "trainer.progress=false", "trainer.log_every=1000000",
            "trainer.checkpoint_every=1000000", "logger=none"]


# ----------------------------------------------------------------------------------------------
# DP-Sinkhorn, dct recipe: far canaries along random directions of the released coefficients
# ----------------------------------------------------------------------------------------------
def _dpsinkhorn_task(canaries: Canaries, directions: torch.Tensor, noise_scale: float, n_real: int):
    from dpgen.data import ArrayDataset
    from dpgen.tasks.generation import GenerationTask

    class CanaryGeneration(GenerationTask):
        name = "generation"

        def setup(self, cfg, device) -> None:
            super().setup(cfg, device)
            X, Y = self.train_ds.tensors
            inc = torch.as_tensor(canaries.included)
            X = torch.cat([X[:n_real], canaries.x[inc].to(X.dtype)])
            Y = torch.cat([Y[:n_real], canaries.y[inc]])
            self.train_ds = ArrayDataset(X, Y, name=cfg.dataset.name, num_classes=self.num_classes, split="train")
            self.n_private = len(self.train_ds)
            self.scores = torch.zeros(canaries.m, device=device)

        def build(self, cfg, steps: int, device):
            method, models = super().build(cfg, steps, device)
            under_noise(method.mechanism, noise_scale)  # the ledger keeps charging the full noise
            self.method = method
            gen = models["generator"]
            task, seen = self, {}
            v = directions.to(device)  # (m, k*k), unit rows
            yc = canaries.y.to(device)
            real_code, real_hook = gen.sample_code, method._hook

            def sample_code(n, device=None):
                code, y = real_code(n, device=device)
                seen["code"], seen["y"] = code.detach().reshape(code.shape[0], -1), y
                return code, y

            def hook(grad):
                out = real_hook(grad)  # the released coefficient gradient
                with torch.no_grad():
                    code, y = seen["code"], seen["y"]
                    g = out.detach().reshape(out.shape[0], -1)
                    # the generated sample nearest to each canary (of its label when there is one): public
                    proj = v @ code.T  # (m, B): <code_j, v_i>, the canary is far along +v_i
                    same = (yc[:, None] == y[None, :]) if y is not None else torch.ones_like(proj, dtype=torch.bool)
                    dist = (code * code).sum(1)[None, :] - 2 * AMPLITUDE_DCT * proj
                    dist = torch.where(same.any(1, keepdim=True) & ~same, torch.full_like(dist, float("inf")), dist)
                    j = dist.argmin(1)
                    task.scores -= (g[j] * v).sum(1)
                return out

            gen.sample_code = sample_code
            method._hook = hook
            return method, models

        def evaluate(self, cfg, models, method, device, output_dir: Path):
            return {}

        def summary(self, metrics, output_dir) -> None:
            pass

    return CanaryGeneration()


AMPLITUDE_DCT = 30.0


def dpsinkhorn_canaries(m: int, num_classes: int, shape, dct_size: int, rng: np.random.Generator):
    """(canaries, directions): image ``(A v_i) @ basis`` (the dct generator's own fixed inverse DCT), v_i uniform
    on the sphere of the k*k released coefficients."""
    from dpgen.models.generators import DCTGenerator

    gen = DCTGenerator(code_dim=2, num_classes=num_classes, out_shape=tuple(shape), dct_size=dct_size, hidden=(4,))
    v = torch.as_tensor(rng.standard_normal((m, dct_size * dct_size)), dtype=torch.float32)
    v = v / v.norm(dim=1, keepdim=True)
    with torch.no_grad():
        x = (AMPLITUDE_DCT * v @ gen.basis).reshape(m, *shape)
    y = torch.as_tensor(rng.integers(0, num_classes, m), dtype=torch.long)
    return Canaries(x, y, draw_inclusion(m, rng)), v


def dpsinkhorn_overrides(n: int, quick: bool) -> List[str]:
    """dpgen's DP-Sinkhorn dct recipe (experiment=dpsinkhorn_mnist10k +variant=dpsinkhorn_dct), to its budget."""
    common = ["trainer.progress=false", "trainer.log_every=1000000", "trainer.checkpoint_every=1000000",
              "logger=none", "task.eval_models=[]", "task.fid=false", "task.n_synthetic=10", "trainer.ema=null"]
    if quick:  # digits: 8 x 8 images, 4 x 4 coefficients, a few hundred steps
        return ["method=dpsinkhorn", "dataset=digits", f"dataset.n_train={n}", "model.generator=dct",
                "model.dct_size=4", "method.clip_mode=batch", "method.clip=0.5", "method.noise_multiplier=1.1", "trainer.batch_size=50",
                "trainer.epochs=null", "trainer.steps=150", "privacy.epsilon=10", "trainer.lr=1e-4", *common]
    return ["experiment=dpsinkhorn_mnist10k", "+variant=dpsinkhorn_dct", f"dataset.n_train={n}", *common]


# ----------------------------------------------------------------------------------------------
# one row
# ----------------------------------------------------------------------------------------------
def audit_run(method: str, m: int = 1000, noise_scale: float = 1.0, seed: int = 0, quick: bool = False,
              out_dir: Optional[Path] = None) -> Dict:
    """One run with m canaries; returns the table row."""
    from dpgen.config import compose_config
    from dpgen.train.loop import fit

    rng = np.random.default_rng(seed)
    t0 = time.time()
    if method == "dpsgd":
        d0, amplitude = 64, 100.0
        can = dpsgd_canaries(m, 10, d0, amplitude, rng)
        n = 1437 + int(can.included.sum())
        cfg = compose_config(dpsgd_overrides(n, quick))
        task = _dpsgd_task(can, noise_scale, amplitude)
        setting = (f"WDP Table 2 privacy settings on digits + canaries: C=1, B={cfg.trainer.batch_size}, "
                   f"{cfg.trainer.epochs:g} epochs, Adam 1e-3, logistic regression on 64 + m inputs, "
                   f"Dirac canaries (amplitude {amplitude:g})")
    elif method == "dpsinkhorn_dct":
        shape, k, n_real = ((1, 8, 8), 4, 1000) if quick else ((1, 28, 28), 10, 1500)
        can, v = dpsinkhorn_canaries(m, 10, shape, k, rng)
        n = n_real + int(can.included.sum())
        cfg = compose_config(dpsinkhorn_overrides(n, quick))
        task = _dpsinkhorn_task(can, v, noise_scale, n_real)
        setting = (f"dct recipe ({k}x{k} coefficients), sigma {cfg.method.noise_multiplier}, C {cfg.method.clip}, "
                   f"Poisson B={cfg.trainer.batch_size}, on {n_real} {cfg.dataset.name} images + canaries, to its "
                   f"budget; far canaries (amplitude {AMPLITUDE_DCT:g} along a random coefficient direction)")
    else:
        raise ValueError(f"audit-run method={method!r} is unknown: choose dpsgd or dpsinkhorn_dct")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(out_dir) if out_dir is not None else Path(tmp) / "run"
        metrics = fit(cfg, task, run_dir)
    p = metrics["privacy"]
    claimed = float(p["epsilon_spent"])
    delta = float(cfg.privacy.delta)
    res = best_epsilon_lower_bound(task.scores.cpu().numpy(), can.included, delta=delta)
    actual = _epsilon_at(task.method.ledger, noise_scale, delta) if noise_scale != 1.0 else claimed
    lb = float(res["epsilon_lb"])
    if noise_scale == 1.0:
        verdict = "pass (lb <= claimed)" if lb <= claimed + 1e-9 else "FAIL: lb > claimed epsilon"
    else:  # main() compares it with the full-noise row of the same method
        verdict = "caught (lb > claimed)" if lb > claimed else "lb <= claimed"
    return {"method": method, "setting": setting, "noise_scale": noise_scale, "claimed_epsilon": round(claimed, 4),
            "epsilon_at_actual_noise": round(actual, 4), "delta": delta, "epsilon_lb": round(lb, 4), "m": m,
            "included": int(can.included.sum()), "guesses": res["guesses"], "correct": res["correct"],
            "k_plus": res["k_plus"], "k_minus": res["k_minus"], "steps": metrics["steps"],
            "runtime_s": round(time.time() - t0, 1), "verdict": verdict,
            "relation": RELATION, "settings_tried": len(res["settings"])}


def _epsilon_at(ledger, noise_scale: float, delta: float) -> float:
    """The epsilon of the noise the run really used (the control's): the ledger's history with its noise
    multipliers scaled, under the ledger's own accountant."""
    import copy

    acc = copy.deepcopy(ledger.accountant)
    state = copy.deepcopy(acc.state_dict())
    for h in state["history"]:
        h["noise_multiplier"] = float(h["noise_multiplier"]) * noise_scale
    acc.load_state_dict(state)
    return float(acc.get_epsilon(delta))


def write_table(rows: Sequence[Dict], out_dir, wall: float, seed: int) -> Dict[str, Path]:
    from dpgen.utils.io import write_table as _write

    notes = [
        "Steinke, Nasr & Jagielski (NeurIPS 2023), one training run per row, white-box (the auditor reads every "
        "released noisy gradient and the public parameters / generated codes): m canaries, each included with "
        "probability 1/2; the k+ highest scores guessed 'in', the k- lowest 'out', for a grid of (k+, k-) fixed "
        f"in advance (Bonferroni over the grid); epsilon_lb: the {CONFIDENCE:.0%} lower bound of their theorem "
        "with the run's delta (dpgen/privacy/one_run_bound.py).",
        "claimed_epsilon: the run's ledger after the whole run (metrics.json epsilon_spent); "
        "epsilon_at_actual_noise: what the same accountant says for the noise the run really added (the "
        "rows with noise_scale < 1 are a deliberate bug: that share of the noise, the ledger charges the full noise).",
        "pass: epsilon_lb <= claimed_epsilon. A one-run bound sits far below the claim even for a tight "
        "analysis (the paper reports the same gap); the control shows the audit's power.",
        f"Neighbouring relation: {RELATION}. Not covered: the bound is one draw of one run (95 %), a lower "
        "bound, never a proof of privacy.",
        f"inclusion seed {seed} (the mechanism's randomness: OS entropy); wall time {wall:.1f} s",
    ]
    for method in dict.fromkeys(r["method"] for r in rows):
        notes.append(f"{method}: " + next(r["setting"] for r in rows if r["method"] == method))
    return _write("privacy_audit_run", rows, COLUMNS, md_columns=[c for c in COLUMNS if c != "setting"], title="Whole-run privacy audit with one training run "
                  "(make audit-run)", notes=notes, directory=Path(out_dir), echo=True)


#: (method, noise scale): the audited runs and their under-noised controls (DP-Sinkhorn's canaries carry a small
#: share of the batch clip, so its control also runs at a tenth of the noise, where the design has power)
ROWS = (("dpsgd", 1.0), ("dpsgd", 0.5), ("dpsinkhorn_dct", 1.0), ("dpsinkhorn_dct", 0.5), ("dpsinkhorn_dct", 0.1))
#: canaries per run: DP-SGD's Dirac canaries are separable, DP-Sinkhorn's share the batch clip (fewer per batch)
DEFAULT_M = {"dpsgd": 1000, "dpsinkhorn_dct": 200}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dpgen.audit.one_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="*", default=None, help="dpsgd and/or dpsinkhorn_dct (default: both)")
    p.add_argument("--m", type=int, default=None, help="canaries per run (default: dpsgd 1000, dpsinkhorn_dct 200)")
    p.add_argument("--seed", type=int, default=0, help="the canaries' labels, directions and inclusion")
    p.add_argument("--quick", action="store_true", help="a few-minute smoke version (shorter runs, digits)")
    p.add_argument("--out", default=os.path.join("outputs", "tables"), help="table folder (default outputs/tables)")
    a = p.parse_args(argv)
    t0 = time.time()
    rows = []
    for method, scale in ROWS:
        if a.methods and method not in a.methods:
            continue
        m = a.m or DEFAULT_M[method]
        print(f"[audit-run] {method}, noise x{scale:g}, m={m} ...", flush=True)
        rows.append(audit_run(method, m, scale, a.seed, a.quick))
        r = rows[-1]
        print(f"[audit-run]   claimed {r['claimed_epsilon']}, lower bound {r['epsilon_lb']} ({r['correct']}/"
              f"{r['guesses']} guesses right), {r['runtime_s']} s: {r['verdict']}", flush=True)
    for r in rows:  # a control's power: its bound beside the full-noise run's
        full = [f for f in rows if f["method"] == r["method"] and f["noise_scale"] == 1.0]
        if r["noise_scale"] != 1.0 and full and not r["verdict"].startswith("caught"):
            higher = r["epsilon_lb"] > full[0]["epsilon_lb"]
            r["verdict"] = (f"not caught; lb {'above' if higher else 'not above'} the full-noise run's "
                            f"({'power' if higher else 'no power at this noise'})")
    write_table(rows, a.out, time.time() - t0, a.seed)
    bad = [r for r in rows if r["noise_scale"] == 1.0 and not r["verdict"].startswith("pass")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
