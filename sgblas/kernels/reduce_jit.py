"""The Numba code of the fixed-order split-K reduction (:mod:`sgblas.kernels.reduce`).

Split from :mod:`sgblas.kernels.reduce` so that the registry imports without Numba; only the
registry's builder imports this module, when the kernel is first built.
"""

from __future__ import annotations

from numba import cuda, float32, int64, uint32

from sgblas.kernels import memory
from sgblas.kernels.reduce import GROUP, RUN, THREADS

__all__: list[str] = []  # private: built through sgblas.kernels.spec

ldg4 = memory.ldg4
ldg1 = memory.ldg1
stg4 = memory.stg4
grid_dependency_wait = memory.grid_dependency_wait


def _make(after_grid: bool):
    """The kernel; ``after_grid``: its first act is ``griddepcontrol.wait`` (sm_90+; see
    :data:`sgblas.runtime.device.GRID_WAIT_MIN_CC`). ``after_grid`` is a constant of the closure:
    Numba prunes the branch before typing, so the kernel without it has no trace of the
    instruction."""

    def _reduce(m, n, splits, W, ldw, beta, C, ldc, c_vec):
        """C[i, j] = ((W_0 + ... + W_7) + ... + (W_24 + ... + W_31)) + ((W_32 + ...) + ...) + ...
        + beta * C[i, j]: each group of GROUP partials summed left to right, each run of RUN
        group sums left to right, then the runs' sums left to right; C unread when beta == 0."""
        if after_grid:
            grid_dependency_wait()  # the partials are the previous grid's: wait for them
        um = uint32(m)
        gm = (um + uint32(3)) // uint32(4)  # groups of 4 rows per column
        total = gm * uint32(n)  # below 2**31: the registry's guard
        g = uint32(cuda.blockIdx.x) * uint32(THREADS) + uint32(cuda.threadIdx.x)
        step = uint32(cuda.gridDim.x) * uint32(THREADS)
        sstride = int64(ldw) * int64(n)  # elements from one partial to the next
        ns = int64(splits)
        span = int64(GROUP * RUN)
        beta = float32(beta)  # the simulator passes a Python float; the device already has float32
        zero = beta == float32(0)
        vec = c_vec != 0
        while g < total:
            j = g // gm
            r = (g - j * gm) * uint32(4)
            w = int64(j) * int64(ldw) + int64(r)
            c = int64(j) * int64(ldc) + int64(r)
            if r + uint32(4) <= um:
                x0 = x1 = x2 = x3 = float32(0)
                z0 = z1 = z2 = z3 = float32(0)
                s = int64(0)
                while s < ns:
                    e = min(s + int64(GROUP), ns)
                    y0, y1, y2, y3 = ldg4(W, w)
                    t = s + 1
                    w += sstride
                    # Four partials' loads in flight, then their additions in s order.
                    while t + 4 <= e:
                        p0, p1, p2, p3 = ldg4(W, w)
                        q0, q1, q2, q3 = ldg4(W, w + sstride)
                        u0, u1, u2, u3 = ldg4(W, w + 2 * sstride)
                        v0, v1, v2, v3 = ldg4(W, w + 3 * sstride)
                        y0 += p0
                        y1 += p1
                        y2 += p2
                        y3 += p3
                        y0 += q0
                        y1 += q1
                        y2 += q2
                        y3 += q3
                        y0 += u0
                        y1 += u1
                        y2 += u2
                        y3 += u3
                        y0 += v0
                        y1 += v1
                        y2 += v2
                        y3 += v3
                        t += 4
                        w += 4 * sstride
                    while t < e:
                        p0, p1, p2, p3 = ldg4(W, w)
                        y0 += p0
                        y1 += p1
                        y2 += p2
                        y3 += p3
                        t += 1
                        w += sstride
                    # A run's first group sum, and the first run's sum, as they are (0 + y could
                    # turn -0 into +0).
                    if s % span == 0:
                        z0, z1, z2, z3 = y0, y1, y2, y3
                    else:
                        z0 += y0
                        z1 += y1
                        z2 += y2
                        z3 += y3
                    if e == ns or e % span == 0:
                        if s < span:
                            x0, x1, x2, x3 = z0, z1, z2, z3
                        else:
                            x0 += z0
                            x1 += z1
                            x2 += z2
                            x3 += z3
                    s = e
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
                for el in range(4):
                    if r + uint32(el) < um:
                        x = float32(0)
                        z = float32(0)
                        ws = w + el
                        s = int64(0)
                        while s < ns:
                            e = min(s + int64(GROUP), ns)
                            y = ldg1(W, ws)
                            ws += sstride
                            t = s + 1
                            while t < e:
                                y += ldg1(W, ws)
                                ws += sstride
                                t += 1
                            if s % span == 0:
                                z = y
                            else:
                                z += y
                            if e == ns or e % span == 0:
                                if s < span:
                                    x = z
                                else:
                                    x += z
                            s = e
                        if zero:
                            C[c + el] = x
                        else:
                            C[c + el] = x + beta * ldg1(C, c + el)
            g += step

    return _reduce


def build(after_grid: bool = False):
    """The plain Python kernel function (compiled by the registry, or run by the simulator);
    ``after_grid``: the sm_90+ build, which waits for the grid ahead of it first."""
    return _make(after_grid)
