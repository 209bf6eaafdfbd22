"""DLPack-only arrays of CuPy and PyTorch on a real GPU: results, and the stream handshake.

The wrapper below exposes nothing but ``__dlpack__`` and ``__dlpack_device__`` of a CuPy array
or a PyTorch tensor, so sgblas cannot take its fast readers or ``__cuda_array_interface__``
and must go through the DLPack exchange. The handshake test writes the operands on a
non-blocking producer stream behind a long kernel while the handle runs on another stream: the
result is right only if the producer was told the handle's stream, and the call must return
at once (the producer orders its work on the device; nothing waits on the host).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import sgblas
from sgblas import Status
from sgblas.operands import read_device_span
from sgblas.testing import compare

pytestmark = pytest.mark.gpu

SEED = 20261217


class DLPackOnly:
    """Only the DLPack protocol of ``inner``: no ``__cuda_array_interface__``, no fast reader."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.inner.__dlpack_device__()


class _Library:
    """Making, filling and reading back arrays of one library, in either memory order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.module = pytest.importorskip(name)
        if name == "torch" and not self.module.cuda.is_available():
            pytest.skip("PyTorch has no CUDA device here")

    def array(self, host: np.ndarray) -> Any:
        """A device copy of ``host`` with its memory order (C or Fortran)."""
        fortran = host.flags.f_contiguous and not host.flags.c_contiguous
        if self.name == "cupy":
            return self.module.array(host, order="F" if fortran else "C")
        torch = self.module
        if fortran:  # torch has no Fortran order: the transpose of a C-ordered tensor is one
            return torch.from_numpy(np.ascontiguousarray(host.T)).cuda().t()
        return torch.from_numpy(np.ascontiguousarray(host)).cuda()

    def full_fortran(self, shape: tuple[int, int], value: float) -> Any:
        if self.name == "cupy":
            return self.module.full(shape, value, dtype=self.module.float32, order="F")
        return self.module.full(shape[::-1], value, dtype=self.module.float32, device="cuda").t()

    def host(self, x: Any) -> np.ndarray:
        if self.name == "cupy":
            return self.module.asnumpy(x)
        return x.cpu().numpy()


@pytest.fixture(params=["cupy", "torch"])
def lib(request) -> _Library:
    return _Library(request.param)


def _random(rng: np.random.Generator, shape: tuple[int, int], order: str) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape), dtype=np.float32, order=order)


def _assert_product(got: np.ndarray, a: np.ndarray, b: np.ndarray, c0: np.ndarray | None,
                    alpha: float, beta: float, what: str) -> None:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if c0 is not None and beta != 0:
        ref = ref + beta * c0.astype(np.float64)
        scale = scale + abs(beta) * np.abs(c0.astype(np.float64))
    ok, ratio, where = compare(got, ref, scale, a.shape[1])
    assert ok, f"{what}: error {ratio:.3g}x tolerance at {where}"


def test_wrapper_takes_the_dlpack_path(lib):
    x = DLPackOnly(lib.array(np.zeros((4, 4), np.float32)))
    assert not hasattr(x, "__cuda_array_interface__")
    assert read_device_span(x) is None


@pytest.mark.parametrize("transa, transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
def test_sgemm_on_dlpack_only_arrays(lib, transa, transb):
    rng = np.random.default_rng(SEED)
    m, n, k = 67, 45, 33
    a = _random(rng, (m, k) if transa == "N" else (k, m), "F")
    b = _random(rng, (k, n) if transb == "N" else (n, k), "F")
    c = _random(rng, (m, n), "F")
    da, db, dc = lib.array(a), lib.array(b), lib.array(c)
    with sgblas.Handle() as h:
        status = sgblas.sgemm(h, transa, transb, m, n, k, 1.25, DLPackOnly(da), a.shape[0], DLPackOnly(db),
                              b.shape[0], 0.5, DLPackOnly(dc), m)
        assert status == Status.SUCCESS, sgblas.last_error_message()
        got = lib.host(dc)
    op_a = a if transa == "N" else a.T
    op_b = b if transb == "N" else b.T
    _assert_product(got, op_a, op_b, c, 1.25, 0.5, f"{lib.name} {transa}{transb}")


@pytest.mark.parametrize("orders", ["FFF", "CCC", "FCF", "CFC", "FFN", "CCN"])
def test_gemm_on_dlpack_only_arrays(lib, orders):
    """Either memory order for each operand (N: no c, gemm allocates it)."""
    rng = np.random.default_rng(SEED + 1)
    m, n, k = 37, 29, 41
    a, b = _random(rng, (m, k), orders[0]), _random(rng, (k, n), orders[1])
    c = None if orders[2] == "N" else _random(rng, (m, n), orders[2])
    dc = None if c is None else lib.array(c)
    with sgblas.Handle() as h:
        out = sgblas.gemm(DLPackOnly(lib.array(a)), DLPackOnly(lib.array(b)),
                          None if dc is None else DLPackOnly(dc), alpha=0.75, beta=0.5, handle=h)
        if dc is not None:
            assert isinstance(out, DLPackOnly) and out.inner is dc
            got = lib.host(dc)
        else:
            got = out.copy_to_host() if hasattr(out, "copy_to_host") else lib.host(out)
    _assert_product(got, a, b, c, 0.75, 0.5, f"{lib.name} {orders}")


_SPIN = r"""
extern "C" __global__ void spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
"""


class _Streams:
    """A producer and a consumer stream of one library, and a long kernel on the producer."""

    def __init__(self, lib: _Library) -> None:
        self.lib = lib
        if lib.name == "cupy":
            cupy = lib.module
            self.producer = cupy.cuda.Stream(non_blocking=True)
            self.consumer = cupy.cuda.Stream(non_blocking=True)
            self._spin = cupy.RawKernel(_SPIN, "spin")
        else:
            torch = lib.module
            self.producer = torch.cuda.Stream()  # PyTorch's streams are non-blocking
            self.consumer = torch.cuda.Stream()

    def producing(self) -> Any:
        """A context in which the producer is the library's current stream."""
        if self.lib.name == "cupy":
            return self.producer
        return self.lib.module.cuda.stream(self.producer)

    def long_kernel(self) -> None:
        """Work on the current (producer) stream that outlasts any call by far."""
        if self.lib.name == "cupy":
            self._spin((1,), (1,), (np.uint64(500_000_000),))
        else:
            self.lib.module.cuda._sleep(1_000_000_000)  # clock cycles: about half a second

    def producer_busy(self) -> bool:
        if self.lib.name == "cupy":
            return not self.producer.done
        return not self.producer.query()

    def synchronize(self) -> None:
        self.producer.synchronize()
        self.consumer.synchronize()


