"""Numba's front end for sgblas's own kernels: its pass pipeline without the passes that cannot
change them.

Numba's CUDA pipeline runs three passes whose work is absent from a generated kernel: inlining
locally defined closures (a kernel defines none), and two rounds of rewrites (semantic
constants aside) for array expressions, `print`, constant raises and getitems, none of which
a kernel's text holds. Each walks the whole function to find nothing, and on these large
straight-line kernels they were about a fifth of a variant's compile (docs/design.md,
"Building"). Leaving them out produced byte-identical PTX for every registry variant; the
passes that did change the PTX when left out (IR legalisation, SSA, dead-branch pruning) stay.

The pipeline is Numba's own with these entries filtered out, installed only while sgblas
compiles one of its variants, under Numba's global compiler lock, so a user's kernels compiled
in the same process (on any thread) never see it. Where Numba's compiler class has another
shape, nothing is filtered and the full pipeline runs.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["SKIPPED_PASSES", "sgblas_pipeline"]

#: Numba pass classes (by name) that an sgblas kernel compiles without.
SKIPPED_PASSES = ("InlineClosureLikes", "GenericRewrites", "NopythonRewrites")


@contextlib.contextmanager
def sgblas_pipeline() -> Iterator[None]:
    """Compile inside this block with :data:`SKIPPED_PASSES` left out of Numba's CUDA pipeline."""
    from numba.cuda import compiler
    from numba.cuda.core.compiler_lock import global_compiler_lock

    owner = compiler.CUDACompiler
    original = owner.__dict__.get("define_pipelines")
    if original is None:
        yield
        return

    def define_pipelines(self):  # type: ignore[no-untyped-def]
        managers = original(self)
        for manager in managers:
            kept = [entry for entry in manager.passes if entry[0].__name__ not in SKIPPED_PASSES]
            if len(kept) != len(manager.passes):
                manager.passes[:] = kept
                manager.finalize()  # the pass dependencies are recomputed for the kept list
        return managers

    with global_compiler_lock:
        owner.define_pipelines = define_pipelines
        try:
            yield
        finally:
            owner.define_pipelines = original
