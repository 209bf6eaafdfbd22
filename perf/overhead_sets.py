"""Host time per call when calls repeat their arguments and when they do not.

Usage (on a GPU machine with CuPy and PyTorch): ``python -m perf.overhead_sets``

``perf.overhead`` times each method on one set of arrays, so every call repeats the previous
one's arguments, and sgblas's packer then skips packing them (``sgblas.runtime.abi``). This
script times, at 64^3 in the same process, cuBLAS ``gemmEx`` PEDANTIC through CuPy, ``gemm``
on CuPy arrays and ``gemm`` on PyTorch tensors, each on one set of three arrays and on four
sets taken in turn (cuBLAS on four pointer sets likewise), so that no call repeats the last:
2000 calls enqueued back to back per loop, five timed loops per method after one untimed,
median host microseconds per call, and the ratio to cuBLAS with the same number of sets.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

N, CALLS, SETS, LOOPS = 64, 2000, 4, 5


def main() -> None:
    import cupy as cp
    import numpy as np
    import torch

    import sgblas
    from perf.bench import Case, CublasPedantic, CupyBackend

    backend = CupyBackend()
    cublas = CublasPedantic(backend)
    case = Case(N, N, N, "N", "N", "custom")
    with backend.activated():
        cupy_sets = [tuple(cp.asarray(np.random.rand(N, N).astype(np.float32), order="F") for _ in range(3))
                     for _ in range(SETS)]
        backend.synchronize()
    cupy_handle = sgblas.Handle(stream=backend.stream)
    torch_stream = torch.cuda.Stream()
    torch_handle = sgblas.Handle(stream=torch_stream)
    torch_sets = [tuple(torch.randn(N, N, device="cuda") for _ in range(3)) for _ in range(SETS)]
    torch.cuda.synchronize()
    gemm = sgblas.gemm

    def loops(sets, call):
        def one_set():
            x = sets[0]
            for _ in range(CALLS):
                call(*x)

        def in_turn():
            for _ in range(CALLS // SETS):
                for x in sets:
                    call(*x)
        return one_set, in_turn

    pointers = [tuple(int(x.data.ptr) for x in s) for s in cupy_sets]
    methods = {}
    methods["cublas_one_set"], methods["cublas_sets_in_turn"] = loops(pointers, lambda a, b, c: cublas(case, a, b, c))
    methods["gemm_cupy_one_set"], methods["gemm_cupy_sets_in_turn"] = loops(
        cupy_sets, lambda a, b, c: gemm(a, b, c, handle=cupy_handle))
    methods["gemm_torch_one_set"], methods["gemm_torch_sets_in_turn"] = loops(
        torch_sets, lambda a, b, c: gemm(a, b, c, handle=torch_handle))
    times: dict[str, list[float]] = {key: [] for key in methods}
    for loop in range(LOOPS + 1):
        for key, run in methods.items():
            run()
            torch.cuda.synchronize()
            backend.synchronize()
            t0 = time.perf_counter()
            run()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            backend.synchronize()
            if loop:
                times[key].append((t1 - t0) / CALLS * 1e6)
    base = {kind: statistics.median(times[f"cublas_{kind}"]) for kind in ("one_set", "sets_in_turn")}
    for key, values in times.items():
        kind = "one_set" if key.endswith("one_set") else "sets_in_turn"
        median = statistics.median(values)
        print(f"{key:24s} median {median:6.2f} us  min {min(values):6.2f}  x cuBLAS {median / base[kind]:.3f}")


if __name__ == "__main__":
    main()
