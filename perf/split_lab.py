"""Split lab: the split-K slice kernels of both tiles at chosen split counts, beside sgblas's own
choice and cuBLAS strict FP32, for problems with few output tiles.

Run on a GPU machine after ``python -m sgblas.warmup`` (CuPy for the operands and cuBLAS)::

    NVIDIA_TF32_OVERRIDE=0 python -m perf.split_lab --set short --out results/

Sets (``--set``): ``short`` (1024^3 and 1536^3, where K is short but the tiles do not fill the
GPU: the unsplit 128x64 and 128x128 tiles, and 2-4 slices of each slice kernel), ``long`` (the
long-K shapes of issue 13, 3-32 slices; and 2048x2048x16384, whose many tiles are split in two
for accuracy), ``api`` (512^3 to 1536^3 and a few rectangles: what ``sgblas.sgemm`` runs with a default handle against
the unsplit 128x64 tile that ran them before split-K took short K, and in TN against the 128x64
slice kernel that ran them before its 128x128 one existed), ``skinny`` (the skinny shapes of issue 13, each pair's skinny
variant at 1 to 32 splits: how many CTAs per SM each loop streams best with). Every case is
timed three ways in one process: cuBLAS ``gemmEx`` PEDANTIC; ``sgblas.sgemm`` on a handle with the default workspace (sgblas's
choice, recorded with ``explain``'s note); and each listed variant and split count
launched through ``sgblas.dispatch.plan.execute`` on a plan made for it (a handle with 512 MiB
of workspace, so the split is not capped). Operands are random normal, rotating over enough
sets to exceed 4x the L2; CUDA events around batches of calls on one stream, the median of 15
batches. Each variant's result is compared with cuBLAS's (largest difference over largest
value). Prints one JSON line per case and, at the end, a Markdown table of the ratios; writes
``split_lab_<set>.jsonl`` to ``--out``. ``--pairs NT,TT`` keeps the cases of those pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

L2_BYTES = 60 << 20
PAIRS = ("NN", "NT", "TN", "TT")
#: The pairs whose 128x128 slice kernels the long set also times at 8192 x 128 and 2048^2 x 16384.
NN_NT = ("NN", "NT")


def _variants(pair: str, kind: str, tiles: tuple[str, ...], splits: tuple[int, ...]) -> list[tuple[str, int]]:
    """The registry's variants among ``tiles`` (``BMxBN``, BK 16 appended, or a whole tile name,
    ``64x64x16``) for ``pair``, each at each split count: a pair without one of the tiles is
    timed on the others."""
    from sgblas.kernels.spec import REGISTRY

    names = {spec.name for spec in REGISTRY}
    out = [(f"sgemm_{kind}_{pair.lower()}_{tile if tile.count('x') > 1 else tile + 'x16'}_2s_a16", s)
           for tile in tiles for s in splits]
    return [(name, s) for name, s in out if name in names]


def cases(which: str) -> list[tuple[tuple[int, int, int], str, list[tuple[str, int]]]]:
    """``(shape, pair, [(variant, splits), ...])`` of a set."""
    out = []
    if which == "short":
        for size, pairs in ((1024, PAIRS), (1536, ("NN", "TN"))):
            for pair in pairs:
                out.append(((size, size, size), pair,
                            _variants(pair, "simt", ("128x64", "128x128"), (1,))
                            + _variants(pair, "splitk", ("128x64",), (2, 3) if size == 1536 else (2, 3, 4))
                            + _variants(pair, "splitk", ("128x128",), (2, 3) if size == 1536 else (2, 4))))
    elif which == "long":
        for pair in PAIRS:
            out.append(((128, 8192, 8192), pair, _variants(pair, "splitk", ("128x64",), (3, 4))
                        + _variants(pair, "splitk", ("128x128",), (4, 8))))
            out.append(((1000, 1000, 100000), pair, _variants(pair, "splitk", ("128x64", "128x128"), (4, 8))))
            out.append(((512, 512, 65536), pair, _variants(pair, "splitk", ("128x64", "128x128"), (16, 32))))
        out.append(((8192, 128, 8192), "TN", _variants("TN", "splitk", ("128x64",), (3, 4))
                    + _variants("TN", "splitk", ("128x128",), (4,))))
        out += [((8192, 128, 8192), pair, _variants(pair, "splitk", ("128x128",), (4,))) for pair in NN_NT]
        # many tiles, split in two for accuracy (k >= 16384)
        out += [((2048, 2048, 16384), pair, _variants(pair, "splitk", ("128x128",), (2,))) for pair in NN_NT]
    elif which == "api":
        for size in (512, 768, 1024, 1536):
            for pair in PAIRS:
                # TN: the 128x64 slice kernel at the splits it took before rung 27
                # (docs/history/tuning-ladder-4-runs-j-to-l.md)
                splits = (2, 3) if pair == "TN" else (3,) if size == 1536 else ()
                out.append(((size, size, size), pair, _variants(pair, "simt", ("128x64",), (1,))
                            + _variants(pair, "splitk", ("128x64",), splits)))
        for shape in ((128, 8192, 1024), (8192, 128, 1024), (3000, 200, 4000), (2048, 512, 1024)):
            for pair in ("NN", "TN"):
                out.append((shape, pair, _variants(pair, "simt", ("128x64", "128x128"), (1,))
                            + (_variants(pair, "splitk", ("128x64",), (3, 4)) if pair == "TN" else [])))
    elif which == "skinny":
        for shape, splits in (((16, 16384, 4096), (1, 2, 4, 8, 12, 16)), ((3, 8192, 8192), (4, 8, 16, 24, 32)),
                              ((8192, 3, 8192), (4, 8, 16, 24, 32))):
            for pair in PAIRS:
                out.append((shape, pair, [(_skinny_variant(shape, pair), s) for s in splits]))
    else:
        raise ValueError(f"--set {which!r} is not one of short, long, api, skinny")
    return out


def _skinny_variant(shape: tuple[int, int, int], pair: str) -> str:
    """The registry's 16-byte skinny variant for ``pair`` with the small side of ``shape`` (the
    lab's shapes are aligned)."""
    from sgblas.kernels.spec import GEMM_KERNELS

    small = "m" if shape[0] <= shape[1] else "n"
    (name,) = [s.name for s in GEMM_KERNELS
               if s.role == "skinny" and s.pair == (pair[0], pair[1]) and s.config.small == small and s.align == 16]
    return name


