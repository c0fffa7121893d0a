"""Does DP-Sinkhorn's stated training length reach epsilon 10? A computed table, ``conf/table/dpsinkhorn_privacy.yaml``,
run by ``dpgen table dpsinkhorn_privacy --scale paper`` (``make check-dpsinkhorn-privacy``; ``smoke``: without the
slower PRV accountant).

For each row of the packaged paper table ``dpsinkhorn_privacy_settings`` (noise multiplier sigma,
Poisson rate q, delta, steps stated in appendix D.4) this computes epsilon at the stated number
of steps under several accountants and the number of steps at which epsilon reaches 10.

Writes outputs/tables/dpsinkhorn_privacy.csv (+ .md).
"""

from __future__ import annotations

from dpgen.privacy.accountants import epsilon_for
from dpgen.privacy.calibration import steps_to_epsilon
from dpgen.utils.paper import read_paper_table

#: the budget the paper states its settings reach (the column ``steps_to_eps10`` is named after it)
TARGET = 10.0

ACCOUNTANTS = {
    "rdp": "autodp Poisson-subsampled RDP (Zhu & Wang 2019), classic RDP->DP conversion",
    "moments": "moments accountant (Abadi et al. 2016), dpgen's own implementation",
    "opacus_rdp": "opacus RDP (Mironov et al. 2019), improved RDP->DP conversion (Balle et al. 2020)",
    "opacus_prv": "opacus PRV accountant (Gopi et al. 2021), numerically tight",
}


def compute(settings, run_root=None, data_root=None, seed=0, progress=True, dataset=None, select=None):
    """Each stated setting's rows; ``settings["prv"]``: also the PRV accountant (about a second per evaluation).
    Deterministic, no run, no data: the other arguments are unused. Pictures: none."""
    return compute_rows(TARGET, with_prv=bool(settings["prv"])), {}


def compute_rows(target: float = TARGET, with_prv: bool = True):
    rows = []
    for r in read_paper_table("dpsinkhorn_privacy_settings"):
        delta = float(r["delta"])
        z = float(r["noise_multiplier"])
        q = float(r["sampling_rate"])
        steps = int(float(r["steps_stated"]))
        for acc in ACCOUNTANTS:
            if acc == "opacus_prv" and not with_prv:
                continue
            eps = epsilon_for(z, q, steps, delta, "poisson", acc)
            # PRV is ~1 s per evaluation: its step count is not searched (left empty)
            t10 = None if acc == "opacus_prv" else steps_to_epsilon(target, delta, z, q, "poisson", acc)
            rows.append(
                {
                    "dataset": r["dataset"],
                    "delta": delta,
                    "noise_multiplier": z,
                    "sampling_rate": q,
                    "steps_stated": steps,
                    "accountant": acc,
                    "epsilon_at_stated_steps": round(eps, 4),
                    "steps_to_eps10": t10,
                }
            )
    return rows


def notes_for(rows, settings=None, scale=None, dataset=None, target: float = TARGET):
    notes = [f"{k}: {v}." for k, v in ACCOUNTANTS.items()]
    notes.append(
        "The mechanism: image gradient clipped to C, noise std 2 C sigma, sensitivity 2C, so the noise "
        "multiplier is sigma; Poisson sampling of the real batch with rate q (appendix D.4)."
    )
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        rr = {r["accountant"]: r for r in rows if r["dataset"] == ds}
        ref = rr["rdp"]
        holds = ref["epsilon_at_stated_steps"] <= target * 1.01
        verdict = "holds" if holds else "does NOT hold"
        notes.append(
            f"{ds}: the paper states {ref['steps_stated']:,} steps reach epsilon {target:g} at delta "
            f"{ref['delta']:g}. With the accountant the paper used (TF-Privacy compute_rdp, the RDP of "
            f"the Poisson-subsampled Gaussian with the classic conversion; 'rdp' and 'moments' here) "
            f"epsilon is {ref['epsilon_at_stated_steps']:.3f} and 10 is reached after "
            f"{ref['steps_to_eps10']:,} steps: the statement {verdict}"
            + (
                "."
                if holds
                else f" (the stated run spends {ref['epsilon_at_stated_steps'] / target:.2f}x the budget; "
                f"{ref['steps_to_eps10'] / ref['steps_stated']:.0%} of the stated steps fit in epsilon {target:g})."
            )
        )
        if "opacus_prv" in rr:
            notes.append(
                f"{ds}: tighter accountants give epsilon {rr['opacus_rdp']['epsilon_at_stated_steps']:.3f} "
                f"(opacus RDP) and {rr['opacus_prv']['epsilon_at_stated_steps']:.3f} (PRV) at the stated steps."
            )
    return notes
