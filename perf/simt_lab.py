"""SIMT lab: the generated SIMT kernels of every transpose pair and alignment class against
cuBLAS strict FP32, including odd sizes, padded leading dimensions and offset pointers, which
``perf/bench.py`` does not make.

Run on a GPU machine after ``python -m sgblas.warmup`` (CuPy for the operands and cuBLAS)::

    NVIDIA_TF32_OVERRIDE=0 python -m perf.simt_lab --out results/ --budget-s 60

Each case is ``pair m x n x k``, an extra padding of every leading dimension (``ld = rows +
pad``, as is, so odd pads make the 4-byte class) and an offset in elements of each pointer
into its allocation. The kernel is the SIMT variant the dispatch heuristic ranks first for that
problem (``--force NAME`` to pick one; what ``sgblas.explain`` would run, a split-K or skinny
kernel perhaps, is recorded beside it); it is launched directly on its cubin from sgblas's
cache (no host API in the timed region), in batches between two CUDA events, alternating
with cuBLAS ``gemmEx`` (``CUBLAS_COMPUTE_32F_PEDANTIC``, host pointer mode) on the same
operands, three rounds each; the median batch gives the time. Operands are random normal;
below 4 times the L2 the calls rotate over several operand sets. The result is compared with
cuBLAS's (relative Frobenius error). Writes ``simt_lab.json`` and prints a Markdown table.
``--list`` prints the cases without a GPU.

For tuning: ``--variants A,B,...`` times each listed variant that can run a case (only those
are compiled and no handle is made, so a trial row of the manifest costs its own compile, not
a warm-up of the registry), ``--shapes MxNxK,...``
replaces the built-in cases (tight leading dimensions, the pairs of ``--pairs``), and
``--profile`` launches each variant twice per case and times nothing, for ``ncu`` (profile the
second launch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (label, pair, m, n, k, pad, (offset A, B, C) in elements)
SQUARE = [(f"sq{s}", pair, s, s, s, 0, (0, 0, 0))
          for s in (2048, 4096, 8192) for pair in ("NN", "NT", "TN", "TT")]
BIG = [("sq16384", pair, 16384, 16384, 16384, 0, (0, 0, 0)) for pair in ("NN", "NT", "TN", "TT")]
ODD = [(f"odd_a{cls}", pair, m, n, k, pad, offs)
       for pair in ("NN", "NT", "TN", "TT")
       for cls, m, n, k, pad, offs in (
           ("16", 4095, 4093, 4097, 1, (4, 8, 0)),    # odd m, n, k; ld rounded below to a16
           ("8", 2001, 3001, 2003, 1, (2, 2, 2)),     # ld even: the 8-byte class
           ("4", 4097, 4097, 4097, 3, (1, 2, 3)),     # odd lds, offsets 1-3: the 4-byte class
           ("4", 8191, 8190, 8193, 2, (3, 1, 2)),
           ("4", 4096, 4096, 4096, 0, (1, 1, 1)),     # issue 14's examples: tight lds of 4096
           ("4", 4096, 4096, 4096, 1, (0, 0, 0)))]    # with offset pointers, lds padded by one
#: a16 cases keep ld a multiple of 4; the a8 ones a multiple of 2.
ROUND = {"odd_a16": 4, "odd_a8": 2}


def cases(args) -> list[tuple]:
    if args.shapes:
        pairs = args.pairs.split(",") if args.pairs else ["NN", "NT", "TN", "TT"]
        out = []
        for text in args.shapes.split(","):
            m, n, k = (int(x) for x in text.lower().split("x"))
            out += [(f"{m}x{n}x{k}", pair, m, n, k, 0, (0, 0, 0)) for pair in pairs]
        return out
    out = list(SQUARE) + list(ODD)
    if args.big:
        out += BIG
    if args.pairs:
        out = [c for c in out if c[1] in args.pairs.split(",")]
    return out


def _ld(rows: int, pad: int, label: str) -> int:
    ld = max(1, rows + pad)
    r = ROUND.get(label, 1)
    return -(-ld // r) * r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.simt_lab", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="perf/results")
    ap.add_argument("--budget-s", type=float, default=90.0, help="stop starting cases after this")
    ap.add_argument("--batch-s", type=float, default=0.04, help="GPU time per timed batch")
    ap.add_argument("--pairs", default="", help="only these pairs, e.g. NT,TT")
    ap.add_argument("--big", action="store_true", help="add 16384^3 (about 0.4 s per call pair)")
    ap.add_argument("--force", default="", help="time this variant instead of the dispatcher's choice")
    ap.add_argument("--variants", default="", help="time each of these comma-separated variants that can run "
                    "a case, instead of the dispatcher's choice; only they are compiled")
    ap.add_argument("--shapes", default="", help="MxNxK,... cases for --pairs (tight leading dimensions) "
                    "instead of the built-in sets")
    ap.add_argument("--profile", action="store_true", help="launch each variant twice per case and time "
                    "nothing (for ncu: profile the second launch)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    todo = cases(args)
    if args.list:
        for c in todo:
            print(*c)
        return 0

    import cupy as cp
    import numpy as np
    from cupy.cuda import cublas

    import sgblas
    from sgblas.kernels.spec import by_name
    from sgblas.runtime import driver
    from sgblas.runtime.launch import launch

    stream0 = driver.as_pointer(0)  # the legacy default stream, CuPy's and cuBLAS's here too

    t_start = time.perf_counter()
    wanted = [v for v in args.variants.split(",") if v] or ([args.force] if args.force else [])
    kernels, props_sg = _load_simt(wanted)
    handle = None
    if not args.variants:  # a handle loads (compiles) every variant of the registry
        try:
            handle = sgblas.Handle()  # for sgblas.explain only: what the dispatcher would pick
        except Exception as exc:
            print(f"no handle ({type(exc).__name__}: {exc}); the dispatcher's choice is not recorded", flush=True)
    cb = cublas.create()
    cublas.setPointerMode(cb, cublas.CUBLAS_POINTER_MODE_HOST)
    compute = getattr(cublas, "CUBLAS_COMPUTE_32F_PEDANTIC", 69)
    r32f = cp.cuda.runtime.CUDA_R_32F
    ops = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T}
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    # What every measurement calls: the array library, the launcher, cuBLAS and its constants.
    lib = SimpleNamespace(cp=cp, np=np, launch=launch, stream0=stream0, cublas=cublas, cb=cb, compute=compute,
                          r32f=r32f, ops=ops, one=one, zero=zero)
    props = cp.cuda.runtime.getDeviceProperties(0)
    l2 = int(props.get("l2CacheSize", 50 << 20))
    records = []
    print(f"device {props['name'].decode() if isinstance(props['name'], bytes) else props['name']}, "
          f"cuBLAS {cublas.getVersion(cb)}", flush=True)

    for label, pair, m, n, k, pad, offs in todo:
        if time.perf_counter() - t_start > args.budget_s:
            print(f"budget spent: skipping {label} {pair}", flush=True)
            continue
        ta, tb = pair
        a_rows, a_cols = (m, k) if ta == "N" else (k, m)
        b_rows, b_cols = (k, n) if tb == "N" else (n, k)
        lda, ldb, ldc = _ld(a_rows, pad, label), _ld(b_rows, pad, label), _ld(m, pad, label)
        ext = [(a_cols - 1) * lda + a_rows, (b_cols - 1) * ldb + b_rows, (n - 1) * ldc + m]
        nbytes = 4 * sum(ext)
        sets = max(1, min(8, int(4 * l2 // nbytes) + 1)) if nbytes < 4 * l2 else 1
        rs = cp.random.RandomState(zlib.crc32(f"{label} {pair}".encode()))
        bufs = [[rs.standard_normal(e + o, dtype=cp.float32) for e, o in zip(ext, offs)] for _ in range(sets)]
        ptrs = [[int(b.data.ptr) + 4 * o for b, o in zip(s, offs)] for s in bufs]
        c_ours = cp.zeros(ext[2] + offs[2], cp.float32)
        c_ref = cp.zeros(ext[2] + offs[2], cp.float32)
        a_ptr0 = int(bufs[0][0].data.ptr) + 4 * offs[0]
        b_ptr0 = int(bufs[0][1].data.ptr) + 4 * offs[1]
        try:
            chosen = "not recorded (no handle)" if handle is None else sgblas.explain(
                handle, ta, tb, m, n, k, bufs[0][0][offs[0]:], lda, bufs[0][1][offs[1]:], ldb,
                c_ours[offs[2]:], ldc).kernel
        except Exception as exc:
            chosen = f"not known: {type(exc).__name__}: {exc}"
        # The SIMT variant the heuristic ranks first (the dispatcher may prefer a split-K or
        # skinny kernel for some shapes; this lab times the SIMT kernels), or the listed ones.
        problem = _problem(props_sg, ta, tb, m, n, k, (a_ptr0, lda), (b_ptr0, ldb),
                           (int(c_ours.data.ptr) + 4 * offs[2], ldc))
        names = [v for v in wanted if by_name(v).can_implement(problem) is None] if wanted else \
            [_simt_choice(props_sg, problem)]
        for name in names:
            spec = by_name(name)
            case = SimpleNamespace(pair=pair, m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, offs=offs, ext=ext,
                                   sets=sets, ptrs=ptrs, c_ours=c_ours, c_ref=c_ref)
            rec = _measure(args, lib, case, kernels[name], spec)
            if rec is None:
                print(f"{label} {pair} {name}: launched twice", flush=True)
                continue
            rec.update(label=label, kernel=name, dispatcher_kernel=chosen)
            records.append(rec)
            print(f"{label:9s} {pair} {m}x{n}x{k} ld {lda}/{ldb}/{ldc} off {offs} {name}: "
                  f"{rec['tflops']['sgblas']:.2f} vs {rec['tflops']['cublas']:.2f} TFLOP/s = {rec['ratio']:.3f}x, "
                  f"err {rec['rel_err_vs_cublas']:.1e}", flush=True)
        bufs = c_ours = c_ref = None
        cp.get_default_memory_pool().free_all_blocks()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.profile:
        (out / "simt_lab.json").write_text(json.dumps(records, indent=1))
    print("\n| case | pair | m x n x k | lda/ldb/ldc | offsets | kernel | sgblas TFLOP/s | cuBLAS TFLOP/s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['label']} | {r['pair']} | {r['m']}x{r['n']}x{r['k']} | {r['lda']}/{r['ldb']}/{r['ldc']} | "
              f"{tuple(r['offsets'])} | {r['kernel'].replace('sgemm_simt_', '')} | {r['tflops']['sgblas']:.2f} | "
              f"{r['tflops']['cublas']:.2f} | {r['ratio']:.3f} |")
    cublas.destroy(cb)
    if handle is not None:
        handle.close()
    return 0


def _measure(args, lib, case, kern, spec) -> dict | None:
    """One variant on one case: its error against cuBLAS and both times (None with --profile:
    two launches, nothing timed)."""
    cp, np, cublas = lib.cp, lib.np, lib.cublas
    (ta, tb), m, n, k = case.pair, case.m, case.n, case.k
    lda, ldb, ldc, offs, ext, sets, ptrs = case.lda, case.ldb, case.ldc, case.offs, case.ext, case.sets, case.ptrs
    grid = spec.grid(m, n, k)

    def ours(i, c_ptr=None):
        a, b, c = ptrs[i % sets]
        lib.launch(kern, grid, lib.stream0, (m, n, k, 1.0, a, ext[0], lda, b, ext[1], ldb, 0.0,
                                             c if c_ptr is None else c_ptr, ext[2], ldc))

    def theirs(i, c_ptr=None):
        a, b, c = ptrs[i % sets]
        cublas.gemmEx(lib.cb, lib.ops[ta], lib.ops[tb], m, n, k, lib.one.ctypes.data, a, lib.r32f, lda, b,
                      lib.r32f, ldb, lib.zero.ctypes.data, c if c_ptr is None else c_ptr, lib.r32f, ldc,
                      lib.compute, cublas.CUBLAS_GEMM_DEFAULT)

    if args.profile:
        ours(0)
        ours(0)
        cp.cuda.runtime.deviceSynchronize()
        return None
    # correctness against cuBLAS on set 0
    ours(0, int(case.c_ours.data.ptr) + 4 * offs[2])
    theirs(0, int(case.c_ref.data.ptr) + 4 * offs[2])
    cp.cuda.runtime.deviceSynchronize()
    mine = _matrix(cp, case.c_ours[offs[2]:], m, n, ldc)
    ref = _matrix(cp, case.c_ref[offs[2]:], m, n, ldc)
    rel = float(cp.linalg.norm(mine - ref) / cp.linalg.norm(ref))
    # timing: batches between events, alternating libraries
    t_one = _time_batch(cp, ours, 1)
    reps = max(1, min(200, int(args.batch_s / max(t_one, 1e-6))))
    t = {"sgblas": [], "cublas": []}
    for _ in range(3):
        t["sgblas"].append(_time_batch(cp, ours, reps))
        t["cublas"].append(_time_batch(cp, theirs, reps))
    flop = 2.0 * m * n * k
    tf = {who: flop / float(np.median(v)) / 1e12 for who, v in t.items()}
    return dict(pair=case.pair, m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, offsets=offs, align=spec.align, sets=sets,
                reps=reps, rel_err_vs_cublas=rel, seconds=dict(t), tflops=tf,
                ratio=tf["sgblas"] / tf["cublas"])


def _load_simt(names: list[str] | None = None):
    """The SIMT variants (every one, or ``names``) loaded for device 0 from sgblas's cache
    (compiled when missing), and (cc, device properties) for the heuristic: no handle, so no
    other variant must build."""
    import cupy as cp

    from sgblas.kernels.spec import GEMM_KERNELS
    from sgblas.runtime import driver, loader
    from sgblas.runtime.build import fill_cache
    from sgblas.runtime.device import compute_capability, device_properties
    from sgblas.runtime.launch import LoadedKernel

    cp.cuda.Device(0).use()
    cp.zeros(1)  # the primary context, current
    cc = compute_capability(0)
    specs = [s for s in GEMM_KERNELS if s.name.startswith("sgemm_simt_") and (not names or s.name in names)]
    filled = fill_cache(specs, cc, 0)
    out = {}
    for spec in specs:
        function = loader._load_kernel(spec.name, cc, filled[spec.name][0])
        out[spec.name] = LoadedKernel(spec.name, spec.abi, spec.block, function, driver.as_pointer(function), None)
    return out, (cc, device_properties(0))


def _problem(props, ta, tb, m, n, k, a, b, c):
    from sgblas.enums import MathMode
    from sgblas.kernels.problem import GemmProblem

    return GemmProblem(props[0], MathMode.FP32, ta, tb, m, n, k, a[0], a[1], b[0], b[1], c[0], c[1])


def _simt_choice(props, p) -> str:
    """The SIMT variant the dispatch heuristic ranks first among the legal ones."""
    from sgblas.dispatch import heuristic
    from sgblas.kernels.spec import GEMM_KERNELS

    properties = props[1]
    legal = [s for s in GEMM_KERNELS if s.name.startswith("sgemm_simt_") and s.can_implement(p) is None]
    return heuristic.rank(legal, p, properties, 0)[0].spec.name


def _matrix(cp, flat, rows, cols, ld):
    full = cp.zeros(ld * cols, cp.float32)
    full[: min(flat.size, ld * cols)] = flat[: ld * cols]
    return full.reshape(cols, ld)[:, :rows].astype(cp.float64)


def _time_batch(cp, fn, reps: int) -> float:
    """Seconds per call over ``reps`` back-to-back calls (after one untimed call)."""
    fn(0)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for i in range(reps):
        fn(i)
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e-3 / reps


if __name__ == "__main__":
    sys.exit(main())
