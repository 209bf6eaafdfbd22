"""Accuracy of sgblas against float64, side by side with cuBLAS PEDANTIC; and two companions:
what a K split costs, and the skinny kernels' bandwidth against a device-to-device copy.

Usage (from the repository root, on a GPU machine with CuPy)::

    python -m perf.accuracy                       # accuracy at m = n = 256, K = 1024 .. 262144
    python -m perf.accuracy --cost --bandwidth    # and the two companions
    python -m perf.accuracy --ks 1024,65536 --dists uniform --pairs NN,TT

What is measured, and how:

- **Accuracy.** For each distribution (``normal``: standard normal; ``uniform``: [0, 1), all
  terms of one sign, where a sum's rounding errors add up) and each K, A (m x K) and B (K x n)
  are drawn on the GPU in float32, C = A B is computed by sgblas (``sgblas.sgemm``, the kernel
  sgblas chooses, recorded with the number of K splits) and by cuBLAS ``gemmEx`` with
  ``CUBLAS_COMPUTE_32F_PEDANTIC`` (``perf.bench.CublasPedantic``), and each is compared with
  the float64 product of the same float32 inputs (CuPy float64 matmul on the GPU):
  ``||C - C64||_F / ||C64||_F``. The ratio sgblas / cuBLAS below 1 means sgblas is closer.
- **Cost of a split** (``--cost``): for shapes where sgblas's choice splits K, the median time of
  the split call (the handle's default workspace) and of the same call without one
  (``workspace_bytes=0``: the tile kernel), both with their errors against float64.
- **Bandwidth** (``--bandwidth``): a 1 GiB device-to-device copy (bytes read + written over
  its median time), then the skinny shapes for sgblas and cuBLAS: bytes of A + B + C (C
  written once, beta = 0) over the median time, and its share of the copy's rate.

- **Emulation** (``--emulate``, no GPU): the same error for sgblas's summation structure
  computed on the CPU: each of S slices summed in k order with one rounding per step (a fused
  multiply-add: the float64 sum of the exact product, rounded to float32), then the float32
  partials added in the reduction's fixed order (``sgblas.kernels.reduce.order``); S is sgblas's choice on a 132-SM device with the
  default workspace (``--splits`` overrides it), at m = n = min(m, 128). Used to predict an error before a device run;
  it reproduced the device's figures to about 1% (docs/tuning.md).

Times are CUDA-event medians after warm-up on one non-blocking CuPy stream that sgblas and
cuBLAS share. ``NVIDIA_TF32_OVERRIDE=0`` is set before CuPy loads cuBLAS. Writes
``perf/results/accuracy_<UTC date-time>_<device>.json`` and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf import environment, results_io  # noqa: E402

DEFAULT_KS = tuple(1024 * 2**i for i in range(9))  # 1024 .. 262144
DEFAULT_COST_SHAPES = ((2048, 2048, 16384), (1000, 1000, 100000), (128, 8192, 8192), (512, 512, 65536))
DEFAULT_SKINNY_SHAPES = ((3, 8192, 8192), (8192, 3, 8192), (16, 16384, 4096))
COPY_BYTES = 1 << 30


def parse_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must list positive integers")
    return values


def parse_shapes(text: str) -> tuple[tuple[int, int, int], ...]:
    from perf.bench import parse_shape

    return tuple(parse_shape(t) for t in text.split(",") if t.strip())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m perf.accuracy", description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, default=256, help="rows and columns of C (default 256)")
    p.add_argument("--ks", type=parse_ints, default=DEFAULT_KS, metavar="K,K,...")
    p.add_argument("--dists", default="normal,uniform", help="normal, uniform or both (default)")
    p.add_argument("--pairs", default="NN", help="transpose pairs for the accuracy sweep and the skinny shapes "
                   "(default NN)")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--cost", action="store_true", help="time split-K against the tile kernel")
    p.add_argument("--cost-shapes", type=parse_shapes, default=DEFAULT_COST_SHAPES, metavar="MxNxK,...")
    p.add_argument("--bandwidth", action="store_true", help="skinny shapes against a device copy")
    p.add_argument("--skinny-shapes", type=parse_shapes, default=DEFAULT_SKINNY_SHAPES, metavar="MxNxK,...")
    p.add_argument("--reps", type=int, default=30, help="timed calls per measurement (default 30)")
    p.add_argument("--emulate", action="store_true", help="CPU emulation of sgblas's error only (no GPU)")
    p.add_argument("--splits", type=parse_ints, default=None, metavar="S,S,...",
                   help="with --emulate: these split counts instead of sgblas's choice")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--out", type=Path, default=results_io.RESULTS_DIR, metavar="DIR")
    args = p.parse_args(argv)
    args.dists = tuple(d.strip() for d in args.dists.split(",") if d.strip())
    for d in args.dists:
        if d not in ("normal", "uniform"):
            p.error(f"--dists item {d!r} is not normal or uniform")
    args.pairs = tuple(x.strip().upper() for x in args.pairs.split(",") if x.strip())
    for pair in args.pairs:
        if pair not in ("NN", "NT", "TN", "TT"):
            p.error(f"--pairs item {pair!r} is not one of NN, NT, TN, TT")
    return args


class Bench:
    """CuPy arrays, one stream, an sgblas handle and cuBLAS PEDANTIC on it."""

    def __init__(self, device: int) -> None:
        from perf.bench import CublasPedantic, CupyBackend

        import sgblas

        self.sgblas = sgblas
        self.backend = CupyBackend(device)
        self.cp = self.backend.cp
        self.stream = self.backend.stream
        self.handle = sgblas.Handle(device=device, stream=self.stream)
        self.cublas = CublasPedantic(self.backend)

    def random(self, n: int, dist: str, seed: int):
        cp = self.cp
        state = cp.random.RandomState(seed)
        if dist == "uniform":
            return state.random_sample(n, dtype=cp.float32)
        return state.standard_normal(n, dtype=cp.float32)

    def sgemm(self, handle, case, a, b, c) -> None:
        status = self.sgblas.sgemm(handle, case.transa, case.transb, case.m, case.n, case.k, 1.0, a, case.lda,
                                   b, case.ldb, 0.0, c, case.ldc)
        if int(status) != 0:
            raise RuntimeError(f"sgblas.sgemm returned {status.name}: {self.sgblas.last_error_message()}")

    def cublas_gemm(self, case, a, b, c) -> None:
        self.cublas(case, int(a.data.ptr), int(b.data.ptr), int(c.data.ptr))

    def median_s(self, call, reps: int, warmup: int = 3) -> float:
        cp = self.cp
        for _ in range(warmup):
            call()
        events = [cp.cuda.Event() for _ in range(reps + 1)]
        events[0].record(self.stream)
        for i in range(reps):
            call()
            events[i + 1].record(self.stream)
        events[-1].synchronize()
        return statistics.median(cp.cuda.get_elapsed_time(events[i], events[i + 1]) * 1e-3 for i in range(reps))

    def rel_error(self, c, ref64, rows: int, cols: int) -> float:
        cp = self.cp
        got = c.reshape(cols, rows).T.astype(cp.float64)
        return float(cp.linalg.norm(got - ref64) / cp.linalg.norm(ref64))

    def kernel_and_splits(self, handle, case, a, b, c) -> tuple[str, int]:
        from sgblas.dispatch.plan import choose
        from sgblas.kernels.problem import GemmProblem

        ex = self.sgblas.explain(handle, case.transa, case.transb, case.m, case.n, case.k, a, case.lda, b,
                                 case.ldb, c, case.ldc)
        p = GemmProblem(handle.cc, handle.math_mode, case.transa, case.transb, case.m, case.n, case.k,
                        int(a.data.ptr), case.lda, int(b.data.ptr), case.ldb, int(c.data.ptr), case.ldc)
        choice = choose(p, handle.properties, handle.workspace_bytes)
        return str(ex.kernel), (choice.split.splits if choice.split else 1)


def _operands(bench: Bench, case, dist: str, seed: int):
    ar, ac = case.a_dims
    br, bc = case.b_dims
    a = bench.random(case.lda * ac, dist, seed)
    b = bench.random(case.ldb * bc, dist, seed + 1)
    c = bench.cp.full(case.ldc * case.n, bench.cp.nan, dtype=bench.cp.float32)
    return a, b, c


def _reference(bench: Bench, case, a, b):
    cp = bench.cp
    ar, ac = case.a_dims
    br, bc = case.b_dims
    a64 = a.reshape(ac, ar).T.astype(cp.float64)
    b64 = b.reshape(bc, br).T.astype(cp.float64)
    if case.transa == "T":
        a64 = a64.T
    if case.transb == "T":
        b64 = b64.T
    return a64 @ b64


def accuracy(bench: Bench, args) -> list[dict[str, Any]]:
    from perf.bench import Case

    rows = []
    for pair in args.pairs:
        for dist in args.dists:
            for k in args.ks:
                case = Case(args.m, args.m, k, pair[0], pair[1], "custom")
                seed = args.seed + 7919 * k + (1 if dist == "uniform" else 0)
                with bench.backend.activated():
                    a, b, c = _operands(bench, case, dist, seed)
                    ref = _reference(bench, case, a, b)
                    kernel, splits = bench.kernel_and_splits(bench.handle, case, a, b, c)
                    bench.sgemm(bench.handle, case, a, b, c)
                    err_sgblas = bench.rel_error(c, ref, case.m, case.n)
                    c.fill(bench.cp.nan)
                    bench.cublas_gemm(case, a, b, c)
                    err_cublas = bench.rel_error(c, ref, case.m, case.n)
                    bench.stream.synchronize()
                    del a, b, c, ref
                    bench.backend.release()
                row = dict(pair=pair, dist=dist, m=case.m, n=case.n, k=k, kernel=kernel, splits=splits,
                           sgblas_rel_error=err_sgblas, cublas_rel_error=err_cublas,
                           ratio=err_sgblas / err_cublas if err_cublas else None)
                rows.append(row)
                print(f"  accuracy {pair} {dist:>7} K={k:>6}: sgblas {err_sgblas:.3e} ({splits} splits)  "
                      f"cuBLAS {err_cublas:.3e}  ratio {row['ratio']:.2f}" if row["ratio"] else row, flush=True)
    return rows


def cost(bench: Bench, args) -> list[dict[str, Any]]:
    from perf.bench import Case

    import sgblas

    rows = []
    with bench.backend.activated():
        no_ws = sgblas.Handle(device=args.device, stream=bench.stream, workspace_bytes=0)
        try:
            for m, n, k in args.cost_shapes:
                case = Case(m, n, k, "N", "N", "custom")
                a, b, c = _operands(bench, case, "normal", args.seed + m + n + k)
                ref = _reference(bench, case, a, b)
                row = dict(m=m, n=n, k=k)
                for label, handle in (("split", bench.handle), ("unsplit", no_ws)):
                    kernel, splits = bench.kernel_and_splits(handle, case, a, b, c)
                    t = bench.median_s(lambda h=handle: bench.sgemm(h, case, a, b, c), args.reps)
                    row[label] = dict(kernel=kernel, splits=splits, median_s=t,
                                      tflops=2.0 * m * n * k / t * 1e-12,
                                      rel_error=bench.rel_error(c, ref, m, n))
                t = bench.median_s(lambda: bench.cublas_gemm(case, a, b, c), args.reps)
                row["cublas"] = dict(median_s=t, tflops=2.0 * m * n * k / t * 1e-12,
                                     rel_error=bench.rel_error(c, ref, m, n))
                row["split_over_unsplit_time"] = row["split"]["median_s"] / row["unsplit"]["median_s"]
                rows.append(row)
                print(f"  cost {m}x{n}x{k}: split {row['split']['tflops']:.1f} TFLOP/s ({row['split']['splits']}), "
                      f"unsplit {row['unsplit']['tflops']:.1f}, cuBLAS {row['cublas']['tflops']:.1f}", flush=True)
                del a, b, c, ref
                bench.backend.release()
        finally:
            no_ws.close()
    return rows


def bandwidth(bench: Bench, args) -> dict[str, Any]:
    from perf.bench import Case

    cp = bench.cp
    out: dict[str, Any] = {}
    with bench.backend.activated():
        src = cp.ones(COPY_BYTES // 4, dtype=cp.float32)
        dst = cp.empty_like(src)
        t = bench.median_s(lambda: dst.__setitem__(Ellipsis, src), max(10, args.reps // 3))
        copy_rate = 2 * COPY_BYTES / t
        out["copy"] = dict(bytes_each_way=COPY_BYTES, median_s=t, bytes_per_s=copy_rate)
        print(f"  device-to-device copy: {copy_rate / 1e12:.2f} TB/s (read + write)", flush=True)
        del src, dst
        bench.backend.release()
        shapes = []
        for (m, n, k), pair in ((shape, pair) for shape in args.skinny_shapes for pair in args.pairs):
            case = Case(m, n, k, pair[0], pair[1], "custom")
            a, b, c = _operands(bench, case, "normal", args.seed + 3 * m + n + k)
            ref = _reference(bench, case, a, b)
            nbytes = 4 * (m * k + k * n + m * n)
            kernel, splits = bench.kernel_and_splits(bench.handle, case, a, b, c)
            reps = max(args.reps, 100)
            ts = bench.median_s(lambda: bench.sgemm(bench.handle, case, a, b, c), reps)
            es = bench.rel_error(c, ref, m, n)
            tc = bench.median_s(lambda: bench.cublas_gemm(case, a, b, c), reps)
            ec = bench.rel_error(c, ref, m, n)
            row = dict(m=m, n=n, k=k, pair=pair, bytes=nbytes, kernel=kernel, splits=splits,
                       sgblas=dict(median_s=ts, bytes_per_s=nbytes / ts, share_of_copy=nbytes / ts / copy_rate,
                                   tflops=2.0 * m * n * k / ts * 1e-12, rel_error=es),
                       cublas=dict(median_s=tc, bytes_per_s=nbytes / tc, share_of_copy=nbytes / tc / copy_rate,
                                   tflops=2.0 * m * n * k / tc * 1e-12, rel_error=ec),
                       ratio=tc / ts)
            shapes.append(row)
            print(f"  skinny {m}x{n}x{k} {pair}: sgblas {nbytes / ts / 1e9:.0f} GB/s ({row['sgblas']['share_of_copy']:.0%} "
                  f"of copy, {splits} splits), cuBLAS {nbytes / tc / 1e9:.0f} GB/s, ratio {row['ratio']:.2f}",
                  flush=True)
            del a, b, c, ref
            bench.backend.release()
        out["skinny"] = shapes
    return out


def emulated_error(dist: str, k: int, splits: int, m: int, seed: int) -> float:
    """sgblas's relative Frobenius error for an m x m x k product split ``splits`` ways, computed
    on the CPU with its summation structure (see the module docstring)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if dist == "uniform":
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, m), dtype=np.float32)
    else:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, m), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    from sgblas.kernels import reduce

    chunk = -(-k // splits)
    partials = []
    for s in range(splits):
        acc = np.zeros((m, m), np.float32)
        for kk in range(s * chunk, min(k, (s + 1) * chunk)):
            # exact product, one rounding: what a fused multiply-add does
            acc = (acc.astype(np.float64) + np.outer(a64[:, kk], b64[kk])).astype(np.float32)
        partials.append(acc)
    total = reduce.fixed_order_sum(partials)  # float32 additions in the reduction's fixed order
    return float(np.linalg.norm(total - ref) / np.linalg.norm(ref))


def emulate(args) -> list[dict[str, Any]]:
    from sgblas.dispatch.plan import choose
    from sgblas.enums import MathMode
    from sgblas.handle import DEFAULT_WORKSPACE_BYTES
    from sgblas.kernels.problem import GemmProblem
    from sgblas.runtime.device import DeviceProperties

    h200 = DeviceProperties(132, 2048, 32, 65536, 233472)
    base = 0x7F0000000000
    rows = []
    for dist in args.dists:
        for k in args.ks:
            p = GemmProblem((9, 0), MathMode.FP32, "N", "N", args.m, args.m, k, base, args.m, base + 2**34, k,
                            base + 2**35, args.m)
            choice = choose(p, h200, DEFAULT_WORKSPACE_BYTES)
            chosen_splits = choice.split.splits if choice.split else 1
            for splits in (args.splits or (chosen_splits,)):
                err = emulated_error(dist, k, splits, min(args.m, 128), args.seed + k)
                rows.append(dict(dist=dist, k=k, m=args.m, splits=splits, chosen_splits=chosen_splits,
                                 emulated_rel_error=err))
                print(f"  emulated {dist:>7} K={k:>6} S={splits:>3}: {err:.3e}", flush=True)
    return rows


def _tables(doc: dict[str, Any]) -> str:
    lines = []
    if doc.get("accuracy"):
        lines += ["", "| pair | data | K | sgblas kernel | splits | sgblas error | cuBLAS error | sgblas / cuBLAS |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in doc["accuracy"]:
            ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
            lines.append(f"| {r['pair']} | {r['dist']} | {r['k']} | {r['kernel']} | {r['splits']} | "
                         f"{r['sgblas_rel_error']:.2e} | {r['cublas_rel_error']:.2e} | {ratio} |")
    if doc.get("cost"):
        lines += ["", "| shape | split TFLOP/s (splits) | error | unsplit TFLOP/s | error | cuBLAS TFLOP/s | error | "
                      "split / unsplit time |", "|---|---|---|---|---|---|---|---|"]
        for r in doc["cost"]:
            s, u, c = r["split"], r["unsplit"], r["cublas"]
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {s['tflops']:.1f} ({s['splits']}) | {s['rel_error']:.2e} | "
                         f"{u['tflops']:.1f} | {u['rel_error']:.2e} | {c['tflops']:.1f} | {c['rel_error']:.2e} | "
                         f"{r['split_over_unsplit_time']:.3f} |")
    if doc.get("bandwidth"):
        bw = doc["bandwidth"]
        lines += ["", f"copy: {bw['copy']['bytes_per_s'] / 1e12:.2f} TB/s (read + write)", "",
                  "| shape | pair | sgblas GB/s | share of copy | cuBLAS GB/s | share of copy | sgblas / cuBLAS speed |",
                  "|---|---|---|---|---|---|---|"]
        for r in bw["skinny"]:
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {r.get('pair', 'NN')} | {r['sgblas']['bytes_per_s'] / 1e9:.0f} | "
                         f"{r['sgblas']['share_of_copy']:.0%} | {r['cublas']['bytes_per_s'] / 1e9:.0f} | "
                         f"{r['cublas']['share_of_copy']:.0%} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.emulate:
        emulate(args)
        return 0
    from perf.bench import prepare_tf32_override

    ok, note = prepare_tf32_override()
    if not ok:
        print(f"perf.accuracy: refusing to run cuBLAS: {note}", file=sys.stderr)
        return 2
    if environment.simulator_enabled():
        print("perf.accuracy needs a CUDA GPU and CuPy (cuBLAS is the comparison); the simulator has neither",
              file=sys.stderr)
        return 2
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("perf.accuracy needs CuPy (cuBLAS PEDANTIC is the comparison)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    created = results_io.utc_now()
    bench = Bench(args.device)
    device = environment.device_info(args.device)
    doc: dict[str, Any] = {
        "kind": "accuracy", "schema": 1, "created": created.isoformat(), "device": device,
        "environment": environment.environment_info(), "argv": environment.public_argv(sys.argv[1:]),
        "settings": dict(m=args.m, ks=list(args.ks), dists=list(args.dists), pairs=list(args.pairs),
                         seed=args.seed, reps=args.reps, workspace_bytes=bench.handle.workspace_bytes),
        "cublas": bench.cublas.describe(),
        "error": "relative Frobenius norm ||C - C64||_F / ||C64||_F against the float64 product of the "
                 "same float32 inputs",
    }
    try:
        print(f"perf.accuracy on {device.get('name')}", flush=True)
        doc["accuracy"] = accuracy(bench, args)
        if args.cost:
            doc["cost"] = cost(bench, args)
        if args.bandwidth:
            doc["bandwidth"] = bandwidth(bench, args)
    finally:
        doc["wall_s"] = time.perf_counter() - started
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"accuracy_{created.strftime('%Y%m%d-%H%M%S')}_{results_io._slug(device.get('name') or 'unknown')}.json"
        path = args.out / name
        path.write_text(json.dumps(results_io._finite(doc), indent=1, default=results_io._json_default,
                                   allow_nan=False) + "\n", encoding="utf-8")
        bench.cublas.close()
        bench.handle.close()
        print(f"wrote {path}")
    print(_tables(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
