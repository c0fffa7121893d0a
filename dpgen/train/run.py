"""A run and its home: :class:`Run` owns one run folder and everything that happens to it.

The folder (created with its ``config.yaml``; its lock is held by ``fit``), the device, seeds and the
mechanism's generators, the task's data, the method and its networks, the optimizer, the EMA, the ledger file,
the checkpoints, resuming (the privacy settings check, the noise stream, a ledger carried from an attempt that
died before its first checkpoint), publication and the final ``metrics.json``.

Its one invariant: **the ledger is on disk before anything from a step is published** (a ``metrics.jsonl`` line,
a logger record, a checkpoint, ``metrics.json``): every write goes through :class:`~dpgen.train.publication.Publisher`,
which persists the ledger first, and a step is accounted (``method.account()``) before :meth:`Run.after_step`
publishes it. ``tests/privacy/test_ledger_faults.py`` checks the invariant in one place, on every path (resume,
crash, kill, requeue, full batch).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from dpgen.train.checkpoint import Checkpointer, rng_state, set_rng_state
from dpgen.train.publication import (Publisher, calibration_steps, carried_ledger, check_resume_settings,
                                     privacy_settings, remove_run_artefacts, stop_step)
from dpgen.train.run_record import read_run, remove_final_results
from dpgen.train.state import EMA, TrainingError, make_optimizer, mechanism_generators, seed_everything
from dpgen.utils.device import resolve_device
from dpgen.utils.io import atomic_write_text, write_json


# ---- checkpoints and resuming -------------------------------------------------------------------------------
def load_checkpoint(cfg, ckpt):
    """The checkpoint's state when ``resume=true|auto`` and one exists, else None (a fresh start)."""
    if cfg.resume and ckpt.exists():
        return ckpt.load()
    # (resume=true without a checkpoint or a ledger file was refused before the folder was touched:
    # dpgen.train.loop.refuse_resume_without_checkpoint; resume=auto starts quietly)
    return None


def prepare_resume(state, requested_steps: int, cfg, **settings_kw):
    """(steps to calibrate the noise for, privacy settings of the run). A resumed run keeps its
    checkpoint's calibration (its noise was released) and refuses changed privacy settings."""
    steps = calibration_steps(state, requested_steps)
    settings = privacy_settings(cfg, calibration_steps=steps, **settings_kw)
    if state is not None:
        check_resume_settings(state["privacy_settings"], settings)
    return steps, settings


def restore_noise_stream(noise_gen: torch.Generator, saved: torch.Tensor, seed: int, step: int) -> bool:
    """Continue a seeded run's noise stream from a checkpoint's generator state ``saved``; True when it
    did. A state saved on another kind of device (a CUDA generator's 16-byte Philox seed and offset
    against a CPU generator's Mersenne Twister state, or the reverse) cannot be set: the stream then
    restarts from a seed derived from the run's seed and ``step`` (False). A restart from the run's own
    seed would be the wrong choice: on the same device it replays the noise of the first steps, and
    noise used twice cancels in the difference of the two releases."""
    if saved.numel() == noise_gen.get_state().numel():
        noise_gen.set_state(saved)
        return True
    import hashlib

    digest = hashlib.sha256(f"dpgen noise stream, seed {int(seed)}, resumed at step {int(step)}".encode()).digest()
    noise_gen.manual_seed(int.from_bytes(digest[:8], "little") & (2 ** 63 - 1))
    return False


