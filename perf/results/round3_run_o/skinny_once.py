"""Run O: three sgblas calls of one skinny shape (for ncu): python skinny_once.py PAIR [M N K].
Column-major CuPy operands with tight leading dimensions, fresh normal data, beta = 0."""
import sys
import cupy as cp
import sgblas

pair = sys.argv[1]
m, n, k = (int(x) for x in sys.argv[2:5]) if len(sys.argv) > 4 else (16, 16384, 4096)
ta, tb = pair[0], pair[1]
ar, ac = (m, k) if ta == "N" else (k, m)
br, bc = (k, n) if tb == "N" else (n, k)
rng = cp.random.default_rng(7)
A = cp.asfortranarray(rng.standard_normal((ar, ac), dtype=cp.float32))
B = cp.asfortranarray(rng.standard_normal((br, bc), dtype=cp.float32))
C = cp.full((m, n), cp.nan, dtype=cp.float32, order="F")
h = sgblas.Handle()
print(sgblas.explain(h, ta, tb, m, n, k, A, ar, B, br, C, m))
for _ in range(3):
    st = sgblas.sgemm(h, ta, tb, m, n, k, 1.0, A, ar, B, br, 0.0, C, m)
    assert st == sgblas.Status.SUCCESS, st
cp.cuda.runtime.deviceSynchronize()
ref = cp.asarray(A, dtype=cp.float64) if ta == "N" else cp.asarray(A, dtype=cp.float64).T
ref = ref @ (cp.asarray(B, dtype=cp.float64) if tb == "N" else cp.asarray(B, dtype=cp.float64).T)
err = float(cp.linalg.norm(C - ref) / cp.linalg.norm(ref))
print(f"{pair} {m}x{n}x{k}: relative error {err:.2e}")
assert err < 1e-5, err
