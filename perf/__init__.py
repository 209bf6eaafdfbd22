"""Benchmarks of sgblas against cuBLAS strict FP32, and the figures drawn from their results.

- :mod:`perf.bench`: throughput (TFLOP/s) of ``sgblas.sgemm`` and cuBLAS
  ``gemmEx(CUBLAS_COMPUTE_32F_PEDANTIC)`` on square and rectangular shapes, every transpose pair.
- :mod:`perf.overhead`: host time per call on tiny problems, import time, first-call time.
- :mod:`perf.results_io`: the JSON result files (schema, statistics, loading, Markdown tables).
- :mod:`perf.environment`: device and version information recorded with every result.
- :mod:`perf.figures`: the plots of ``perf/sgemm_perf.ipynb`` and ``docs/img/``.

Nothing here imports CuPy, PyTorch or a CUDA driver at import time, so the result loading and
plotting code runs on machines without a GPU.
"""