def open_run(cfg, state, publisher, method, sampler_gen, noise_gen, carried=None) -> int:
    """Start or continue a run; returns its step. With a checkpoint ``state`` (the caller has loaded
    its modules): the run's RNG (and, when not secret, the mechanism's) restored, ``metrics.jsonl``
    cut back to its step, the method's state loaded and its ledger brought up to the newest one on
    disk (steps published after the checkpoint count). Without a checkpoint but with ``carried``, the
    ledger file of an attempt that died before its first checkpoint
    (:func:`dpgen.train.publication.carried_ledger`): training starts at step 0 and the ledger
    continues from it, so what that attempt published stays charged. Otherwise a fresh start (the
    caller has removed what an earlier run left in the folder: :func:`fresh_folder`)."""
    if state is None:
        if carried is not None:
            method.load_ledger_state(carried["ledger"])
            print(f"[dpgen] {publisher.ledger.path} holds {method.spent_steps()} mechanism steps of an attempt that "
                  "stopped before its first checkpoint: training starts over and the ledger continues from them "
                  f"(epsilon spent so far {method.epsilon():.4f})")
        return 0
    set_rng_state(state["rng"])
    if not cfg.privacy.secret_randomness and "mechanism_rng" in state:
        sampler_gen.set_state(state["mechanism_rng"]["sampler"])
        if not restore_noise_stream(noise_gen, state["mechanism_rng"]["noise"], cfg.seed, int(state["step"])):
            print(f"[dpgen] the checkpoint's mechanism noise was drawn on another kind of device than this run's "
                  f"{noise_gen.device.type} (a run moved between a GPU and a CPU): its generator state cannot "
                  "continue here, so the noise continues from a new stream seeded from the seed and the step (no "
                  "earlier draw is replayed); the run is not bit-identical to an uninterrupted one")
    _truncate_jsonl(publisher.jsonl, int(state["step"]))
    method.load_state_dict(state["method"])
    publisher.ledger.reconcile(method)
    return int(state["step"])


def fresh_folder(output_dir) -> None:
    """A fresh start: remove what an earlier run published in ``output_dir`` together with its ledger
    (:func:`dpgen.train.publication.remove_run_artefacts`), before any logger opens its files, so that
    nothing in the folder outlives the ledger that charged it."""
    removed = remove_run_artefacts(output_dir)
    if removed:
        print(f"[dpgen] a fresh start in {output_dir}: removed the earlier run's {', '.join(removed)}")


def run_state(cfg, step: int, sampler_gen, noise_gen, settings, **parts) -> dict:
    """A checkpoint: ``parts`` (state dicts), the privacy settings its ledger was spent under, the
    run's RNG state and step, and the mechanism's RNG only when it is not secret (reproducible runs)."""

    return {**parts, "rng": rng_state(), "step": step, "privacy_settings": settings,
            **({} if cfg.privacy.secret_randomness else
               {"mechanism_rng": {"sampler": sampler_gen.get_state(), "noise": noise_gen.get_state()}})}


def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                keep.append(line)
        except json.JSONDecodeError:
            break  # a torn last line from a kill: drop it and what follows
    atomic_write_text(path, "".join(l + "\n" for l in keep))


def _loggable(v) -> Any:
    return float(v) if isinstance(v, torch.Tensor) else v


def check_declared_size(cfg, method, task) -> None:
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
    holdout = float(cfg.dataset.validation)
    if holdout > 0 and method.private and method.sampling != "poisson":
        raise ValueError(
            f"dataset.validation={holdout:g} with {cfg.method.name}, whose neighbours replace one record (it "
            "samples without replacement, releases the whole set once, or privatises each record locally): a "
            "replaced record may move between the training and the validation part, so the two parts would not "
            "compose in parallel. Use a Poisson-sampling method (method.sampling=poisson where it has one), or set "
            "dataset.validation=0.")
    if not method.private or method.sampling == "poisson" or method.local:
        return
    task.data.refuse_other_size(
        f"{cfg.method.name}'s guarantee (replace one record: batches of a fixed size drawn without replacement "
        "from n records, or one release of the whole set) computes its sampling rate or its sensitivity from the "
        "declared n")


