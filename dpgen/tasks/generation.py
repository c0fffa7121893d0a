"""``task=generation``: train a generator with the shared trainer, evaluate it, print a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict



def run_generation(cfg, output_dir: Path | None = None) -> Dict[str, Any]:
    from dpgen.train import train_generative
    from dpgen.utils.run_dir import start_run_dir

    out = start_run_dir(cfg, output_dir, "generation")
    m = train_generative(cfg, out)
    p = m["privacy"]
    print(f"\n{m['method']} on {m['dataset']}: {m['steps']} steps ({m['stop_reason']}), "
          f"{m['train_seconds']:.1f} s training on {m['device']}")
    if p.get("private") and "noise_scale" in p:  # a local mechanism (entropic_ldp): one release, per record
        print(f"  privacy: ({p['epsilon_spent']:g}, {p['delta']:.3g})-LDP per record, {p['mechanism']}; "
              "independent of the training steps (Remark 1)")
    elif p.get("private"):
        detail = (f"{p['bound']} bound, k={p['k']}, rows: {p['row_bound']}" if "bound" in p else
                  f"{p.get('sampling', '')} sampling, q={p.get('sample_rate', float('nan')):.4g}")
        print(f"  privacy: epsilon spent {p['epsilon_spent']:.4f} of {p['epsilon_budget']} at delta "
              f"{p['delta']:.3g} (sigma {p['sigma']:.4g}, {detail})")
    else:
        print("  privacy: none (non-private baseline)")
    for name, r in (m.get("downstream") or {}).items():
        if isinstance(r, dict) and "test_acc" in r:
            print(f"  downstream {name}: {r['test_acc']:.2f}% on the real test split ({m['downstream']['n_test']} "
                  f"images), trained on {m['downstream']['n_synthetic']} synthetic samples")
    print(f"  files: {out / 'metrics.json'}" + (f", {m['samples_png']}" if "samples_png" in m else ""))
    return m
