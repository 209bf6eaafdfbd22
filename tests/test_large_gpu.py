"""Products whose operands hold more than 2**31 elements: no 32-bit index overflows anywhere.

Two problems, each about 8.6 GB of float32 on the device:

* A past 2**31 elements: m = 65536, k = 32800 (A is m x k, or k x m for A^T), n = 64;
* C past 2**31 elements: m = 65536, n = 32800, k = 16 (and k = 0, the C = beta * C kernel).

Each runs for NN (the optimised NN kernel, where the dispatcher picks it) and a transposed pair
(the general kernel); :func:`sgblas.explain` records which kernel ran. The operands are filled
on the device with a hash of the element index, so nothing of 8.6 GB crosses to the host; only
sampled rows and columns are gathered back (rows near the ends and on both sides of every
element offset that passes 2**31, plus random ones), before and after the call, and compared
with a float64 reference computed on the host from the gathered operands. Memory is freed
between cases. The tests skip when the device has less than ``MIN_FREE_BYTES`` free.

The sampling, gathering and checking code is the same at any size; the tests that are not
marked ``gpu`` run it at tiny sizes under the simulator, and prove that it catches a wrong
result.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from numba import cuda, float32

import sgblas
from sgblas import Status
from sgblas.runtime.device import SIMULATOR
from sgblas.testing import compare

MIN_FREE_BYTES = 30 * 2**30
BIG = 2**31
HASH_MULTIPLIER = 2654435761
HASH_PRIME = 4294967291  # (index + salt) * HASH_MULTIPLIER stays below 2**63 for indices < 3.4e9
THREADS = 32 if SIMULATOR else 256
MAX_BLOCKS = 2 if SIMULATOR else 8192


# --------------------------------------------------------------------------------------------
# device-side fill and gather (kept tiny under the simulator)
# --------------------------------------------------------------------------------------------

@cuda.jit
def _fill_hash(x, salt):
    """x[i] = a value in [-1, 1) on a 2**-15 grid, hashed from i (64-bit index)."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = x.size
    while i < n:
        r = ((i + salt) * HASH_MULTIPLIER) % HASH_PRIME
        x[i] = float32(r % 65536) * float32(1.0 / 32768.0) - float32(1.0)
        i += stride


@cuda.jit
def _take(src, idx, out):
    """out[t] = src[idx[t]] (idx int64)."""
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    while t < idx.size:
        out[t] = src[idx[t]]
        t += stride


def host_hash(index: np.ndarray, salt: int) -> np.ndarray:
    """The values :func:`_fill_hash` writes at ``index`` (for checking the fill itself)."""
    r = ((index.astype(np.int64) + salt) * HASH_MULTIPLIER) % HASH_PRIME
    return (r % 65536).astype(np.float32) * np.float32(1.0 / 32768.0) - np.float32(1.0)


