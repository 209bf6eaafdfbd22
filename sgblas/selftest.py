"""``python -m sgblas.selftest``: a correctness sweep of :func:`sgblas.sgemm` on this machine.

Every case runs sgemm on random column-major operands with poisoned padding and compares C with
a float64 reference (:mod:`sgblas.testing`), within a K- and magnitude-scaled tolerance; C's
padding must keep its bits, and with beta == 0 C starts as NaN, which must not reach the result.

* With a CUDA GPU, the full sweep on device 0: every transpose pair x shapes with tails up to
  2048 x 2048 x 512 x tight and padded leading dimensions x alpha in {0, 1, -1.5} x beta in
  {0, 1, 0.5}. ``--quick`` runs the reduced sweep instead.
* Without one, the reduced sweep under Numba's CUDA simulator, which runs the same kernel code
  on the CPU: every transpose pair at small shapes with tails, tight, padded and 16-byte-aligned
  leading dimensions, and every alpha and beta class. The simulator has to be switched on
  before ``numba.cuda`` is imported, and importing sgblas has already chosen its backend, so the
  command runs itself again in a subprocess with ``NUMBA_ENABLE_CUDASIM=1``.

Prints one row per case (shape, pair, leading dimensions, the kernel ``sgblas.explain`` names,
the worst error over the tolerance) and, for a failure, the case's seed and what was wrong.
Exit status: 0 when every case passes, 1 when one fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from sgblas.testing import GemmCase, judge_gemm, padded_ld, stored_shape

__all__ = ["PAIRS", "ALPHAS", "BETAS", "SweepCase", "CaseResult", "Mode", "mode", "full_sweep", "reduced_sweep",
           "run_case", "simulator_command", "main"]

PAIRS: tuple[tuple[str, str], ...] = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
ALPHAS: tuple[float, ...] = (0.0, 1.0, -1.5)
BETAS: tuple[float, ...] = (0.0, 1.0, 0.5)

GPU_SHAPES = ((1, 1, 1), (7, 5, 3), (64, 64, 64), (127, 129, 65), (128, 128, 128), (129, 127, 257),
              (255, 513, 300), (1000, 1000, 1000), (1024, 512, 2049), (2048, 2048, 512))
GPU_PADS = (0, 3)

#: (m, n, k, pad, ld multiple, nonzero-alpha products) of the reduced sweep, for each pair: one
#: element; tails inside one tile and one K slice, padded; M and N tails across warps and lanes
#: with a K tail, padded; and leading dimensions that are multiples of 4 with m % 4 == 0 (the
#: 16-byte alignment class) and a K loop of two slices. The simulator runs every thread of a
#: CTA as a Python thread, so its cost goes by launches and CTAs: each case is one CTA and runs
#: few products.
REDUCED_SHAPES = ((1, 1, 1, 0, 1, 2), (5, 7, 3, 3, 1, 2), (33, 18, 9, 1, 1, 1), (36, 18, 19, 1, 4, 1))

#: The marker the command passes to the copy of itself it starts under the simulator.
_CHILD_FLAG = "--simulator-child"


class SweepCase(NamedTuple):
    """One (shape, pair, layout) of a sweep and the (alpha, beta) values it runs."""

    m: int
    n: int
    k: int
    ta: str
    tb: str
    pad: int
    ld_multiple: int
    alpha_betas: tuple[tuple[float, float], ...]

    def lds(self) -> tuple[int, int, int]:
        """lda, ldb and ldc, as :class:`sgblas.testing.GemmCase` chooses them."""
        return (padded_ld(stored_shape(self.ta, self.m, self.k)[0], self.pad, self.ld_multiple),
                padded_ld(stored_shape(self.tb, self.k, self.n)[0], self.pad, self.ld_multiple),
                padded_ld(self.m, self.pad, self.ld_multiple))

    def row(self) -> str:
        """The case as the start of a table row."""
        lda, ldb, ldc = self.lds()
        return f"{self.m:>5} {self.n:>5} {self.k:>5} {self.ta}{self.tb}   {lda:>5} {ldb:>5} {ldc:>5}"


class CaseResult(NamedTuple):
    """What :func:`run_case` found: the kernel sgemm chose for nonzero alpha (None if explain
    named none), the worst error over the tolerance, and one sentence per failure."""

    kernel: str | None
    worst: float
    failures: list[str]


class Mode(NamedTuple):
    """Where the sweep runs: ``how`` is "gpu", "simulator" (already on) or "rerun" (no GPU:
    start a copy of the command under the simulator); ``sentence`` says so."""

    how: str
    sentence: str


def mode() -> Mode:
    """Decide where the self-test runs, without importing Numba."""
    from sgblas.runtime import driver
    from sgblas.runtime.device import BACKEND

    if BACKEND.simulated:
        return Mode("simulator", "Numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM), so the reduced sweep runs "
                                 "under it")
    # The driver probe of sgblas.runtime.driver: libcuda, cuInit, cuDeviceGetCount, no Numba.
    count = driver.device_count()
    if count:
        return Mode("gpu", f"{count} CUDA GPU{'s' if count > 1 else ''} found, so the full sweep runs on device 0 "
                           f"(--quick runs the reduced sweep)")
    return Mode("rerun", "no CUDA GPU found, so the reduced sweep runs under Numba's CUDA simulator, which runs "
                         "the same kernel code on the CPU")


def full_sweep() -> list[SweepCase]:
    """The GPU sweep: every shape x pair x padding x alpha x beta."""
    every = tuple(itertools.product(ALPHAS, BETAS))
    return [SweepCase(m, n, k, ta, tb, pad, 1, every)
            for (m, n, k), (ta, tb), pad in itertools.product(GPU_SHAPES, PAIRS, GPU_PADS)]


def reduced_sweep() -> list[SweepCase]:
    """The simulator sweep: every pair at :data:`REDUCED_SHAPES`.

    The six nonzero-alpha x beta products are dealt out over each pair's shapes, rotated from
    pair to pair, so every pair runs all six and every shape meets several. The shapes with
    ordinary leading dimensions also run alpha = 0 with each beta (C = beta * C, a cheap kernel).
    """
    nonzero = [(alpha, beta) for alpha, beta in itertools.product(ALPHAS, BETAS) if alpha != 0.0]
    zero_alpha = tuple((0.0, beta) for beta in BETAS)
    cases = []
    for p, (ta, tb) in enumerate(PAIRS):
        dealt = [nonzero[(2 * p + i) % len(nonzero)] for i in range(len(nonzero))]
        for m, n, k, pad, multiple, count in REDUCED_SHAPES:
            chosen, dealt = tuple(dealt[:count]), dealt[count:]
            cases.append(SweepCase(m, n, k, ta, tb, pad, multiple, chosen + (zero_alpha if multiple == 1 else ())))
    return cases


def run_case(handle: Any, case: SweepCase, seed: int) -> CaseResult:
    """Run ``case`` through :func:`sgblas.sgemm` on ``handle`` with operands drawn from ``seed``."""
    import sgblas

    g = GemmCase(seed, case.ta, case.tb, case.m, case.n, case.k, case.pad, ld_multiple=case.ld_multiple)
    kernel = sgblas.explain(handle, g.ta, g.tb, g.m, g.n, g.k, g.dA, g.lda, g.dB, g.ldb, g.dC, g.ldc).kernel
    worst, failures = 0.0, []
    for alpha, beta in case.alpha_betas:
        before = g.reset_c(nan=(beta == 0.0))  # beta == 0 must never read C
        status = sgblas.sgemm(handle, *g.args(alpha, beta))
        if status != sgblas.Status.SUCCESS:
            failures.append(f"seed={seed} alpha={alpha} beta={beta}: status {status.name}: "
                            f"{sgblas.last_error_message()}")
            continue
        ratio, error = judge_gemm(g.dC.copy_to_host(), g.reference(alpha, beta, before))
        worst = max(worst, ratio)
        if error is not None:
            failures.append(f"seed={seed} alpha={alpha} beta={beta}: {error}")
    return CaseResult(kernel, worst, failures)


def simulator_command(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run this self-test again under the simulator."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    # The copy must import this very sgblas, wherever the caller found it.
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return [sys.executable, "-m", "sgblas.selftest", *argv, _CHILD_FLAG], env


def _parser(here: Mode) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sgblas.selftest",
        description="A correctness sweep of sgblas.sgemm against a float64 reference: the full sweep on a "
                    "CUDA GPU, the reduced sweep under Numba's CUDA simulator on a machine without one.",
        epilog=f"On this machine: {here.sentence}.")
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed of the first case (default: from the clock; printed either way)")
    parser.add_argument("--quick", action="store_true", help="the reduced sweep, also on a GPU")
    parser.add_argument("--list", action="store_true", help="print the cases that would run, and exit")
    parser.add_argument(_CHILD_FLAG, dest="simulator_child", action="store_true", help=argparse.SUPPRESS)
    return parser


_HEAD = f"{'m':>5} {'n':>5} {'k':>5} pair {'lda':>5} {'ldb':>5} {'ldc':>5}"


def _print_cases(cases: list[SweepCase]) -> None:
    print(f"{_HEAD}  alpha/beta")
    for c in cases:
        print(f"{c.row()}  " + " ".join(f"{a:g}/{b:g}" for a, b in c.alpha_betas))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the self-test with command-line arguments ``argv``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    here = mode()
    args = _parser(here).parse_args(argv)
    is_child = args.simulator_child
    quick = args.quick or here.how != "gpu"
    cases = reduced_sweep() if quick else full_sweep()
    if args.list:
        _print_cases(cases)
        return 0
    if is_child and here.how != "simulator":
        print("sgblas selftest: NUMBA_ENABLE_CUDASIM=1 was set for this process, yet the CUDA simulator is off")
        return 1
    if not is_child:
        print(f"sgblas selftest: {here.sentence}.", flush=True)
    if here.how == "rerun":
        command, env = simulator_command(argv)
        return subprocess.call(command, env=env)
    return _sweep(cases, args.seed, "full" if not quick else "reduced")


def _sweep(cases: list[SweepCase], seed: int | None, which: str) -> int:
    import sgblas
    from sgblas.runtime import driver
    from sgblas.runtime.device import BACKEND

    seed = seed if seed is not None else int(time.time()) % 2**31
    try:
        handle = sgblas.Handle(device=0)
    except sgblas.SgblasError as exc:
        print(f"sgblas selftest: no handle could be created on device 0 ({exc.status.name}): {exc}")
        return 1
    where = "Numba's CUDA simulator" if BACKEND.simulated else (
        f"{driver.device_name(0)} (device 0, cc {handle.cc[0]}.{handle.cc[1]})")
    print(f"sgblas {sgblas.__version__} selftest, {which} sweep on {where}, seed {seed}")
    from sgblas.kernels.spec import REGISTRY

    width = max(len(spec.name) for spec in REGISTRY)
    print(f"{_HEAD}  {'kernel':<{width}} worst/tol  result", flush=True)
    failed = products = 0
    t0 = time.perf_counter()
    with handle:
        for index, case in enumerate(cases):
            try:
                result = run_case(handle, case, seed + index)
            except Exception as exc:  # one broken case must not hide the others' results
                result = CaseResult(None, float("inf"), [f"seed={seed + index}: {type(exc).__name__}: {exc}"])
            verdict = "ok" if not result.failures else "FAIL"
            print(f"{case.row()}  {result.kernel or '-':<{width}} {result.worst:9.3f}  {verdict}", flush=True)
            for line in result.failures:
                print(f"      {line}", flush=True)
            failed += bool(result.failures)
            products += len(case.alpha_betas)
    print(f"{len(cases) - failed} passed, {failed} failed ({len(cases)} cases, {products} products, "
          f"{time.perf_counter() - t0:.1f} s, seed {seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
