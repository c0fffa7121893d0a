#!/usr/bin/env python
"""Run every table and figure target that needs no dataset, two at a time (``make tables``).

Each target is a module of dpgen.tables run in its own process; the wall time of each and of
the whole is printed at the end.
"""

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

TARGETS = [
    ("table-dpswd-noise", ["dpgen.tables.declared", "dpswd_table4_noise", "--scale", "paper"]),
    ("fig-dpswd-sensitivity", ["dpgen.tables.declared", "dpswd_sensitivity_check", "--scale", "paper"]),
    ("table-wdp-mechanisms + fig-wdp-orders", ["dpgen.tables.declared", "wdp_mechanisms", "--scale", "paper"]),
    ("fig-wdp-composition", ["dpgen.tables.declared", "wdp_composition", "--scale", "paper"]),
    ("fig-wdp-beta-delta", ["dpgen.tables.declared", "wdp_beta_delta", "--scale", "paper"]),
    ("check-dpsinkhorn-privacy", ["dpgen.tables.declared", "dpsinkhorn_privacy", "--scale", "paper"]),
    ("fig-dpswd-toy (smoke)", ["dpgen.tables.declared", "dpswd_toy", "--scale", "smoke"]),
]


def run(target):
    name, (module, *args) = target
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                       env={**os.environ, "MPLBACKEND": "Agg"})
    return name, p, time.time() - t0


def main():
    t0 = time.time()
    jobs = int(os.environ.get("JOBS", min(2, os.cpu_count() or 1)))
    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        results = list(ex.map(run, TARGETS))
    for name, p, dt in results:
        print(f"\n===== {name} ({dt:.1f} s) =====")
        print(p.stdout.rstrip())
        if p.returncode != 0:
            print(p.stderr.rstrip(), file=sys.stderr)
            failed.append(name)
    print("\n===== summary =====")
    for name, p, dt in results:
        print(f"{name:42s} {dt:6.1f} s  {'ok' if p.returncode == 0 else 'FAILED'}")
    print(f"{'make tables (wall)':42s} {time.time() - t0:6.1f} s with {jobs} parallel jobs")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
