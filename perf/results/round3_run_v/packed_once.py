"""Run V: the packed TN row at 2048^3 padded by one against the 16-byte TN row at 2048^3 tight,
one process, for ncu (``-k regex:"sgemm_|pack_"``). python packed_once.py

Each case: `explain`'s line, then three `sgemm` calls on fresh random operands (the first
warms up; ncu's --launch-skip picks the later ones). Where do the packed call's 15 us over the
copies plus the 16-byte row go (docs/tuning.md, run V, rung 48's result)?"""
import cupy as cp
import numpy as np

import sgblas

rng = np.random.default_rng(5)
m = n = k = 2048
stream = cp.cuda.Stream(non_blocking=True)
stream.use()
with sgblas.Handle(stream=stream) as h:
    for pad in (1, 0):
        ld = k + pad
        a = cp.asarray(rng.standard_normal((m - 1) * ld + k, dtype=np.float32))
        b = cp.asarray(rng.standard_normal((n - 1) * ld + k, dtype=np.float32))
        c = cp.asarray(rng.standard_normal((n - 1) * (m + pad) + m, dtype=np.float32))
        print(f"TN {m}x{n}x{k} ld +{pad}: {sgblas.explain(h, 'T', 'N', m, n, k, a, ld, b, ld, c, m + pad).kernel}",
              flush=True)
        for _ in range(3):
            assert sgblas.sgemm(h, "T", "N", m, n, k, 1.0, a, ld, b, ld, 0.0, c, m + pad) == sgblas.Status.SUCCESS
        stream.synchronize()
print("done", flush=True)
