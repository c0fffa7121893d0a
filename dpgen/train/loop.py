"""The one training loop: ``fit(cfg, task, output_dir)`` for every task and every method.

A task (:class:`Task`) says what the data are, which networks train, how a step's batch is built and how the result
is evaluated; a method implements :class:`dpgen.methods.base.Method` (``sample_batch``, ``step``, ``account``, its
ledger). :func:`fit` builds a :class:`dpgen.train.run.Run` (its :class:`~dpgen.train.run_folder.RunFolder`, its
:class:`~dpgen.train.state.TrainingState`, the checks before step 0 of :mod:`dpgen.privacy.preflight`) and
:func:`train` runs batch, step, optimizer, EMA, ``method.account()``, then :meth:`~dpgen.train.run.Run.after_step`.

Contract: every step that ran is charged in the ledger before anything from it is published; the run stops before a
step its budget does not allow, at the first non-finite released value (read at log and checkpoint steps only) and
on SIGINT / SIGTERM / SIGUSR2 after the step's checkpoint. A task's ``setup`` must set the declared ``n_private``
and ``data``. The parts and each guarantee: docs/TRAINING.md, "What the loop guarantees".
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch

from dpgen.train.run import Run


class Task:
    """What a trainable task gives the loop. Subclasses set ``name`` and implement the hooks."""

    name = "task"
    #: ``task.*`` fields that change the mechanism (refused on resume when changed)
    task_keys: tuple = ()
    #: the private set's size n as DECLARED (``dataset.n_train``: public; set by ``setup``): q = B / n, the
    #: steps of an epoch, the noise, ``n_synthetic`` and every published count use it
    n_private: int = 0
    #: the private records' owner (:class:`dpgen.data.private.PrivateData`, set by ``setup``): it draws each
    #: step's batch and refuses a replace-one run whose set differs from n, never saying the loaded size
    data = None

    # ---- hooks ---------------------------------------------------------------------------------
    def setup(self, cfg, device) -> None:
        """Load the data onto ``device``; set ``n_private`` (the declared size) and ``data`` (the private records'
        owner)."""
        raise NotImplementedError

    def requested_steps(self, cfg) -> int:
        """``trainer.steps``, else ``trainer.epochs`` epochs of ceil(n_private / B) steps."""
        from dpgen.privacy.calibration import requested_steps

        t = cfg.trainer
        return requested_steps(t.steps, t.epochs, self.n_private, t.batch_size)

    def build(self, cfg, steps: int, device):
        """(method, {name: trained network}) for a run whose noise is calibrated for ``steps``."""
        raise NotImplementedError

    def prepare(self, method, output_dir: Path) -> bool:
        """Before the first step: put the data where training reads them, and make the method's release
        before training if it has one (e.g. a DP mean; the step-0 checkpoint holds it). True when the
        data were transformed or released here."""
        return False

    def next_batch(self, method, sampler_gen: torch.Generator, step: int, target_steps: int):
        """This step's batch (the method samples the private records), or None to skip the step."""
        raise NotImplementedError

    def reads_training_records(self, cfg) -> Optional[str]:
        """The evaluation protocol that computes statistics of the private training records (published beside
        the run's results, not covered by its guarantee: the privacy report says so), else None."""
        return None

    def should_log(self, step: int) -> bool:
        """Extra log points besides every ``trainer.log_every`` steps (e.g. each epoch's end)."""
        return False

    def log_fields(self, step: int, last: bool, method, models) -> Dict[str, Any]:
        """Fields a log line adds (default: epsilon every tenth line and at the end)."""
        every = self.cfg.trainer.log_every * 10
        return {"epsilon": method.epsilon()} if method.private and (step % every == 0 or last) else {}

    def evaluation_estimate(self, cfg) -> "tuple[float, str]":
        """(rough seconds, a description) of what ``evaluate`` will do, for the long-run notice."""
        return 0.0, ""

    #: the overrides the long-run notice suggests for a quick run of this task
    quick_overrides = "trainer.steps=<fewer>"

    def evaluate(self, cfg, models, method, device, output_dir: Path) -> Dict[str, Any]:
        """The task's metrics of the trained (or averaged) networks, after training. A long evaluation hands each
        finished part to :meth:`part_done`, so that an interruption keeps it."""
        return {}

    #: set by the run while it evaluates: writes the metrics finished so far (dpgen.train.run.Run.finish)
    on_part: Optional[Callable[[Dict[str, Any], str], None]] = None

    def part_done(self, metrics: Dict[str, Any], left: str) -> None:
        """``metrics`` (this evaluation's, so far) are final; ``left``: what the evaluation still does."""
        if self.on_part is not None:
            self.on_part(metrics, left)

    def summary(self, metrics: Dict[str, Any], output_dir: Path) -> None:
        """Print what a user reads at the end of a run."""

    # ---- running -------------------------------------------------------------------------------
    @classmethod
    def run(cls, cfg, output_dir: Optional[Path] = None) -> Dict[str, Any]:
        """Run the task in a fresh (or resumed) run folder with ``config.yaml``; print the summary."""
        out = Path(output_dir) if output_dir is not None else Path("outputs") / cls.name
        task = cls()
        metrics = fit(cfg, task, out)
        task.summary(metrics, out)
        return metrics