def check_budget(method, steps: int) -> None:
    """Every declared mechanism fits its budget before step 0, whatever its kind (a one-shot release, releases
    before training, a given per-step noise): :func:`dpgen.privacy.mechanisms.check_declared` refuses, naming the
    value and the fix, what would be trained or released above it (issue 83: a one-shot method with a fixed noise
    trained and released at epsilon 2.52 under a budget of 1.0)."""
    from dpgen.privacy.mechanisms import check_declared

    if method.private and method.ledger is not None:
        check_declared(method.ledger, steps if method.accounts_steps else 0)


def privacy_block(cfg, method, n: int) -> Dict[str, Any]:
    """The privacy report a run states, the same in ``metrics.json`` and in every checkpoint (whose record a
    release, a sweep row and a table cell read: dpgen.train.run_record): the method's report with the run's
    facts in the wording of the privacy library (:func:`dpgen.privacy.report.run_report`)."""
    from dpgen.privacy.report import RunFacts, run_report

    ds = cfg.dataset
    facts = RunFacts(
        n=int(n), poisson=method.sampling == "poisson",
        counted_n_from=str(ds.path) if ds.n_train_counted else None,
        validation=float(ds.validation),
        own_data=str(ds.path) if ds.path else None,
        own_test_held_out=bool(ds.path) and not own_test_split(cfg),
        selected_on_private=cfg.privacy.selected_on_private,
        secret_randomness=bool(cfg.privacy.secret_randomness),
        secure_rng=bool(cfg.privacy.secure_rng))
    return run_report(method.privacy_report(), facts)


def own_test_split(cfg) -> bool:
    """Whether your own data (dataset=folder / npz) bring a test split of their own (else a part is held out)."""
    from dpgen.data.own import has_test_split

    return has_test_split(cfg.dataset.name, str(cfg.dataset.path))


