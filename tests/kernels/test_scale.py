"""Tests of the C = beta * C kernel (:mod:`sgblas.kernels.scale`), launched directly.

Each case checks the m x n result (exactly: one float32 multiply per element, or 0) and
that the padding rows between columns kept their bits. beta == 0 starts from a C full of
NaN and must produce zeros without reading it. Simulator-sized cases run everywhere;
``@pytest.mark.gpu`` adds real sizes, n past the 65535-block limit of gridDim.y and an
ldc whose ``col * ldc`` passes 2**31.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
from numba import cuda

from helpers import child_env
from sgblas.kernels import scale
from sgblas.kernels.spec import SCALE_KERNEL
from sgblas.testing import as_matrix
from sgblas.runtime.loader import dispatcher
from tests.reference import C_PAD_BITS, make_operands


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


def _run_scale(m: int, n: int, beta: float, C: np.ndarray, ldc: int,
               grid: tuple[int, int, int] | None = None) -> np.ndarray:
    d_c = cuda.to_device(C)
    dispatcher(SCALE_KERNEL)[grid or scale.grid(m, n), scale.BLOCK](
        np.int32(m), np.int32(n), np.float32(beta), d_c, np.int32(ldc))
    return d_c.copy_to_host()


def _check(m: int, n: int, beta: float, pad: int, grid: tuple[int, int, int] | None = None) -> None:
    seed = _seed(m, n, beta, pad, grid)
    ops = make_operands(np.random.default_rng(seed), "N", "N", m, n, 1, (0, 0, pad),
                        nan_c=(beta == 0.0))
    before = ops.C.copy()
    got = _run_scale(m, n, beta, ops.C, ops.ldc, grid)
    tag = f"seed={seed} m={m} n={n} ldc={ops.ldc} beta={beta}"
    if beta == 0.0:
        expected = np.zeros((m, n), np.float32)
    else:
        expected = np.float32(beta) * as_matrix(before, m, n, ops.ldc)
    np.testing.assert_array_equal(as_matrix(got, m, n, ops.ldc), expected, err_msg=tag)
    inside = np.zeros(got.shape, dtype=bool)
    np.lib.stride_tricks.as_strided(inside, shape=(m, n), strides=(1, ops.ldc))[...] = True
    pad_got = got.view(np.uint32)[~inside]
    assert (pad_got == C_PAD_BITS).all() and (pad_got == before.view(np.uint32)[~inside]).all(), (
        f"{tag}: padding between columns was written")


def test_module_contract():
    assert scale.BLOCK[0] % 32 == 0 and scale.BLOCK[2] == 1
    assert dispatcher(SCALE_KERNEL) is dispatcher(SCALE_KERNEL)
    assert SCALE_KERNEL.name == scale.NAME and SCALE_KERNEL.block == scale.BLOCK


def test_grid_keeps_y_and_z_under_65535():
    assert scale.grid(1, 1) == (1, 1, 1)
    for n in (1, scale.BLOCK_N * 65535 + 1, 2**31 - 1):
        gx, gy, gz = scale.grid(40, n)
        assert gx == 2 and gy <= 65535 and gz == 1
    gx, _, _ = scale.grid(2**31 - 1, 1)
    assert gx * scale.BLOCK_M >= 2**31 - 1 and gx < 2**31


@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5, -2.0])
def test_betas_with_padded_ldc(beta):
    _check(37, 9, beta, pad=3)


@pytest.mark.parametrize("m,n,pad", [(1, 1, 0), (1, 5, 2), (32, 8, 0), (33, 17, 1), (5, 3, 27)])
def test_shapes(m, n, pad):
    _check(m, n, 0.5, pad)
    _check(m, n, 0.0, pad)


def test_column_grid_stride():
    # One block in y walks 4 column tiles (the last partial), as the blocks do when n
    # exceeds 65535 * BLOCK_N.
    _check(5, 3 * scale.BLOCK_N + 1, -1.5, pad=2, grid=(1, 1, 1))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,pad", [(1000, 777, 5), (4097, 3, 0), (1, 5000, 0), (2048, 2048, 64)])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_gpu_sizes(m, n, pad, beta):
    _check(m, n, beta, pad)


@pytest.mark.gpu
def test_gpu_n_beyond_grid_y_limit():
    _check(3, scale.BLOCK_N * 65535 + 77, -1.5, pad=1)


@pytest.mark.gpu
def test_gpu_offsets_past_2_31():
    m, n, ldc = 3, 3, 2**30 + 3
    extent = (n - 1) * ldc + m
    free, _ = cuda.current_context().get_memory_info()
    if free < 4 * extent + (1 << 30):
        pytest.skip(f"needs {4 * extent / 2**30:.0f} GiB of free device memory")
    d_c = cuda.device_array(extent, dtype=np.float32)
    cols = [np.arange(1, m + 1, dtype=np.float32) * (j + 1) for j in range(n)]
    for j, col in enumerate(cols):
        d_c[j * ldc:j * ldc + m].copy_to_device(col)
    dispatcher(SCALE_KERNEL)[scale.grid(m, n), scale.BLOCK](np.int32(m), np.int32(n), np.float32(-1.5),
                                                  d_c, np.int32(ldc))
    for j, col in enumerate(cols):
        np.testing.assert_array_equal(d_c[j * ldc:j * ldc + m].copy_to_host(), np.float32(-1.5) * col)


_PTX_SCRIPT = r"""
from sgblas.kernels.spec import SCALE_KERNEL
from sgblas.runtime.build import compile_ptx
print(compile_ptx(SCALE_KERNEL, (9, 0)))
"""


def test_ptx_reads_c_only_when_beta_is_nonzero():
    """Static: one global load (beta * C), two stores (0 and beta * C), no local memory."""
    env = child_env(NUMBA_ENABLE_CUDASIM="0")
    proc = subprocess.run([sys.executable, "-c", _PTX_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ptx = proc.stdout
    assert "ld.local" not in ptx and "st.local" not in ptx and ".ftz" not in ptx
    assert not re.search(r"\b(div|rem)\.[su]64\b", ptx) and not re.search(r"^\s*call", ptx, re.MULTILINE)
    assert len(re.findall(r"ld\.global\.f32", ptx)) == 1
    assert len(re.findall(r"st\.global\.(?:f32|u32|b32)", ptx)) == 2
    # 64-bit column offsets: the product col * ldc is a wide multiply.
    assert re.search(r"mul\.wide\.u32|mul\.lo\.s64|mad\.wide\.u32", ptx)
