"""The Hydra application: ``dpgen <overrides>`` (console script) and ``python run.py <overrides>``.

    dpgen                                            # the embedded default (see conf/config.yaml)
    dpgen task=accounting method=dpswd dataset=mnist privacy.epsilon=10 privacy.delta=1e-5
    dpgen experiment=dpswd_table4_mnist_b            # a paper preset (conf/experiment/)
    dpgen -m method=dpswd,dpsinkhorn                 # a sweep (Hydra multirun)
    dpgen --help                                     # config groups and options
    dpgen sample <run folder> n=60000                # release a synthetic set + datasheet (dpgen/release.py)
    dpgen collect <sweep folder>                     # a sweep's summary rebuilt from its job folders
    dpgen table=<name> scale=smoke|cpu|paper         # a table of conf/table/ (dpgen/tables/declared.py);
    dpgen table <name> --scale smoke                 #   the same; `dpgen table` lists them

The config tree is ``dpgen/conf`` (in a checkout a link to the repository's top-level ``conf/``;
in an installed package a copy), so an installed dpgen runs from any folder. Bad config (unknown
key or choice, invalid value), a missing file or a stopped run ends with ``dpgen: error: ...``
naming it, exit code 2.
"""

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from dpgen.config import ConfigError, register_configs, validate
from dpgen.privacy.validation import PrivacyParameterError
from dpgen.train.state import TrainingError

register_configs()


#: subcommands that are not Hydra runs: ``dpgen <name> ...`` -> module.main(argv) -> exit code
SUBCOMMANDS = {"sample": "dpgen.release", "collect": "dpgen.sweeps", "table": "dpgen.tables.declared"}

#: exit status after Ctrl-C outside a training step (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130

#: the run folder named on the command line (``hydra.run.dir=``) and what it held before Hydra wrote into it
#: (None: it did not exist): a run refused before any result removes only what it added
_BEFORE: dict = {}


def _override(args, key: str):
    """The value of ``key=<value>`` on the command line (the last one), else None."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(key + "=")]
    return values[-1] if values else None


def refuse_resume_without_run(args) -> None:
    """``resume=true`` continues a run: without its folder (``hydra.run.dir=``), or in a folder with neither a
    checkpoint nor a ledger file, it is refused BEFORE Hydra writes ``.hydra/`` and ``run.log`` into a folder
    (a user's empty folder stays as it was). ``resume=auto`` is the lenient one."""
    from dpgen.train.publication import LEDGER_NAME

    if "-m" in args or "--multirun" in args or str(_override(args, "resume")).lower() != "true":
        return
    folder = _override(args, "hydra.run.dir")
    if folder is None:
        raise ValueError("resume=true continues a run, but no run folder is given: add hydra.run.dir=<its folder> "
                         "(or use resume=auto, which starts a new run where there is none)")
    ckpts = Path(folder) / "checkpoints"
    if not (ckpts / "last.pt").exists() and not (ckpts / LEDGER_NAME).exists():
        raise ValueError(f"resume=true, but {folder} holds no checkpoint ({ckpts / 'last.pt'}): there is no run "
                         "to continue. Give the run's folder (hydra.run.dir=<its folder>), or use resume=auto, which "
                         "starts a new run where there is none.")


def main():
    """``dpgen sample ...`` / ``dpgen collect ...``, else a Hydra run with the command line's overrides."""
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        import importlib

        sys.exit(importlib.import_module(SUBCOMMANDS[sys.argv[1]]).main(sys.argv[2:]))
    args = sys.argv[1:]
    table = _override(args, "table")
    if table is not None:  # `dpgen table=<name> scale=<scale>`: the same as `dpgen table <name> --scale <scale>`
        from dpgen.tables.declared import main as table_main

        rest = [a for a in args if not a.startswith(("table=", "scale="))]
        sys.exit(table_main([table, "--scale", _override(args, "scale") or "smoke", *rest]))
    try:
        refuse_resume_without_run(args)
    except ValueError as e:
        print(f"dpgen: error: {e}", file=sys.stderr)
        sys.exit(2)
    folder = _override(args, "hydra.run.dir")
    _BEFORE.clear()
    if folder is not None:
        path = Path(folder).resolve()
        _BEFORE[path] = set(os.listdir(path)) if path.is_dir() else None
    try:
        hydra_main()
    except SystemExit as e:
        if e.code == 1:  # Hydra refused an override (printed above): name the closest key or choice
            from dpgen.config import CONFIG_DIR, compose_raw
            from dpgen.utils.suggest import override_hint

            hint = override_hint(sys.argv[1:], CONFIG_DIR, compose_raw)
            if hint:
                print(f"dpgen: error: {hint}", file=sys.stderr)
                sys.exit(2)
        raise


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def hydra_main(cfg: DictConfig):
    from hydra.core.hydra_config import HydraConfig

    from dpgen.tasks import TASKS
    from dpgen.utils.run_dir import RunDirBusy, RunLog, claim_run_dir, discard_if_empty

    folder = Path(HydraConfig.get().runtime.output_dir)
    log = None
    try:
        conf = validate(cfg)
        if os.environ.get("SUBMITIT_EXECUTOR") and conf.resume is False:
            # a submitit job that hits its time limit (or is preempted) is requeued and runs again in
            # its own folder: it continues from its checkpoint with the same ledger
            conf.resume = "auto"
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
            discard_if_empty(folder, existed=_BEFORE.get(Path(folder).resolve(), None))
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


if __name__ == "__main__":
    main()