#: a run expected to take longer than this (training left + evaluation) says so after its first steps
LONG_RUN_S = 600.0
#: the long-run notice times NOTICE_STEPS steps after the first NOTICE_WARMUP (one-time costs: CUDA context, caches)
NOTICE_WARMUP, NOTICE_STEPS = 10, 20


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def long_run_notice(cfg, task: "Task", steps_left: int, s_per_step: float) -> Optional[str]:
    """The notice printed after a run's first steps when it will take more than :data:`LONG_RUN_S`:
    the steps left at the measured speed, the evaluation that follows, the quick-run overrides.
    Timing and step counts only (public): nothing computed from the private records."""
    train_s = steps_left * s_per_step
    eval_s, eval_what = task.evaluation_estimate(cfg)
    if train_s + eval_s <= LONG_RUN_S:
        return None
    return (f"[dpgen] this run will take about {(train_s + eval_s) / 60:.0f} min: {steps_left:,} more steps at "
            f"{s_per_step:.3g} s/step (measured) = {train_s / 60:.1f} min of training"
            + (f", then {eval_what}" + (f" (about {eval_s / 60:.1f} min)" if eval_s else " (its time is estimated "
                                          "on a CPU only)") if eval_what else "")
            + f". A quick run: {task.quick_overrides}; "
            "a long run survives interruptions with resume=auto (docs/USAGE.md, Quick runs).")


def fit(cfg, task: Task, output_dir) -> Dict[str, Any]:
    """Train ``cfg.method`` on ``task``; evaluate; write the run's files. Returns ``metrics.json``."""
    from dpgen.utils.run_dir import holding_run_dir, run_folder
    from dpgen.utils.threads import ThreadShare

    from dpgen.train.cuda_graph import check_graph_settings
    from dpgen.utils.device import resolve_device

    refuse_resume_without_checkpoint(cfg, output_dir)  # before the lock creates the folder
    check_graph_settings(cfg, resolve_device(cfg.trainer.device))  # a graph that cannot be captured: the same
    # one live process per run folder, however the run was started (the CLI claimed it already)
    with holding_run_dir(run_folder(output_dir, task.name)), ThreadShare(cfg.trainer.threads) as threads:
        run = Run(cfg, task, output_dir, threads)  # the folder, the data, the method, resumed or started
        done = run.start()  # the release before training, the step-0 checkpoint; a finished run ends here
        if done is None:
            train(run)
            done = run.finish()
        return done


def refuse_resume_without_checkpoint(cfg, output_dir) -> None:
    """``resume=true`` continues a run: a folder with neither a checkpoint nor a ledger file (a mistyped
    folder) is refused before anything is written, so that no fresh budget is spent by mistake there;
    ``resume=auto`` is the lenient one (it starts a run where there is none)."""
    from dpgen.train.publication import LEDGER_NAME

    if cfg.resume is not True or output_dir is None:
        return
    ckpts = Path(output_dir) / "checkpoints"
    if not (ckpts / "last.pt").exists() and not (ckpts / LEDGER_NAME).exists():
        raise ValueError(f"resume=true, but {output_dir} holds no checkpoint ({ckpts / 'last.pt'}): there is no run "
                         "to continue. Give the run's folder (hydra.run.dir=<its folder>), or use resume=auto, which "
                         "starts a new run where there is none.")