class Run:
    """One run, fresh or resumed, from its folder to its ``metrics.json``.

    Built in the order a run must happen: the folder, the data, the checkpoint (if resuming), the method
    calibrated for the run's steps, the state restored, the release before training and the step-0
    checkpoint. Then :meth:`finished` (a finished run resumed without more steps), the loop
    (:func:`dpgen.train.loop.fit`: :meth:`after_step` after each accounted step) and :meth:`finish`."""

    def __init__(self, cfg, task, output_dir, threads) -> None:
        from dpgen.utils.run_dir import start_run_dir

        self.t_start = time.time()
        self.cfg, self.task, self.threads = cfg, task, threads
        self.out = start_run_dir(cfg, output_dir, task.name)  # created, with the run's config.yaml
        t = cfg.trainer
        task.cfg = cfg
        self.device = resolve_device(t.device)
        seed_everything(cfg.seed)  # models, generated codes and labels, public batches: from the seed
        self.sampler_gen, self.noise_gen = mechanism_generators(cfg, self.device)
        task.setup(cfg, self.device)
        if t.batch_size > task.n_private:  # the declared (public) size; a counted one is not said in an error
            n_said = ("counted from dataset.path" if cfg.dataset.n_train_counted else
                      f"dataset.n_train={task.n_private} records")
            raise ValueError(f"trainer.batch_size={t.batch_size} is larger than the private set ({n_said}): lower "
                             "trainer.batch_size.")
        self.steps = task.requested_steps(cfg)
        self.ckpt = Checkpointer(self.out / "checkpoints")
        self.state = load_checkpoint(cfg, self.ckpt)
        # no checkpoint: an earlier attempt's ledger that counts steps is continued, else the folder starts over
        self.carried = carried_ledger(cfg, self.out) if self.state is None else None
        if self.state is None and self.carried is None:
            fresh_folder(self.out)
        #: which run wrote the checkpoint: every file that describes its weights (selection.json, a release) names
        #: it, and a reader refuses a file of another run that used this folder before (dpgen.tasks.finished_run)
        self.run_id = str((self.state or {}).get("run_id") or uuid.uuid4().hex)
        calib_steps, self.settings = prepare_resume(self.state if self.state is not None else self.carried,
                                                    self.steps, cfg, n_private=task.n_private,
                                                    task_keys=task.task_keys)
        self.method, self.models = task.build(cfg, calib_steps, self.device)
        check_declared_size(cfg, self.method, task)
        check_budget(self.method, self.steps)  # calibrated or refused before anything is trained or released
        if cfg.dataset.n_train_counted:  # said once the data and the method are set up
            print(f"[dpgen] dataset={cfg.dataset.name}: dataset.n_train=0, so the training records at "
                  f"{cfg.dataset.path} were counted: {task.n_private:,}, treated as public (it sets q = B / n; the "
                  "report says so). Declare dataset.n_train=<n> to fix it instead.", file=sys.stderr, flush=True)
        self.method.rng = self.noise_gen  # the mechanism's randomness (also for a release before training)
        self.nets = torch.nn.ModuleDict(self.models)
        self.params = list(self.nets.parameters()) + list(self.method.parameters())
        self.opt = make_optimizer(t, self.params, capturable=bool(t.cuda_graph) and self.device.type == "cuda")
        self.ema = EMA(self.nets, t.ema) if t.ema else None
        self.publisher = Publisher(cfg, self.out, self.method, self.settings)  # its logger opens at the first record
        self._restore()
        # the earlier attempts' clocks and last published record: a resumed run's metrics cover the whole run
        self.before = dict((self.state or {}).get("elapsed") or {})
        self.loop_t0: Optional[float] = None
        self.step0 = self.step
        self.last_logs: Dict[str, Any] = {}
        task.prepare(self.method, self.out)  # a release before training (a DP mean), if the method makes one
        # a checkpoint at step 0 for every task, before anything is published (what was released before training
        # is in it): a run killed before its next checkpoint resumes with its ledger, and what it published stays
        # charged
        if self.state is None:
            self.checkpoint()
        # after the releases before training: the steps left are computed from the ledger's whole history
        self.target_steps = stop_step(self.method, self.step, self.steps, self.method.max_steps)

    def _restore(self) -> None:
        state = self.state
        if state is not None:
            self.nets.load_state_dict(state["models"])
            self.opt.load_state_dict(state["optimizer"])
            if self.ema is not None and state.get("ema") is not None:
                self.ema.model.load_state_dict(state["ema"])
        self.step = open_run(self.cfg, state, self.publisher, self.method, self.sampler_gen, self.noise_gen,
                             carried=self.carried)
        if state is not None:
            print(f"[dpgen] resumed from {self.ckpt.path} at step {self.step} (epsilon spent so far "
                  f"{self.method.epsilon():.4f})")

    # ---- before the loop --------------------------------------------------------------------------------------
    @property
    def evaluated(self) -> torch.nn.Module:
        """What is evaluated and released: the EMA (post-processing of the iterates, no privacy cost), else the
        trained networks."""
        return self.ema.model if self.ema is not None else self.nets

    def finished(self) -> Optional[Dict[str, Any]]:
        """A finished run resumed without more steps: its ``metrics.json`` (left as it is), else None. A resume
        that trains again removes what the earlier sitting wrote at its end (it describes older weights)."""
        step, out = self.step, self.out
        if self.state is not None:
            if self.target_steps <= step:
                record = read_run(out, state=self.state)
                done = record.metrics
                if record.status == "evaluating":  # trained; its evaluation was interrupted: evaluate again
                    print(f"[dpgen] {out} has finished training (step {step}, epsilon spent "
                          f"{self.method.epsilon():.4f}) and its evaluation was interrupted: evaluating again, "
                          "with nothing trained or charged")
                    return None
                if done is not None:
                    print(f"[dpgen] {out} has finished (step {step}, epsilon spent {self.method.epsilon():.4f}): "
                          "there is nothing left to train" + ("" if step >= self.steps else " within the budget")
                          + ", so its results are left as they are. Raise trainer.steps to train longer; "
                          "`dpgen sample` and task=evaluate evaluate a released set again.")
                    self.evaluated.eval()  # as after training: a caller may sample from it
                    return done
            else:
                removed = remove_final_results(out)
                if removed:
                    print(f"[dpgen] training continues from step {step}: removed {', '.join(removed)} (written when "
                          "an earlier sitting ended, they describe older weights; this run writes its own when it "
                          "ends)")
        if self.target_steps < self.steps:
            print(f"[dpgen] the budget allows {self.target_steps} of the {self.steps} steps asked: training stops "
                  "there")
        self.publisher.logger  # opened before the first step: a logger that cannot start stops the run first
        return None

    def start_loop(self) -> None:
        self.nets.train()
        self.loop_t0, self.step0 = time.time(), self.step

    # ---- each step -------------------------------------------------------------------------------------------
    def after_step(self, logs: Dict[str, Any], guard, stop, bar) -> None:
        """After a step has run and been accounted: count it, then (ledger first) publish its record and write
        the checkpoint when due; the non-finite guard is read before either; a stop request hands over after
        the checkpoint."""
        t = self.cfg.trainer
        self.step += 1
        bar.update(1)
        step = self.step
        last = step == self.target_steps
        publish = step % t.log_every == 0 or last or self.task.should_log(step)
        due = step % t.checkpoint_every == 0 or last or stop.requested
        if publish or due:
            guard.check(self, logs)  # the one host read of the step's finiteness, at log and checkpoint steps only
        if publish:
            self.last_logs = ({k: _loggable(v) for k, v in logs.items()} if self.method.publishes_loss else {})
            rec = {"step": step, **self.last_logs,
                   **self.task.log_fields(step, last, self.method, self.evaluated)}
            self.publisher.publish(rec, step)
            if "loss" in self.last_logs:
                bar.set_postfix(loss=f"{self.last_logs['loss']:.4g}")
        if due:
            self.checkpoint(full=last or stop.requested)
        if stop.requested and not last:  # a cluster's time-limit warning: the checkpoint is written, hand over
            self.hand_over(stop, bar)

    def skip_step(self, bar) -> None:
        """A step with nothing to learn from and no mechanism to run (an empty non-private batch)."""
        self.step += 1
        bar.update(1)

    def hand_over(self, stop, bar) -> None:
        bar.close()
        stop.hand_over(self.step, self.ckpt.path, f"resume=auto hydra.run.dir={self.out}")

    def stop_training(self, what: str, first_bad: int) -> None:
        """A released value was not finite: the ledger keeps every step that ran; the last good checkpoint stays."""
        self.publisher.persist()
        raise TrainingError(
            f"{what} is not finite at step {first_bad}: training stopped at step {self.step}. The last good "
            f"checkpoint ({self.ckpt.path}) is kept and the privacy ledger ({self.publisher.ledger.path}) counts "
            "every step that ran; lower trainer.lr or check the data.")

    # ---- records ---------------------------------------------------------------------------------------------
    def elapsed(self) -> Dict[str, Any]:
        """This attempt's clocks added to the earlier attempts'."""
        before, now = self.before, time.time()
        loop_s = now - self.loop_t0 if self.loop_t0 is not None else 0.0
        return {"train_seconds": before.get("train_seconds", 0.0) + now - self.t_start,
                "loop_seconds": before.get("loop_seconds", 0.0) + loop_s,
                "loop_steps": before.get("loop_steps", 0) + self.step - self.step0,
                "last_logs": self.last_logs or before.get("last_logs", {}), "attempts": before.get("attempts", 0) + 1}

    def privacy(self) -> Dict[str, Any]:
        return privacy_block(self.cfg, self.method, self.task.n_private)

    def checkpoint(self, full: bool = True) -> None:
        """The ledger, then ``checkpoints/last.pt`` with the privacy of its weights (what a release, a sweep row
        or a table cell states: dpgen.train.run_record), computed after the ledger has counted the step. A
        periodic checkpoint records the step count only (the whole report costs an accountant call, and only
        the last step's weights are released; an interrupted run's epsilon is computed from its ledger when
        read)."""
        m = self.method
        record = (self.privacy() if full else
                  {"partial": True, "private": bool(m.private), "private_steps": m.spent_steps()})
        self.publisher.checkpoint(lambda: self.ckpt.save(run_state(
            self.cfg, self.step, self.sampler_gen, self.noise_gen, self.settings, models=self.nets.state_dict(),
            optimizer=self.opt.state_dict(), method=m.state_dict(),
            ema=self.ema.model.state_dict() if self.ema is not None else None,
            elapsed=self.elapsed(), privacy=record, run_id=self.run_id)))

    def finish(self) -> Dict[str, Any]:
        """Evaluate what is released and write ``metrics.json`` (the ledger is final: no step follows)."""
        cfg, method, task, t = self.cfg, self.method, self.task, self.cfg.trainer
        whole = self.elapsed()  # this attempt and the earlier ones
        self.last_logs = last_logs = whole["last_logs"]
        steps, step = self.steps, self.step
        done = self.target_steps >= steps or (method.private and method.accounts_steps
                                              and method.spent_steps() >= steps)
        evaluated = self.evaluated
        evaluated.eval()
        metrics: Dict[str, Any] = {
            "task": task.name, "method": cfg.method.name, "dataset": cfg.dataset.name,
            "steps": step, "steps_requested": steps,
            "epochs": round(step / max(1, -(-task.n_private // t.batch_size)), 4),
            "stop_reason": ("completed" if done else
                            f"privacy budget: the next step would exceed epsilon={cfg.privacy.epsilon}"),
            "final_loss": (last_logs.get("loss", float("nan")) if method.publishes_loss else
                           "withheld: computed from clean private records (only the noisy gradient is released)"),
            "final_logs": last_logs,
            "n_private": task.n_private,  # the declared size (public)
            "batch_size": t.batch_size, "ema": t.ema, "seed": cfg.seed, "device": str(self.device),
            "privacy": self.privacy(),
            "train_seconds": round(whole["train_seconds"], 2),
            "loop_seconds": round(whole["loop_seconds"], 2),
            "steps_per_second": (round(whole["loop_steps"] / whole["loop_seconds"], 3)
                                 if whole["loop_seconds"] > 0 and whole["loop_steps"] > 0 else None),
            "attempts": whole["attempts"],
            "checkpoint": str(self.ckpt.path),
        }
        self.threads.rebalance()
        t_eval = time.time()
        resume = f"python run.py <its overrides> resume=auto hydra.run.dir={self.out}"

        def part(done: Dict[str, Any], left: str) -> None:  # written as each part finishes: an interruption keeps it
            write_json(self.out / "metrics.json", {**metrics, **done, "evaluation_complete": False,
                                                   "evaluation_left": f"{left}: {resume} completes it"})

        part({}, "the whole evaluation")  # the weights' facts and privacy, before the first evaluated number
        task.on_part = part
        try:
            metrics.update(task.evaluate(cfg, evaluated, method, self.device, self.out))
        except KeyboardInterrupt:
            print(f"\n[dpgen] evaluation interrupted: the trained weights ({self.ckpt.path}) and the parts already "
                  f"evaluated ({self.out / 'metrics.json'}) are kept; {resume} evaluates the rest (a FID pass "
                  "continues where it stopped)", file=sys.stderr, flush=True)
            raise
        finally:
            task.on_part = None
        metrics["evaluation_complete"] = True
        metrics["eval_seconds"] = round(time.time() - t_eval, 2)
        metrics["threads"] = self.threads.describe()
        metrics["wall_seconds"] = round(self.before.get("train_seconds", 0.0) + time.time() - self.t_start, 2)
        write_json(self.out / "metrics.json", metrics)
        self.publisher.finish(metrics)
        return metrics


__all__ = ["Run", "check_declared_size", "privacy_block"]
