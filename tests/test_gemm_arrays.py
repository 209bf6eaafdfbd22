"""gemm(): NumPy semantics over 2-D device arrays of either memory order, without copies."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import InvalidValueError, SgblasError, Status
from sgblas.testing import compare

SEED = 7


def _array(rng, shape, order):
    return np.asarray(rng.standard_normal(shape), dtype=np.float32, order=order)


def _check(got, a, b, c0, alpha, beta, trans_a, trans_b, seed):
    opa = a.T if trans_a else a
    opb = b.T if trans_b else b
    ref = alpha * (opa.astype(np.float64) @ opb.astype(np.float64))
    scale = abs(alpha) * (np.abs(opa.astype(np.float64)) @ np.abs(opb.astype(np.float64)))
    if c0 is not None and beta != 0:
        ref = ref + beta * c0.astype(np.float64)
        scale = scale + abs(beta) * np.abs(c0.astype(np.float64))
    ok, ratio, where = compare(got, ref, scale, opa.shape[1])
    assert ok, f"seed={seed}: error {ratio:.3g}x tolerance at {where}"


@pytest.mark.parametrize("order_a, order_b, order_c", list(itertools.product("FC", "FC", "FC")))
def test_memory_orders(order_a, order_b, order_c):
    rng = np.random.default_rng(SEED)
    m, n, k = 6, 5, 4
    trans_a, trans_b = order_a == "C", order_b == "F"  # mix the transposes in as well
    a = _array(rng, (k, m) if trans_a else (m, k), order_a)
    b = _array(rng, (n, k) if trans_b else (k, n), order_b)
    c0 = _array(rng, (m, n), order_c)
    dc = cuda.to_device(c0)
    out = sgblas.gemm(cuda.to_device(a), cuda.to_device(b), dc, alpha=-1.5, beta=0.5,
                      trans_a=trans_a, trans_b=trans_b)
    assert out is dc
    _check(dc.copy_to_host(), a, b, c0, -1.5, 0.5, trans_a, trans_b, SEED)


def test_allocates_c_when_none():
    rng = np.random.default_rng(SEED + 1)
    a, b = _array(rng, (3, 5), "C"), _array(rng, (5, 2), "F")
    c = sgblas.gemm(cuda.to_device(a), cuda.to_device(b), beta=123.0)  # beta is ignored without c
    assert c.shape == (3, 2)
    _check(c.copy_to_host(), a, b, None, 1.0, 0.0, False, False, SEED + 1)


def test_strided_view_of_a_larger_matrix():
    rng = np.random.default_rng(SEED + 2)
    big = _array(rng, (9, 8), "F")
    a = big[1:6, 2:6]  # a 5x4 window: column-major with ld 9, no copy
    b = _array(rng, (4, 3), "F")
    c = sgblas.gemm(cuda.to_device(big)[1:6, 2:6], cuda.to_device(b))
    _check(c.copy_to_host(), a, b, None, 1.0, 0.0, False, False, SEED + 2)


def test_inner_dimension_mismatch_names_both():
    a = cuda.to_device(np.ones((3, 4), np.float32))
    b = cuda.to_device(np.ones((5, 2), np.float32))
    with pytest.raises(InvalidValueError, match="inner dimensions 4 and 5"):
        sgblas.gemm(a, b)


def test_wrong_c_shape():
    a = cuda.to_device(np.ones((3, 4), np.float32))
    b = cuda.to_device(np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match=r"c has shape \(2, 3\)"):
        sgblas.gemm(a, b, cuda.to_device(np.ones((2, 3), np.float32)))


def test_not_2d():
    with pytest.raises(InvalidValueError, match="1 dimensions"):
        sgblas.gemm(cuda.to_device(np.ones(3, np.float32)), cuda.to_device(np.ones((3, 1), np.float32)))


def test_strided_in_both_dimensions():
    a = cuda.to_device(np.ones((6, 6), np.float32))[::2, ::2]
    with pytest.raises(InvalidValueError, match="no unit stride"):
        sgblas.gemm(a, cuda.to_device(np.ones((3, 2), np.float32)))


def test_float64_is_refused_with_the_dtype_named():
    with pytest.raises(InvalidValueError, match="float32"):
        sgblas.gemm(cuda.to_device(np.ones((2, 2))), cuda.to_device(np.ones((2, 2), np.float32)))


def test_host_array_is_refused():
    with pytest.raises(InvalidValueError, match="not a device array"):
        sgblas.gemm(np.ones((2, 2), np.float32), cuda.to_device(np.ones((2, 2), np.float32)))


def test_errors_carry_status():
    with pytest.raises(SgblasError) as info:
        sgblas.gemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    assert info.value.status == Status.INVALID_VALUE


def test_tf32_handle_raises_not_supported():
    a = cuda.to_device(np.ones((2, 2), np.float32))
    with sgblas.Handle(math_mode=sgblas.MathMode.TF32) as h, pytest.raises(SgblasError) as info:
        sgblas.gemm(a, a, handle=h)
    assert info.value.status == Status.NOT_SUPPORTED and not isinstance(info.value, ValueError)


# --------------------------------------------------------------------------------------------
# which stream gemm runs on (docs/api.md, "Streams")
# --------------------------------------------------------------------------------------------

def _foreign(module: str, inner):
    """An array that says it belongs to ``module`` (its type's ``__module__``) and exports
    ``inner``'s interface: enough for gemm's choice of stream, which reads only the type."""
    kind = type(f"FakeArray_{module.replace('.', '_')}", (), {
        "__module__": module,
        "__cuda_array_interface__": property(lambda self: inner._ary.__array_interface__),
    })
    return kind()


def test_operands_of_two_libraries_name_both_and_ask_for_a_stream():
    from sgblas import gemm_arrays

    a = _foreign("cupy", cuda.to_device(np.ones((2, 2), np.float32)))
    b = _foreign("torch", cuda.to_device(np.ones((2, 2), np.float32)))
    with pytest.raises(InvalidValueError) as info:
        gemm_arrays._handle_for(None, None, a, b, None, 0)
    message = str(info.value)
    assert "a is a CuPy array" in message and "b is a PyTorch tensor" in message and "stream=" in message


def test_a_stream_that_disagrees_with_the_handle_is_refused():
    a = cuda.to_device(np.ones((3, 2), np.float32))
    b = cuda.to_device(np.ones((2, 4), np.float32))
    with sgblas.Handle() as h:
        with pytest.raises(InvalidValueError, match="disagrees with the handle's stream"):
            sgblas.gemm(a, b, handle=h, stream=12345)
        assert sgblas.gemm(a, b, handle=h, stream=h.stream_handle) is not None  # agreeing is fine


def test_gemm_keeps_one_default_handle_per_device_and_stream():
    from sgblas import gemm_arrays

    a = cuda.to_device(np.ones((3, 2), np.float32))
    b = cuda.to_device(np.ones((2, 4), np.float32))
    s1, s2 = cuda.stream(), cuda.stream()
    np.testing.assert_array_equal(sgblas.gemm(a, b, stream=s1).copy_to_host(), np.full((3, 4), 2, np.float32))
    sgblas.gemm(a, b, stream=s2)
    sgblas.gemm(a, b)  # Numba arrays without a stream: Numba's default stream
    h1 = gemm_arrays.default_handle(0, s1)
    assert h1 is gemm_arrays.default_handle(0, s1)
    assert h1.stream is s1 or h1.stream_handle == sgblas.handle.stream_handle(s1)
    assert gemm_arrays.default_handle(0, None) is gemm_arrays.default_handle(0, 0)


def test_the_current_stream_of_each_library():
    from numba.core import config

    from sgblas import gemm_arrays

    assert gemm_arrays.current_stream(None, 0) == 0  # other exporters: the legacy default stream
    expected = 2 if config.CUDA_PER_THREAD_DEFAULT_STREAM else 0
    assert gemm_arrays.current_stream("numba", 0) == expected
