"""From a validated call to launches: choosing the variant, the plan memo, and ``execute``.

A :class:`Plan` is what a call of one *shape class* launches: the chosen variant, loaded for
the handle's device, and its grid. The shape class is everything legality and the heuristic
may read: transpose pair, m, n, k, whether A and B are read at all (k and alpha nonzero), and
the alignment of every pointer (mod 16) and leading dimension (mod 4). Plans are memoised per
handle (a handle fixes the device, its properties and its workspace), so a repeated shape
costs one dictionary lookup.

:func:`execute` is the only place that launches: the BLAS call, ``gemm``, the fast checks and
the documented validation all end here, with the same plan for the same shape class.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sgblas.dispatch import heuristic
from sgblas.kernels import spec as registry
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import KernelSpec
from sgblas.runtime import device as _device
from sgblas.runtime.launch import LoadedKernel, launch

__all__ = ["Plan", "Choice", "choose", "plan_for", "execute", "PLAN_CACHE_SIZE"]

#: Shape classes a handle remembers before its memo starts over.
PLAN_CACHE_SIZE = 4096


class Choice(NamedTuple):
    """The variant chosen for a problem, and for every other variant why it was not:
    ``(name, reason)`` pairs, refusals (it cannot run) before rankings (it should not)."""

    spec: KernelSpec | None
    refused: tuple[tuple[str, str], ...]
    passed_over: tuple[tuple[str, str], ...]


class Plan(NamedTuple):
    """What one shape class launches: ``kernel`` over ``grid``; ``role`` as the spec's."""

    role: str
    spec: KernelSpec
    kernel: LoadedKernel
    grid: tuple[int, int, int]


def choose(p: GemmProblem, props: _device.DeviceProperties, workspace_bytes: int) -> Choice:
    """The GEMM variant for ``p``: legality (each spec's ``can_implement``), then the heuristic."""
    legal, refused = [], []
    for spec in registry.GEMM_KERNELS:
        reason = spec.can_implement(p)
        if reason is None:
            legal.append(spec)
        else:
            refused.append((spec.name, reason))
    ranked = heuristic.rank(legal, p, props, workspace_bytes)
    chosen = ranked[0].spec if ranked and ranked[0].reason is None else None
    passed = tuple((r.spec.name, r.reason) for r in ranked if r.reason is not None)
    return Choice(chosen, tuple(refused), passed)


def plan_for(handle: Any, ta: str, tb: str, m: int, n: int, k: int, reads_ab: bool,
             a_ptr: int, lda: int, b_ptr: int, ldb: int, c_ptr: int, ldc: int) -> Plan | None:
    """The memoised plan of this shape class on ``handle`` (None when no variant accepts it)."""
    key = (ta, tb, m, n, k, reads_ab, a_ptr & 15, b_ptr & 15, c_ptr & 15, lda & 3, ldb & 3, ldc & 3)
    plans = handle._plans
    plan = plans.get(key)
    if plan is None:
        if reads_ab:
            problem = GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
            spec = choose(problem, handle.properties, handle.workspace_bytes).spec
            if spec is None:
                return None
        else:
            spec = registry.SCALE_KERNEL
        if len(plans) >= PLAN_CACHE_SIZE:
            plans.clear()
        plan = plans[key] = Plan(spec.role, spec, handle._kernels[spec.name], spec.grid(m, n, k))
    return plan


def execute(handle: Any, plan: Plan, m: int, n: int, k: int, alpha: float, a_ptr: int, a_extent: int,
            lda: int, b_ptr: int, b_extent: int, ldb: int, beta: float, c_ptr: int, c_extent: int,
            ldc: int) -> None:
    """Enqueue ``plan`` on the handle's stream, in the handle's context; raises what the
    launch raises (the API turns it into a status).

    Context policy: a kernel launched on a stream runs in the stream's context, which
    :meth:`Handle.set_stream` checked is the handle's; on a default stream it runs in the
    calling thread's current context, so the handle's is pushed for the launch when another is
    current, and popped after.
    """
    _, raw_stream, stream = handle._stream
    pushed = False
    if raw_stream <= 2 and handle._context and _device.current_context_handle() != handle._context:
        _device.push_context(handle._context)
        pushed = True
    try:
        if plan.role == "gemm":
            launch(plan.kernel, plan.grid, stream, (m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                                                   beta, c_ptr, c_extent, ldc))
        else:  # "scale": k == 0 or alpha == 0, A and B untouched
            launch(plan.kernel, plan.grid, stream, (m, n, beta, c_ptr, c_extent, ldc))
    finally:
        if pushed:
            _device.pop_context()
