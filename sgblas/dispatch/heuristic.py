"""Which legal variant should run: a ranking from the problem's shape and the device's own
properties (SM count and per-SM limits, read from the driver), never from constants tuned for
one GPU.

The rule, for the GEMM variants that :meth:`~sgblas.kernels.spec.KernelSpec.can_implement`
accepts:

1. Variants whose workspace need exceeds the handle's workspace are not chosen.
2. Generated (aligned, specialised) kernels rank before the general kernel, which is the
   backstop: it runs only what no specialised kernel may run.
3. Among the specialised ones, a variant's *fill* is its CTAs (output tiles) over the CTAs the
   GPU holds at once (SMs x CTAs per SM, the smaller of the launch bound and the device's
   thread and block limits). The largest tile whose fill reaches :data:`FILL_TARGET` wins:
   large tiles reuse each loaded element more. When no tile fills the GPU, the one with the
   highest fill wins, the one with more CTAs on a tie: more resident warps hide more latency.

``docs/design.md`` gives the measurements behind the threshold.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import KernelSpec
from sgblas.runtime.device import DeviceProperties

__all__ = ["FILL_TARGET", "Ranked", "occupancy", "fill", "rank"]

#: The share of the GPU's resident CTA slots a tile must fill with its first wave to be
#: preferred over a smaller tile.
FILL_TARGET: float = 0.75


class Ranked(NamedTuple):
    """A legal variant in rank order; ``reason`` says why it was not chosen (None for the first)."""

    spec: KernelSpec
    reason: str | None


def occupancy(spec: KernelSpec, props: DeviceProperties) -> int:
    """CTAs of ``spec`` one SM holds at once."""
    threads = spec.block[0] * spec.block[1] * spec.block[2]
    return max(1, min(spec.blocks_per_sm, props.max_threads_per_sm // threads, props.max_blocks_per_sm))


def ctas(spec: KernelSpec, p: GemmProblem) -> int:
    """Output tiles of ``spec`` for ``p`` (one CTA each)."""
    bm, bn, _ = spec.tile
    return -(-p.m // bm) * -(-p.n // bn)


def fill(spec: KernelSpec, p: GemmProblem, props: DeviceProperties) -> float:
    """CTAs of ``spec`` for ``p`` over the CTAs the GPU holds at once."""
    return ctas(spec, p) / (props.sm_count * occupancy(spec, props))


def rank(legal: Sequence[KernelSpec], p: GemmProblem, props: DeviceProperties,
         workspace_bytes: int) -> list[Ranked]:
    """``legal`` (GEMM variants that can run ``p``) in the order the heuristic prefers them,
    each with the reason it was passed over."""
    fits, short = [], []
    for spec in legal:
        need = spec.workspace(p.m, p.n, p.k)
        (fits if need <= workspace_bytes else short).append((spec, need))
    special = [s for s, _ in fits if s.align > 4]
    general = [s for s, _ in fits if s.align <= 4]
    filled = [s for s in special if fill(s, p, props) >= FILL_TARGET]
    if filled:
        # The largest tile that fills the GPU, then the others by size.
        order = sorted(filled, key=lambda s: -(s.tile[0] * s.tile[1]))
        order += sorted((s for s in special if s not in filled), key=lambda s: -fill(s, p, props))
    else:
        order = sorted(special, key=lambda s: (-fill(s, p, props), -ctas(s, p)))
    order += general
    out: list[Ranked] = []
    best = order[0] if order else None
    for spec in order:
        if spec is best:
            out.append(Ranked(spec, None))
        elif spec.align <= 4 and best is not None and best.align > 4:
            out.append(Ranked(spec, f"the general kernel is the backstop; {best.name} can run this problem"))
        else:
            out.append(Ranked(spec, _why_not(spec, best, p, props)))
    for spec, need in short:
        out.append(Ranked(spec, f"it needs {need} bytes of workspace and the handle has {workspace_bytes}"))
    return out


def _why_not(spec: KernelSpec, best: KernelSpec, p: GemmProblem, props: DeviceProperties) -> str:
    mine, theirs = fill(spec, p, props), fill(best, p, props)
    if theirs >= FILL_TARGET and mine >= FILL_TARGET:
        return (f"{best.name}'s larger {best.tile[0]}x{best.tile[1]} tile also fills the GPU "
                f"({ctas(best, p)} CTAs for {props.sm_count} SMs)")
    return (f"its {ctas(spec, p)} CTAs fill {mine:.0%} of the {props.sm_count} SMs' resident slots, "
            f"{best.name}'s {ctas(best, p)} fill {theirs:.0%}")
