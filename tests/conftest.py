"""Test configuration: run the kernels under Numba's CUDA simulator when no GPU is present.

The switch must happen before anything imports ``numba.cuda``, so the GPU probe talks to the
driver library directly instead of through Numba.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from pathlib import Path

import pytest


def _gpu_present() -> bool:
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


GPU_PRESENT = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0") and _gpu_present()
SIMULATOR_POOLED = False
if not GPU_PRESENT:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from helpers import pool_simulator

    SIMULATOR_POOLED = pool_simulator()


def _gpu_count() -> int:
    if not GPU_PRESENT:
        return 0
    from numba import cuda

    return len(cuda.gpus)


def pytest_collection_modifyitems(config, items):
    # The tests that read PTX go last, so that the background compile (pytest_collection_finish)
    # has the whole run to get ahead of them.
    readers = [item for item in items if item.get_closest_marker("ptx")]
    if readers:
        items[:] = [item for item in items if not item.get_closest_marker("ptx")] + readers
    if GPU_PRESENT:
        multi = _gpu_count() >= 2
        skip_multi = pytest.mark.skip(reason="needs two or more CUDA GPUs")
        for item in items:
            if "multigpu" in item.keywords and not multi:
                item.add_marker(skip_multi)
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (running under the CUDA simulator)")
    for item in items:
        if "gpu" in item.keywords or "multigpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_collection_finish(session):
    import helpers

    modules = {Path(str(item.fspath)).stem for item in session.items if item.get_closest_marker("ptx")}
    targets = helpers.ptx_targets(modules)
    if targets:
        session.config._sgblas_ptx_dir = tempfile.mkdtemp(prefix="sgblas-ptx-")
        helpers.start_ptx(session.config._sgblas_ptx_dir, targets)


def pytest_sessionfinish(session, exitstatus):
    import helpers

    helpers.stop_ptx()
    out_dir = getattr(session.config, "_sgblas_ptx_dir", None)
    if out_dir:
        shutil.rmtree(out_dir, ignore_errors=True)


def pytest_report_header(config):
    if GPU_PRESENT:
        return "sgblas tests: real GPU"
    loop = "pooled block threads" if SIMULATOR_POOLED else "numba-cuda's own block loop"
    return f"sgblas tests: CUDA simulator (no GPU found), {loop}"


@pytest.fixture(autouse=True)
def _forget_array_devices():
    """Tests that fake the pointer query, the registry or the device's properties leave answers behind
    (remembered pointer devices, shared plan memos); no test sees another's."""
    yield
    import sys

    operands = sys.modules.get("sgblas.operands")
    if operands is not None:
        operands.forget_devices()
    plans = sys.modules.get("sgblas.dispatch.plan")
    if plans is not None:
        plans.forget_plans()
