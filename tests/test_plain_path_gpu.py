"""On the GPU: plain calls (the path without a plan) compute bit for bit what the documented
path computes, for Numba, CuPy and PyTorch arrays, through ``sgemm`` and ``gemm``.

Each case runs twice on fresh copies of the same C: once as users call it, with a counter
proving the plain path launched, and once with the plain path switched off so that the
documented validation plans and launches. The two results must be identical.
"""

from __future__ import annotations

import numpy as np
import pytest

import sgblas
import sgblas.api

pytestmark = pytest.mark.gpu

SHAPES = [(64, 64, 64), (129, 77, 300), (512, 384, 256), (1, 1, 1), (1000, 999, 33)]


@pytest.fixture
def counted(monkeypatch):
    """The number of calls the plain path launched."""
    count = [0]
    real = sgblas.api.launch_plain

    def counting(*args):
        status = real(*args)
        if status is not None:
            count[0] += 1
        return status

    monkeypatch.setattr(sgblas.api, "launch_plain", counting)
    return count


def _no_plain_path(monkeypatch):
    monkeypatch.setattr(sgblas.api, "_sgemm_plain", lambda *args: None)
    monkeypatch.setattr(sgblas.api, "launch_plain", lambda *args: None)


def _both_paths(call, fresh_c, to_host, sync, counted, monkeypatch):
    """C after ``call(C)`` as users make it (the plain path must launch) and after the same
    call with the plain path switched off (the documented path launches)."""
    results = []
    for plain in (True, False):
        dC = fresh_c()
        with monkeypatch.context() as patch:
            if not plain:
                _no_plain_path(patch)
            before = counted[0]
            call(dC)
            assert counted[0] == before + (1 if plain else 0), f"plain path taken: {counted[0] - before}"
        sync()
        results.append(to_host(dC))
    return results


def _host(m, n, k, ta, tb, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k) if ta == "N" else (k, m), dtype=np.float32)
    b = rng.standard_normal((k, n) if tb == "N" else (n, k), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)
    return a, b, c


def _library(name):
    if name == "numba":
        from numba import cuda

        return (lambda x: cuda.to_device(np.asfortranarray(x)), lambda d: d.copy_to_host(),
                cuda.synchronize)
    if name == "cupy":
        cp = pytest.importorskip("cupy")
        return (lambda x: cp.asfortranarray(cp.asarray(x)), cp.asnumpy, cp.cuda.runtime.deviceSynchronize)
    torch = pytest.importorskip("torch")
    # torch has no Fortran order: a transposed view of a C-ordered transpose is column-major.
    return (lambda x: torch.from_numpy(np.ascontiguousarray(x.T)).cuda().t(),
            lambda d: d.cpu().numpy(), torch.cuda.synchronize)


@pytest.mark.parametrize("library", ["numba", "cupy", "torch"])
@pytest.mark.parametrize("ta, tb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
def test_sgemm_plain_path_matches_documented_path(library, ta, tb, counted, monkeypatch):
    to_device, to_host, sync = _library(library)
    h = sgblas.Handle()
    for i, (m, n, k) in enumerate(SHAPES):
        a, b, c = _host(m, n, k, ta, tb, seed=i)
        dA, dB = to_device(a), to_device(b)

        def call(dC):
            status = sgblas.sgemm(h, ta, tb, m, n, k, 0.75, dA, a.shape[0], dB, b.shape[0], -1.25, dC, m)
            assert status == sgblas.Status.SUCCESS, sgblas.last_error_message()

        results = _both_paths(call, lambda: to_device(c), to_host, sync, counted, monkeypatch)
        np.testing.assert_array_equal(results[0], results[1], err_msg=f"{library} {ta}{tb} {m}x{n}x{k}")


@pytest.mark.parametrize("library", ["numba", "cupy", "torch"])
@pytest.mark.parametrize("order", ["F", "C"])
def test_gemm_plain_path_matches_documented_path(library, order, counted, monkeypatch):
    to_device, to_host, sync = _library(library)
    h = sgblas.Handle()
    m, n, k = 300, 200, 100
    a, b, c = _host(m, n, k, "N", "N", seed=7)

    def place(x):
        if order == "F":
            return to_device(x)
        if library == "torch":
            import torch

            return torch.from_numpy(np.ascontiguousarray(x)).cuda()
        if library == "cupy":
            import cupy

            return cupy.asarray(np.ascontiguousarray(x))
        from numba import cuda

        return cuda.to_device(np.ascontiguousarray(x))

    dA, dB = place(a), place(b)
    results = _both_paths(lambda dC: sgblas.gemm(dA, dB, dC, alpha=0.5, beta=2.0, handle=h),
                          lambda: place(c), to_host, sync, counted, monkeypatch)
    np.testing.assert_array_equal(results[0], results[1])
    expected = 0.5 * a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c
    np.testing.assert_allclose(results[0], expected, rtol=1e-4, atol=1e-3)


def test_torch_tensors_the_plain_path_must_not_read():
    """A tensor that requires grad and a lazily negated view are refused with a sentence; a
    conjugate-bit view of a real tensor is the tensor itself (the plain path reads it)."""
    torch = pytest.importorskip("torch")
    h = sgblas.Handle()
    rng = np.random.default_rng(11)
    a, b = (torch.from_numpy(rng.standard_normal((64, 64), dtype=np.float32)).cuda() for _ in range(2))
    c = torch.empty(64, 64, device="cuda")
    with pytest.raises(sgblas.InvalidValueError, match="requires grad"):
        sgblas.gemm(a.clone().requires_grad_(), b, c, handle=h)
    with pytest.raises(sgblas.InvalidValueError, match="negative bit"):
        sgblas.gemm(torch._neg_view(a), b, c, handle=h)
    try:
        conj = torch._conj(a)  # the bit on a real tensor, where torch allows it
    except RuntimeError:
        conj = a
    sgblas.gemm(conj, b, c, handle=h)
    torch.cuda.synchronize()
    expected = a.double() @ b.double()
    assert torch.allclose(c.double(), expected, rtol=1e-4, atol=1e-3)
