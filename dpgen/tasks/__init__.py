"""Tasks a run can perform (``task=`` in the config)."""

from dpgen.tasks.accounting import run_accounting
from dpgen.tasks.domain_adaptation import run_domain_adaptation
from dpgen.tasks.classification import run_classification
from dpgen.tasks.generation import run_generation

TASKS = {"accounting": run_accounting, "generation": run_generation}
TASKS["classification"] = run_classification
TASKS["domain_adaptation"] = run_domain_adaptation
