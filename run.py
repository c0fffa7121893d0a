#!/usr/bin/env python
"""dpgen entry point in a checkout (the installed console script is ``dpgen``, same overrides).

    python run.py                                   # embedded default (see conf/config.yaml)
    python run.py task=accounting method=dpswd dataset=mnist privacy.epsilon=10 privacy.delta=1e-5
    python run.py experiment=dpswd_table4_mnist_b   # a paper preset (conf/experiment/)
    python run.py -m method=dpswd,dpsinkhorn        # a sweep (Hydra multirun)
    python run.py --help                            # the commands and config groups (fast: no Hydra)
    python run.py <overrides> --cfg job             # the composed config, printed

Bad config (unknown key or choice, invalid value) stops with a message naming it.
"""

from dpgen.cli import main

if __name__ == "__main__":
    main()
