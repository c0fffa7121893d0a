"""A pytest plugin for a machine without a GPU: torch.cuda.is_available() returns True, so every test that takes
a CUDA path fails on this CPU ("Found no NVIDIA driver") and is listed, the candidates to read when a GPU suite
fails and no GPU is at hand (docs/SPEED.md, "Finding the CUDA failures without a GPU"):

    PYTHONPATH=scripts/device python -m pytest -p fake_cuda -n 1 -q -rfE -p no:cacheprovider

The memory-fraction call of tests/conftest.py and empty_cache are stubbed (they would fail every test).
A diagnostic only: never load it in a real run.
"""

import torch

torch.cuda.is_available = lambda: True
torch.cuda.set_per_process_memory_fraction = lambda *a, **k: None
torch.cuda.empty_cache = lambda *a, **k: None
