"""dpgen: optimal transport meets differential privacy (README.md)."""

import os as _os

# POT (the ``ot`` package) imports JAX, CuPy and TensorFlow at import time when they are installed, and
# JAX's first array reserves 75 % of the GPU's memory for JAX: on a CUDA machine with JAX installed the
# torch code of the same process (and of its neighbours) then runs out of GPU memory (seen on an H200:
# JAX held 105 of 140 GiB). dpgen calls POT with numpy and torch arrays only, so POT's other backends are
# left off unless the environment says otherwise.
for _key in ("POT_BACKEND_DISABLE_JAX", "POT_BACKEND_DISABLE_CUPY", "POT_BACKEND_DISABLE_TENSORFLOW"):
    _os.environ.setdefault(_key, "1")