@pytest.mark.parametrize("entry", ["sgemm", "gemm"])
def test_producer_stream_is_ordered_without_blocking_the_host(lib, entry):
    """A and B are written on the producer stream behind a long kernel; the handle runs on the
    consumer stream. The DLPack handshake (``__dlpack__(stream=<consumer>)``) makes the consumer
    wait for the producer on the device: the result is right, the call returns at once, and the
    producer is still busy when it does."""
    rng = np.random.default_rng(SEED + 2)
    m, n, k = 256, 192, 128
    host_a, host_b = _random(rng, (m, k), "F"), _random(rng, (k, n), "F")
    src_a, src_b = lib.array(host_a), lib.array(host_b)
    a, b = lib.full_fortran((m, k), np.nan), lib.full_fortran((k, n), np.nan)
    c = lib.full_fortran((m, n), 0.0)
    wa, wb, wc = DLPackOnly(a), DLPackOnly(b), DLPackOnly(c)
    streams = _Streams(lib)
    with sgblas.Handle(stream=streams.consumer) as h:

        def call() -> Status:
            if entry == "sgemm":
                return sgblas.sgemm(h, "N", "N", m, n, k, 1.0, wa, m, wb, k, 0.0, wc, m)
            sgblas.gemm(wa, wb, wc, handle=h)
            return Status.SUCCESS

        with streams.producing():  # untimed: the one-time costs of the path and of the producer's
            streams.long_kernel()  # own kernels (a library's first launch of a kernel loads its
            a[...] = src_a         # module, which waits for the context's streams)
            b[...] = src_b
            assert call() == Status.SUCCESS, sgblas.last_error_message()
        streams.synchronize()
        a[...], b[...] = lib.full_fortran((m, k), np.nan), lib.full_fortran((k, n), np.nan)
        streams.synchronize()

        with streams.producing():
            streams.long_kernel()
            a[...] = src_a  # on the producer stream, after the long kernel
            b[...] = src_b
            start = time.perf_counter()
            status = call()
            elapsed = time.perf_counter() - start
            busy = streams.producer_busy()
        assert status == Status.SUCCESS, sgblas.last_error_message()
        assert busy, "the producer stream finished during the call: something waited on the host"
        assert elapsed < 1e-3, f"the call took {elapsed * 1e3:.2f} ms; it must not wait for the producer"
        streams.synchronize()
        got = lib.host(c)
    _assert_product(got, host_a, host_b, None, 1.0, 0.0, f"{lib.name} {entry} across streams")
