"""The tests' shared helpers: the device-case helpers of :mod:`sgblas.testing`, the one testing
toolkit, and the environment of the fresh processes some tests start.

``Case`` is :class:`sgblas.testing.GemmCase`: random column-major operands of one sgemm call
with padded leading dimensions, on the host and the device, and its check against the float64
reference (the message names the seed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from sgblas.testing import GemmCase as Case
from sgblas.testing import column_major, stored_shape

__all__ = ["Case", "column_major", "stored_shape", "REPO", "TESTS", "child_env"]

#: The checkout's root, and its tests folder.
REPO: str = str(Path(__file__).resolve().parents[1])
TESTS: str = str(Path(__file__).resolve().parent)


def child_env(*, drop: Iterable[str] = (), **variables: str) -> dict[str, str]:
    """The environment of a fresh Python process a test starts: this process's, less the
    variables in ``drop``, plus ``variables``, with the checkout and its ``tests`` folder (a
    test module a child imports takes its helpers from there) first on ``PYTHONPATH`` and the
    entries already there kept (where a machine's packages are installed beside the system's,
    the child needs them too)."""
    dropped = set(drop)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(variables)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, TESTS, env.get("PYTHONPATH", "")) if p)
    return env
