"""The Hydra application behind ``dpgen <overrides>`` (``dpgen.cli.main`` starts it after its own checks): compose
and validate the config, claim the run folder, run the task, and end bad input with ``dpgen: error:`` and exit 2."""

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from dpgen.config import ConfigError, register_configs, validate
from dpgen.privacy.validation import PrivacyParameterError
from dpgen.train.state import TrainingError

register_configs()

#: exit status after Ctrl-C outside a training step (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130

#: the run folder named on the command line (``hydra.run.dir=``) and what it held before Hydra wrote into it
#: (None: it did not exist): a run refused before any result removes only what it added
BEFORE: dict = {}


def say_recipe(conf, choices) -> None:
    """A generation run on images says which recipe it trains with: an experiment preset, a tuned file
    (conf/tuned/<method>_<dataset>.yaml; the own-data recipe for dataset=folder / npz), or the method's defaults,
    with the one override that gives the own-data recipe to a data set that has none."""
    if conf.task.name != "generation" or len(conf.dataset.shape) != 3:
        return
    from dpgen.config import CONFIG_DIR

    method, name = conf.method.name, conf.dataset.name
    shape = " x ".join(map(str, conf.dataset.shape))
    if choices.get("experiment"):
        print(f"[dpgen] recipe: the preset conf/experiment/{choices['experiment']}.yaml ({method} on {name}, {shape})")
    elif choices.get("tuned") and (CONFIG_DIR / "tuned" / f"{choices['tuned']}.yaml").exists():
        # (Hydra names an optional default's choice even when its file is absent: dataset=usps8 -> dpsinkhorn_usps8)
        print(f"[dpgen] recipe: conf/tuned/{choices['tuned']}.yaml ({method} on {name}, {shape}"
              + (f"; DCT {conf.model.dct_size or min(10, *conf.dataset.shape[1:])} x "
                 f"{conf.model.dct_size or min(10, *conf.dataset.shape[1:])} per channel"
                 if conf.model.generator == "dct" else "") + ")")
    elif (CONFIG_DIR / "tuned" / f"{method}_folder.yaml").exists():
        print(f"[dpgen] {method} on dataset={name} ({shape}) has no recipe of its own (conf/tuned/{method}_{name}.yaml):"
              f" the method's defaults run, which the papers tuned for their data. For images of your own, "
              f"tuned={method}_folder gives the own-data recipe, chosen by shape (README \"Your own data\")")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def hydra_main(cfg: DictConfig):
    from hydra.core.hydra_config import HydraConfig

    from dpgen.tasks import TASKS
    from dpgen.utils.run_dir import RunDirBusy, RunLog, claim_run_dir, discard_if_empty

    from dpgen.utils.held_stderr import release_stderr

    release_stderr()  # the config is composed: what Hydra and the run print goes out as it comes
    folder = Path(HydraConfig.get().runtime.output_dir)
    log = None
    try:
        conf = validate(cfg)
        if os.environ.get("SUBMITIT_EXECUTOR") and conf.resume is False:
            # a submitit job that hits its time limit (or is preempted) is requeued and runs again in
            # its own folder: it continues from its checkpoint with the same ledger
            conf.resume = "auto"
        say_recipe(conf, HydraConfig.get().runtime.choices)
        task = TASKS[conf.task.name]
        # one live run per folder: a fresh run whose folder is taken moves to <folder>-1, ...
        out = claim_run_dir(folder, conf.resume)
        folder = out
        log = RunLog(out).__enter__()  # <run>/run.log: what the run prints
        return task(conf, output_dir=out)
    except (ConfigError, PrivacyParameterError, FileNotFoundError, TrainingError, ValueError, RunDirBusy) as e:
        # bad input or a stopped run: the message names the value / file / step and the fix
        print(f"dpgen: error: {e}", file=sys.stderr)
        if log is not None:
            log.__exit__(None, None, None)
            log = None
        # a single run that failed before any result leaves no folder (a folder that existed before keeps what it
        # held); a sweep's job keeps its run.log (the summary reads the error from it)
        if HydraConfig.get().mode.name == "RUN":
            discard_if_empty(folder, existed=BEFORE.get(Path(folder).resolve(), None))
        sys.exit(2)
    except KeyboardInterrupt:
        # Ctrl-C outside a training step (setup, evaluation), or a second one inside a step: one line, no traceback.
        # A first Ctrl-C during training ends the step, writes a checkpoint and exits 130 (dpgen.train.signals).
        print(f"dpgen: interrupted (Ctrl-C): what {folder} holds is kept; continue with the same command and "
              f"resume=auto hydra.run.dir={folder}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        if log is not None:
            log.__exit__(None, None, None)

