"""Pins the reference engine to one CPU thread so costs and outputs are reproducible.

Intra-op parallelism makes both the timings and the float summation order depend on
scheduler noise; one thread gives bit-identical outputs and steadier window costs.
The environment must be set before torch is first imported, so adapter modules call
:func:`pin_single_thread_env` at the top, before their own ``import torch``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

__all__ = ["THREAD_ENV_VARS", "pin_single_thread_env", "pin_torch_threads"]

#: Variables the BLAS/OpenMP runtimes read once, when they load.
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def pin_single_thread_env() -> None:
    """Sets every thread-count variable to 1 for runtimes not yet loaded."""
    for name in THREAD_ENV_VARS:
        os.environ[name] = "1"


def pin_torch_threads(torch: Any) -> None:
    """Sets torch's intra-op and (when still allowed) inter-op pools to one thread."""
    torch.set_num_threads(1)
    # Allowed only before the first parallel region; a later call keeps the old pool,
    # which is harmless because inference here never forks inter-op work.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