def _blocks(count: int) -> int:
    return max(1, min(MAX_BLOCKS, -(-count // THREADS)))


def device_filled(size: int, salt: int):
    """A new float32 device array of ``size`` elements filled with the index hash."""
    assert size + salt < 3.4e9, "the hash would overflow int64"
    x = cuda.device_array(size, np.float32)
    _fill_hash[_blocks(size), THREADS](x, salt)
    return x


def gather(src, index: np.ndarray) -> np.ndarray:
    """``src[index]`` copied to the host (any index shape), without copying ``src``."""
    flat = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
    assert flat.size and flat.min() >= 0 and flat.max() < src.size, "gather index out of range"
    d_idx = cuda.to_device(flat)
    out = cuda.device_array(flat.size, np.float32)
    _take[_blocks(flat.size), THREADS](src, d_idx, out)
    return out.copy_to_host().reshape(index.shape)


def op_index(trans: str, ld: int, rows, cols) -> np.ndarray:
    """Flat indices of ``op(X)[rows][:, cols]`` for X column-major with ``ld``
    (op(X) = X for 'N', X^T for 'T'), in 64-bit."""
    r = np.asarray(rows, np.int64)[:, None]
    c = np.asarray(cols, np.int64)[None, :]
    return r + c * ld if trans == "N" else c + r * ld


def free_device_memory() -> None:
    """Release what Numba still holds for arrays already dropped."""
    gc.collect()
    ctx = cuda.current_context()
    for owner in (getattr(ctx, "memory_manager", None), ctx):
        pending = getattr(owner, "deallocations", None)
        if pending is not None:
            pending.clear()


def sample_lines(count: int, ld: int | None, rng, extra: int = 6) -> np.ndarray:
    """Lines (rows or columns) worth checking among ``count``: both ends, tile edges, random
    ones, and, when lines are ``ld`` elements apart, those on both sides of 2**31."""
    picks = {0, 1, 63, 64, 127, 128, count // 2, count - 129, count - 128, count - 65, count - 64,
             count - 63, count - 2, count - 1}
    if ld:
        edge = BIG // ld
        picks |= {edge - 1, edge, edge + 1}
    picks |= set(int(x) for x in rng.integers(0, count, extra))
    return np.array(sorted(p for p in picks if 0 <= p < count), np.int64)


class Problem:
    """One sgemm call on device-filled operands, checked on sampled rows and columns of C."""

    def __init__(self, ta: str, tb: str, m: int, n: int, k: int, alpha: float, beta: float,
                 seed: int = 0, pad: int = 0):
        self.ta, self.tb, self.m, self.n, self.k = ta, tb, m, n, k
        self.alpha, self.beta = alpha, beta
        self.rng = np.random.default_rng(seed)
        a_rows, a_cols = (m, k) if ta == "N" else (k, m)
        b_rows, b_cols = (k, n) if tb == "N" else (n, k)
        self.lda, self.ldb, self.ldc = max(1, a_rows + pad), max(1, b_rows + pad), max(1, m + pad)
        self.a_size = (a_cols - 1) * self.lda + a_rows if a_rows and a_cols else 1
        self.b_size = (b_cols - 1) * self.ldb + b_rows if b_rows and b_cols else 1
        self.c_size = (n - 1) * self.ldc + m
        self.dA = device_filled(self.a_size, 11 + seed)
        self.dB = device_filled(self.b_size, 23 + seed)
        self.dC = device_filled(self.c_size, 37 + seed)
        # Rows of C to check need op(A)[rows, :] and all of op(B); columns need all of op(A).
        self.rows = sample_lines(m, self.lda if ta == "T" else None, self.rng) if k * n <= 2**24 else None
        self.cols = sample_lines(n, self.ldc, self.rng) if m * k <= 2**24 else None
        assert self.rows is not None or self.cols is not None, "nothing small enough to check"

    def explain(self, handle) -> sgblas.Explanation:
        return sgblas.explain(handle, self.ta, self.tb, self.m, self.n, self.k, self.dA, self.lda,
                              self.dB, self.ldb, self.dC, self.ldc)

    def _c_lines(self):
        out = {}
        if self.rows is not None:
            out["rows"] = gather(self.dC, op_index("N", self.ldc, self.rows, np.arange(self.n)))
        if self.cols is not None:
            out["cols"] = gather(self.dC, op_index("N", self.ldc, np.arange(self.m), self.cols))
        return out

    def run(self, handle) -> None:
        self.before = self._c_lines()
        status = sgblas.sgemm(handle, self.ta, self.tb, self.m, self.n, self.k, self.alpha, self.dA,
                              self.lda, self.dB, self.ldb, self.beta, self.dC, self.ldc)
        assert status == Status.SUCCESS, sgblas.last_error_message()
        cuda.synchronize()
        self.after = self._c_lines()

    def check(self, label: str = "") -> int:
        """Compare the sampled lines with the float64 reference; returns elements checked."""
        m, n, k = self.m, self.n, self.k
        alpha, beta = float(np.float32(self.alpha)), float(np.float32(self.beta))
        checked = 0
        for what in self.after:
            if what == "rows":
                rows, cols = self.rows, np.arange(n)
            else:
                rows, cols = np.arange(m), self.cols
            if k and alpha != 0.0:
                a = gather(self.dA, op_index(self.ta, self.lda, rows, np.arange(k))).astype(np.float64)
                b = gather(self.dB, op_index(self.tb, self.ldb, np.arange(k), cols)).astype(np.float64)
                ref, scale = alpha * (a @ b), abs(alpha) * (np.abs(a) @ np.abs(b))
            else:
                ref = scale = np.zeros((len(rows), len(cols)))
            c0 = self.before[what].astype(np.float64)
            if beta != 0.0:
                ref, scale = ref + beta * c0, scale + abs(beta) * np.abs(c0)
            ok, ratio, where = compare(self.after[what], ref, scale, k)
            line = rows[where[0]] if what == "rows" else cols[where[1]]
            assert ok, (f"{label} {self.ta}{self.tb} m={m} n={n} k={k}: sampled {what} wrong, "
                        f"{ratio:.3g}x tolerance at C[{rows[where[0]]}, {cols[where[1]]}] ({what[:-1]} {line})")
            checked += ref.size
        return checked

    def free(self) -> None:
        del self.dA, self.dB, self.dC
        free_device_memory()


# --------------------------------------------------------------------------------------------
# the host logic at tiny sizes (simulator; also runs on a GPU)
# --------------------------------------------------------------------------------------------

def test_fill_matches_the_host_hash():
    x = device_filled(1000, 5)
    np.testing.assert_array_equal(x.copy_to_host(), host_hash(np.arange(1000), 5))
    assert gather(x, np.array([[999, 0], [3, 3]])).tolist() == host_hash(np.array([[999, 0], [3, 3]]), 5).tolist()


def test_op_index_reads_op_x():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 5)).astype(np.float32)  # stored 7 x 5, ld 9
    buf = np.zeros(9 * 4 + 7, np.float32)
    for j in range(5):
        buf[j * 9: j * 9 + 7] = x[:, j]
    np.testing.assert_array_equal(buf[op_index("N", 9, [1, 6], [0, 4])], x[np.ix_([1, 6], [0, 4])])
    np.testing.assert_array_equal(buf[op_index("T", 9, [4, 0], [2, 6])], x.T[np.ix_([4, 0], [2, 6])])


def test_sample_lines_straddle_2_to_the_31():
    lines = sample_lines(65536, 32800, np.random.default_rng(0))
    assert {65472, 65473, 65535}.issubset(set(lines.tolist()))  # 65473 * 32800 > 2**31
    assert 65473 * 32800 > BIG > 65472 * 32800


@pytest.mark.parametrize("ta, tb, m, n, k", [("N", "N", 40, 9, 7), ("T", "N", 37, 6, 5),
                                             ("T", "T", 21, 30, 3), ("N", "N", 33, 20, 0)])
def test_sampled_check_passes_on_small_problems(ta, tb, m, n, k):
    with sgblas.Handle() as h:
        p = Problem(ta, tb, m, n, k, 1.25, 0.5, seed=3, pad=1)
        p.run(h)
        assert p.check("small") > 0
        p.free()


def test_sampled_check_catches_a_wrong_element():
    with sgblas.Handle() as h:
        p = Problem("N", "N", 40, 9, 7, 1.0, 0.0, seed=4)
        p.run(h)
        row = int(p.rows[len(p.rows) // 2])
        p.after["rows"][len(p.rows) // 2, 3] += 0.01  # as if one element were computed wrong
        with pytest.raises(AssertionError, match=rf"C\[{row}, 3\]"):
            p.check("corrupted")


# --------------------------------------------------------------------------------------------
# GPU: beyond 2**31 elements
# --------------------------------------------------------------------------------------------

def _require_free_memory():
    free, total = cuda.current_context().get_memory_info()
    if free < MIN_FREE_BYTES:
        pytest.skip(f"needs {MIN_FREE_BYTES / 2**30:.0f} GiB of free device memory, "
                    f"{free / 2**30:.1f} GiB free")


@pytest.fixture(scope="module")
def gpu_handle():
    with sgblas.Handle() as h:
        yield h


LARGE_CASES = [
    # (label, ta, tb, m, n, k, alpha, beta): A past 2**31 elements
    ("A>2^31", "N", "N", 65536, 64, 32800, 1.0, 0.5),
    ("A>2^31", "T", "N", 65536, 64, 32800, -0.75, 0.0),
    # C past 2**31 elements
    ("C>2^31", "N", "N", 65536, 32800, 16, 1.5, -1.0),
    ("C>2^31", "T", "T", 65536, 32800, 16, 1.0, 0.25),
    ("C>2^31", "N", "N", 65536, 32800, 0, 1.0, 0.5),  # k == 0: the C = beta * C kernel
]


@pytest.mark.gpu
@pytest.mark.parametrize("label, ta, tb, m, n, k, alpha, beta", LARGE_CASES)
def test_beyond_2_to_the_31_elements_gpu(gpu_handle, record_property, label, ta, tb, m, n, k, alpha, beta):
    free_device_memory()
    _require_free_memory()
    p = Problem(ta, tb, m, n, k, alpha, beta, seed=sum(map(ord, label + ta + tb)) + k)
    try:
        sizes = {"A": p.a_size, "B": p.b_size, "C": p.c_size}
        big = [name for name, size in sizes.items() if size > BIG]
        assert big == [label[0]], f"the case does not exercise {label}: sizes {sizes}"
        e = p.explain(gpu_handle)
        assert e.status == Status.SUCCESS, e.message
        kernel = e.kernel
        record_property("kernel", kernel)
        print(f"{label} {ta}{tb} m={m} n={n} k={k}: {kernel}; sizes {sizes}")
        p.run(gpu_handle)
        checked = p.check(f"{label} [{kernel}]")
        record_property("elements_checked", checked)
        assert checked > 0
    finally:
        p.free()