class Lab:
    def __init__(self) -> None:
        import sgblas
        from perf.bench import CublasPedantic, CupyBackend

        self.sgblas = sgblas
        self.backend = CupyBackend()
        self.cp = self.backend.cp
        self.stream = self.backend.stream
        self.wide = sgblas.Handle(stream=self.stream, workspace_bytes=512 << 20)
        self.default = sgblas.Handle(stream=self.stream)
        self.cublas = CublasPedantic(self.backend)

    def operand_sets(self, case: Any) -> list[tuple[Any, Any, Any]]:
        cp = self.cp
        (ar, ac), (br, bc) = case.a_dims, case.b_dims
        per = 4 * (ar * ac + br * bc + case.m * case.n)
        rs = cp.random.RandomState(1)
        return [(rs.standard_normal(ar * ac, dtype=cp.float32), rs.standard_normal(br * bc, dtype=cp.float32),
                 cp.full(case.m * case.n, cp.nan, dtype=cp.float32))
                for _ in range(max(1, min(12, math.ceil(4 * L2_BYTES / per))))]

    def median_s(self, call, sets, estimate_s: float) -> float:
        cp = self.cp
        batch = max(1, min(50, int(0.02 / max(estimate_s, 1e-6))))
        for i in range(3):
            call(*sets[i % len(sets)])
        events = [cp.cuda.Event() for _ in range(30)]
        j = 0
        for r in range(15):
            events[2 * r].record(self.stream)
            for _ in range(batch):
                call(*sets[j % len(sets)])
                j += 1
            events[2 * r + 1].record(self.stream)
        events[-1].synchronize()
        return statistics.median(cp.cuda.get_elapsed_time(events[2 * r], events[2 * r + 1]) * 1e-3 / batch
                                 for r in range(15))

    def run(self, shape: tuple[int, int, int], pair: str, variants: list[tuple[str, int]]) -> dict[str, Any]:
        from perf.bench import Case
        from sgblas.dispatch import plan as plans
        from sgblas.dispatch.candidates import split_of
        from sgblas.kernels.problem import GemmProblem
        from sgblas.kernels.spec import by_name

        m, n, k = shape
        case = Case(m, n, k, pair[0], pair[1], "custom")
        flop = 2.0 * m * n * k
        guess = flop / 45e12
        with self.backend.activated():
            sets = self.operand_sets(case)

            def cublas(a, b, c):
                self.cublas(case, int(a.data.ptr), int(b.data.ptr), int(c.data.ptr))

            t = self.median_s(cublas, sets, guess)
            a, b, c = sets[0]
            cublas(a, b, c)
            self.stream.synchronize()
            ref = c.copy()
            row: dict[str, Any] = dict(shape=f"{m}x{n}x{k}", pair=pair, cublas_tflops=flop / t * 1e-12)
            h = self.default
            ex = self.sgblas.explain(h, pair[0], pair[1], m, n, k, a, case.lda, b, case.ldb, c, case.ldc)

            def api(a, b, c):
                self.sgblas.sgemm(h, pair[0], pair[1], m, n, k, 1.0, a, case.lda, b, case.ldb, 0.0, c, case.ldc)

            t = self.median_s(api, sets, guess)
            row["api"] = dict(kernel=ex.kernel, note=ex.message, tflops=flop / t * 1e-12,
                              ratio=flop / t * 1e-12 / row["cublas_tflops"])
            for name, splits in variants:
                spec = by_name(name)
                problem = GemmProblem(self.wide.cc, self.wide.math_mode, pair[0], pair[1], m, n, k,
                                      int(a.data.ptr), case.lda, int(b.data.ptr), case.ldb, int(c.data.ptr), case.ldc)
                if spec.can_implement(problem) is not None:
                    continue
                split = split_of(spec, k, splits) if spec.role in ("splitk", "skinny") else None
                plan = plans.make_plan(self.wide, spec, split, m, n, k, int(c.data.ptr), case.ldc)

                def go(a, b, c, plan=plan):
                    plans.execute(self.wide, plan, m, n, k, 1.0, int(a.data.ptr), a.size, case.lda,
                                  int(b.data.ptr), b.size, case.ldb, 0.0, int(c.data.ptr), c.size, case.ldc)

                c.fill(self.cp.nan)
                go(a, b, c)
                self.stream.synchronize()
                diff = float(self.cp.max(self.cp.abs(c - ref)) / self.cp.max(self.cp.abs(ref)))
                t = self.median_s(go, sets, guess)
                row[f"{name}/S{splits}"] = dict(tflops=flop / t * 1e-12,
                                               ratio=flop / t * 1e-12 / row["cublas_tflops"],
                                               difference_to_cublas=diff)
            del sets, ref
            self.backend.release()
        return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.split_lab", description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="short", choices=("short", "long", "api", "skinny"))
    parser.add_argument("--out", type=Path, default=None, help="folder for split_lab_<set>.jsonl")
    parser.add_argument("--pairs", default=",".join(PAIRS),
                        help="the transpose pairs to run, comma-separated (default: all four)")
    parser.add_argument("--list", action="store_true", help="print the cases and exit (no GPU)")
    args = parser.parse_args(argv)
    pairs = [p.strip().upper() for p in args.pairs.split(",") if p.strip()]
    bad = [p for p in pairs if p not in PAIRS]
    if bad or not pairs:
        parser.error(f"--pairs {args.pairs!r}: each pair must be one of {', '.join(PAIRS)}")
    chosen = [c for c in cases(args.set) if c[1] in pairs]
    if args.list:
        for shape, pair, variants in chosen:
            print("x".join(map(str, shape)), pair, ", ".join(f"{v}/S{s}" for v, s in variants))
        return 0
    lab = Lab()
    lines = []
    for shape, pair, variants in chosen:
        row = lab.run(shape, pair, variants)
        lines.append(json.dumps(row))
        print(lines[-1], flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"split_lab_{args.set}.jsonl").write_text("\n".join(lines) + "\n")
    print(table([json.loads(line) for line in lines]))
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as Markdown: cuBLAS TFLOP/s, then each timed way's ratio to it."""
    out = ["| shape | pair | cuBLAS TFLOP/s | sgemm (kernel) | variants/splits (ratio to cuBLAS) |",
           "|---|---|---|---|---|"]
    for r in rows:
        ways = ", ".join(f"{k.replace('sgemm_', '')} {v['ratio']:.3f}" for k, v in r.items()
                         if isinstance(v, dict) and k != "api")
        out.append(f"| {r['shape']} | {r['pair']} | {r['cublas_tflops']:.1f} | {r['api']['ratio']:.3f} "
                   f"({r['api']['kernel'].replace('sgemm_', '')}) | {ways} |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
