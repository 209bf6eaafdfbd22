"""The tests' name for the device-case helpers of :mod:`sgblas.testing`, the one testing toolkit.

``Case`` is :class:`sgblas.testing.GemmCase`: random column-major operands of one sgemm call
with padded leading dimensions, on the host and the device, and its check against the float64
reference (the message names the seed).
"""

from __future__ import annotations

from sgblas.testing import GemmCase as Case
from sgblas.testing import column_major, stored_shape

__all__ = ["Case", "column_major", "stored_shape"]
