"""What ``sgblas.runtime.build`` decides without compiling anything: which variants a device is
built for."""

from __future__ import annotations

from sgblas.kernels.spec import REGISTRY
from sgblas.runtime.build import runnable


def test_only_the_variants_a_device_can_run_are_built_for_it():
    """A row above the device's compute capability is neither compiled nor loaded for it (the
    SIMT rows' cp.async does not exist below sm_80): on sm_75 the general kernels, the scale
    kernel, the reduction and the packing copy remain."""
    assert runnable(REGISTRY, (9, 0)) == list(REGISTRY)
    old = runnable(REGISTRY, (7, 5))
    assert old and all(s.min_cc <= (7, 5) for s in old)
    assert {s.role for s in old} == {"gemm", "scale", "reduce", "pack"}
    assert all(s.backstop for s in old if s.role == "gemm")
