"""The pieces of code a variant's cache key covers, for the registry's rows
(:attr:`sgblas.kernels.spec.KernelSpec.sources`)."""

from __future__ import annotations

from pathlib import Path

from sgblas.runtime.keys import ModuleCode

__all__ = ["module_code", "SIMT_CALLS", "SKINNY_CALLS", "LOWK_CALLS"]


def module_code(name: str, *functions: str) -> ModuleCode:
    """The code of the kernel module ``name`` (or of some of its functions): what a variant's
    kernel is, or calls."""
    return ModuleCode(str(Path(__file__).with_name(f"{name}.py")), functions)


#: What the SIMT generator's text calls: the intrinsics, and the names the generator binds them to.
SIMT_CALLS = (module_code("memory"), module_code("sgemm_simt", "_namespace"))
#: The same for the skinny generator's text.
SKINNY_CALLS = (module_code("memory"), module_code("skinny_jit", "_namespace"))
#: The same for the low-K generator's text.
LOWK_CALLS = (module_code("memory"), module_code("lowk_jit", "_namespace"))
