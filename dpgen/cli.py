"""The Hydra application: ``dpgen <overrides>`` (console script) and ``python run.py <overrides>``.

    dpgen                                            # the embedded default (see conf/config.yaml)
    dpgen task=accounting method=dpswd dataset=mnist privacy.epsilon=10 privacy.delta=1e-5
    dpgen experiment=dpswd_table4_mnist_b            # a paper preset (conf/experiment/)
    dpgen -m method=dpswd,dpsinkhorn                 # a sweep (Hydra multirun)
    dpgen --help                                     # this list, the subcommands and the config groups
    dpgen <overrides> --cfg job                      # the composed config of a run, printed (Hydra)
    dpgen sample <run folder> n=60000                # release a synthetic set + datasheet (dpgen/release.py)
    dpgen collect <sweep folder>                     # a sweep's summary rebuilt from its job folders
    dpgen table=<name> scale=smoke|cpu|paper         # a table of conf/table/ (dpgen/tables/declared.py);
    dpgen table <name> --scale smoke                 #   the same; `dpgen table` lists them

The config tree is ``dpgen/conf`` (in a checkout a link to the repository's top-level ``conf/``;
in an installed package a copy), so an installed dpgen runs from any folder. Bad config (unknown
key or choice, invalid value), a missing file or a stopped run ends with ``dpgen: error: ...``
naming it, exit code 2; a misspelled key or choice gets one message, the closest known one.

This module stays light (no torch, no Hydra at import): ``dpgen --help`` and the subcommands answer at once,
and the Hydra application (``dpgen.app``) is imported only for a run.
"""

import os
import sys
from pathlib import Path

#: subcommands that are not Hydra runs: ``dpgen <name> ...`` -> module.main(argv) -> exit code
SUBCOMMANDS = {"sample": "dpgen.release", "collect": "dpgen.sweeps", "table": "dpgen.tables.declared"}

#: one line per subcommand and per kind of run, for ``dpgen --help``
USAGE = """usage: dpgen [<key>=<value> ...]           a run (Hydra overrides; none: the embedded default)
       dpgen -m <key>=<a>,<b> ...             a sweep, one run per combination (add hydra/launcher=submitit_slurm)
       dpgen sample <run folder> [n=N]        release a synthetic set + DATASHEET from a finished run
       dpgen collect <sweep folder>           rebuild a sweep's summary from its job folders
       dpgen table [<name>] [--scale S]       run a table of conf/table/ (none: list them); also table=<name>
       dpgen <overrides> --cfg job            print the composed config without running (Hydra)
       dpgen --hydra-help                     Hydra's own options

examples:
       dpgen method=dpswd dataset=mnist privacy.epsilon=3
       dpgen task=accounting method=dpsinkhorn dataset=mnist
       dpgen experiment=dpsinkhorn_dct_mnist resume=auto hydra.run.dir=outputs/my_run
       dpgen dataset=folder dataset.path=<dir of class folders> (your own images; README "Your own data")
"""


#: folders of the config tree that are not config groups of a run (the tables: ``dpgen table``)
NOT_GROUPS = ("hydra", "table", "__pycache__")


def _override(args, key: str):
    """The value of ``key=<value>`` on the command line (the last one), else None."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(key + "=")]
    return values[-1] if values else None


def print_help() -> None:
    """``dpgen --help``: the commands, then each config group with its choices (read from the config folder's
    file names: no config is composed and nothing heavy is imported)."""
    conf = Path(__file__).resolve().parent / "conf"
    print(USAGE)
    print("config groups (<group>=<choice>; conf/<group>/<choice>.yaml):")
    import textwrap

    for group in sorted(p for p in conf.iterdir() if p.is_dir() and p.name not in NOT_GROUPS):
        choices = sorted(f.stem for f in group.glob("*.yaml"))
        shown = ", ".join(choices) if len(choices) <= 30 else ", ".join(choices[:30]) + f", ... ({len(choices)})"
        print(textwrap.fill(shown, 118, initial_indent=f"  {group.name:<11} ", subsequent_indent=" " * 14))
    print("\nkeys: trainer.*, privacy.*, task.*, model.*, method.*, dataset.*: each documented in its YAML under conf/; "
          "`dpgen <overrides> --cfg job` prints them all")


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
    """``dpgen --help``, ``dpgen sample|collect|table ...``, else a Hydra run with the command line's overrides."""
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]):
        print_help()
        sys.exit(0)
    if args and args[0] in SUBCOMMANDS:
        import importlib

        sys.exit(importlib.import_module(SUBCOMMANDS[args[0]]).main(args[1:]))
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
    _run_hydra(args)


def _run_hydra(args) -> None:
    from dpgen import app

    folder = _override(args, "hydra.run.dir")
    app.BEFORE.clear()
    if folder is not None:
        path = Path(folder).resolve()
        app.BEFORE[path] = set(os.listdir(path)) if path.is_dir() else None
    from dpgen.utils.held_stderr import hold_stderr, release_stderr

    # a sweep's launcher prints as it goes; a single run's stderr is held while Hydra composes
    held = hold_stderr(keep_going="-m" in args or "--multirun" in args)
    try:
        app.hydra_main()
    except SystemExit as e:
        if e.code == 1 and held is not None and held.open:  # Hydra refused an override: say the closest instead
            from dpgen.config import CONFIG_DIR, compose_raw
            from dpgen.utils.suggest import override_hint

            hint = override_hint(args, CONFIG_DIR, compose_raw)
            if hint:
                held.release(keep=False)
                print(f"dpgen: error: {hint}", file=sys.stderr)
                sys.exit(2)
        raise
    finally:
        release_stderr()


if __name__ == "__main__":
    main()
