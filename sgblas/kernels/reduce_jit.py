"""The Numba code of the fixed-order split-K reduction (:mod:`sgblas.kernels.reduce`).

Split from :mod:`sgblas.kernels.reduce` so that the registry imports without Numba; only the
registry's builder imports this module, when the kernel is first built.
"""

from __future__ import annotations

from numba import cuda, float32, int64, uint32

from sgblas.kernels import memory
from sgblas.kernels.reduce import THREADS

__all__: list[str] = []  # private: built through sgblas.kernels.spec

ldg4 = memory.ldg4
ldg1 = memory.ldg1
stg4 = memory.stg4


def _reduce(m, n, splits, W, ldw, beta, C, ldc, c_vec):
    """C[i, j] = W_0[i, j] + W_1[i, j] + ... + W_{splits-1}[i, j] (left to right) + beta * C[i, j];
    C unread when beta == 0."""
    um = uint32(m)
    gm = (um + uint32(3)) // uint32(4)  # groups of 4 rows per column
    total = gm * uint32(n)  # below 2**31: the registry's guard
    g = uint32(cuda.blockIdx.x) * uint32(THREADS) + uint32(cuda.threadIdx.x)
    step = uint32(cuda.gridDim.x) * uint32(THREADS)
    sstride = int64(ldw) * int64(n)  # elements from one partial to the next
    ns = int64(splits)
    beta = float32(beta)  # the simulator passes a Python float; the device already has float32
    zero = beta == float32(0)
    vec = c_vec != 0
    while g < total:
        j = g // gm
        r = (g - j * gm) * uint32(4)
        w = int64(j) * int64(ldw) + int64(r)
        c = int64(j) * int64(ldc) + int64(r)
        if r + uint32(4) <= um:
            x0, x1, x2, x3 = ldg4(W, w)
            s = int64(1)
            w += sstride
            # Four partials' loads in flight, then their additions in s order.
            while s + 4 <= ns:
                p0, p1, p2, p3 = ldg4(W, w)
                q0, q1, q2, q3 = ldg4(W, w + sstride)
                u0, u1, u2, u3 = ldg4(W, w + 2 * sstride)
                v0, v1, v2, v3 = ldg4(W, w + 3 * sstride)
                x0 += p0
                x1 += p1
                x2 += p2
                x3 += p3
                x0 += q0
                x1 += q1
                x2 += q2
                x3 += q3
                x0 += u0
                x1 += u1
                x2 += u2
                x3 += u3
                x0 += v0
                x1 += v1
                x2 += v2
                x3 += v3
                s += 4
                w += 4 * sstride
            while s < ns:
                p0, p1, p2, p3 = ldg4(W, w)
                x0 += p0
                x1 += p1
                x2 += p2
                x3 += p3
                s += 1
                w += sstride
            if vec:
                if zero:
                    stg4(C, c, x0, x1, x2, x3)
                else:
                    d0, d1, d2, d3 = ldg4(C, c)
                    stg4(C, c, x0 + beta * d0, x1 + beta * d1, x2 + beta * d2, x3 + beta * d3)
            elif zero:
                C[c] = x0
                C[c + 1] = x1
                C[c + 2] = x2
                C[c + 3] = x3
            else:
                C[c] = x0 + beta * ldg1(C, c)
                C[c + 1] = x1 + beta * ldg1(C, c + 1)
                C[c + 2] = x2 + beta * ldg1(C, c + 2)
                C[c + 3] = x3 + beta * ldg1(C, c + 3)
        else:
            # The group holding row m: element by element, nothing past row m is read.
            for e in range(4):
                if r + uint32(e) < um:
                    x = ldg1(W, w + e)
                    ws = w + e + sstride
                    for _s in range(1, splits):
                        x += ldg1(W, ws)
                        ws += sstride
                    if zero:
                        C[c + e] = x
                    else:
                        C[c + e] = x + beta * ldg1(C, c + e)
        g += step


def build():
    """The plain Python kernel function (compiled by the registry, or run by the simulator)."""
    return _reduce