class NonFiniteGuard:
    """The first step whose released value (the published loss, else the released gradient) was not finite,
    kept on the device: no host synchronisation per step; read only at log and checkpoint steps
    (:meth:`Run.after_step`), where a bad step stops the run with its number."""

    def __init__(self, device) -> None:
        self.first_bad = torch.zeros((), dtype=torch.long, device=device)

    def observe(self, run: Run, logs) -> None:
        ok = run.method.released_finite(logs, run.state.params).to(self.first_bad.device, non_blocking=True)
        self.first_bad = torch.where(ok | (self.first_bad > 0), self.first_bad,
                                     torch.full_like(self.first_bad, run.step + 1))

    def check(self, run: Run, logs) -> None:
        bad = int(self.first_bad)
        if bad > 0:
            m = run.method
            run.stop_training("the published loss" if m.publishes_loss and "loss" in logs else
                              "the released gradient", bad)


class LongRunNotice:
    """After a run's first steps, one notice when it will take more than :data:`LONG_RUN_S`. The run's own speed
    is timed over the NOTICE_STEPS steps after NOTICE_WARMUP (the first steps carry one-time costs: a CUDA
    context, caches), with one device synchronisation at each end of that window, once per run, so that queued
    GPU work is counted."""

    def __init__(self) -> None:
        self.t_warm: Optional[float] = None
        self.s_warm = 0
        self.warned = False

    def before_step(self, run: Run, bar) -> None:
        step = run.step
        if self.t_warm is None and step - run.clock.step0 >= NOTICE_WARMUP:
            _sync(run.device)
            self.t_warm, self.s_warm = time.time(), step
        elif not self.warned and self.t_warm is not None and step - self.s_warm >= NOTICE_STEPS:
            self.warned = True
            _sync(run.device)
            note = long_run_notice(run.cfg, run.task, run.target_steps - step,
                                   (time.time() - self.t_warm) / (step - self.s_warm))
            if note:
                bar.write(note)


def graphed_step(run: Run):
    """The step as a :class:`dpgen.train.cuda_graph.GraphedStep` under trainer.cuda_graph=true, else None."""
    if not run.cfg.trainer.cuda_graph:
        return None
    from dpgen.train.cuda_graph import GraphedStep

    return GraphedStep(run)


def train(run: Run) -> None:
    """The loop: a batch, the method's step (its mechanism inside), the optimizer, the EMA, the ledger's count,
    then :meth:`Run.after_step` (log, checkpoint, hand-over). SIGUSR2 (SLURM's time-limit or preemption warning
    through submitit), SIGTERM and Ctrl-C are held until the step ends; the checkpoint (and its ledger) is
    written, then the run hands over."""
    from tqdm.auto import tqdm

    from dpgen.train.signals import StopRequest

    cfg, method = run.cfg, run.method
    bar = tqdm(total=run.target_steps, initial=run.step, desc=f"{cfg.method.name} on {cfg.dataset.name}",
               disable=not cfg.trainer.progress, dynamic_ncols=True)
    run.start_loop()
    guard, notice = NonFiniteGuard(run.device), LongRunNotice()
    graphed = graphed_step(run)  # trainer.cuda_graph: the same step, replayed from a CUDA graph once warm
    with StopRequest() as stop:
        while run.step < run.target_steps:
            run.threads.rebalance()
            notice.before_step(run, bar)
            batch = run.task.next_batch(method, run.state.sampler_gen, run.step, run.target_steps)
            if batch is None:
                run.skip_step(bar)
                continue
            if graphed is not None:
                logs = graphed(batch)  # the step, the optimizer and the EMA
                guard.observe(run, logs)
            else:
                st = run.state
                st.opt.zero_grad(set_to_none=True)
                logs = method.step(st.nets, batch)
                guard.observe(run, logs)
                st.opt.step()
                if st.ema is not None:
                    st.ema.update(st.nets)
            method.account()  # the mechanism ran, finite or not: the ledger counts it (on the host)
            run.after_step(logs, guard, stop, bar)
    if stop.requested:  # it came during the last step: the final checkpoint is written, hand over
        run.hand_over(stop, bar)
    bar.close()


__all__ = ["LongRunNotice", "NonFiniteGuard", "Task", "fit", "train"]
