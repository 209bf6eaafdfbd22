"""The keys of the kernel cache's entries: what makes a variant's PTX, and its cubin.

A variant's PTX key (:func:`variant_key`) is a digest of its generated kernel text and of the
code of the modules it is or calls (both with comments and docstrings dropped: the text line by
line, a module by its syntax tree), its ABI, launch bounds and compute capability, the
compiler's package versions and the passes its front end leaves out
(:data:`sgblas.runtime.frontend.SKIPPED_PASSES`); the cubin key adds the linker's
(:func:`cubin_key`). Computing them imports no compiler: a handle keys every variant before it
looks in the cache.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, NamedTuple

from sgblas.runtime.frontend import SKIPPED_PASSES

__all__ = ["ModuleCode", "variant_key", "cubin_key", "key_and_size", "distribution_version"]

_KEY_FORMAT = 1


@functools.cache
def distribution_version(name: str) -> str:
    """The installed version of the distribution ``name``, "absent" when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


class ModuleCode(NamedTuple):
    """A piece of a variant's code that is a module's file (or some functions of it): it enters
    the key as its syntax tree, so comments, docstrings and layout do not."""

    path: str
    functions: tuple[str, ...] = ()


_QUOTES = ("'", '"')


def _text_code(text: str) -> str:
    """Generated kernel text without its comments and blank lines (a line that holds a quote is
    kept whole: its ``#`` may be inside a string)."""
    out = []
    for line in text.splitlines():
        if "#" in line and not any(q in line for q in _QUOTES):
            line = line[:line.index("#")]
        line = line.rstrip()
        if line:
            out.append(line)
    return "\n".join(out)


def _strip_docstrings(tree: Any) -> None:
    import ast

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


@functools.lru_cache(maxsize=None)
def _module_code(path: str, functions: tuple[str, ...], stamp: tuple[int, int]) -> str:
    import ast

    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    _strip_docstrings(tree)
    nodes = [node for node in tree.body
             if not functions or (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in functions)]
    if functions and len(nodes) != len(functions):
        raise LookupError(f"{path} does not define all of {functions}")
    return "\n".join(ast.dump(node) for node in nodes)


def _code(piece: Any) -> str:
    if isinstance(piece, ModuleCode):
        st = os.stat(piece.path)
        return _module_code(piece.path, tuple(piece.functions), (st.st_mtime_ns, st.st_size))
    return _text_code(piece)


#: The distributions whose versions enter a PTX key (Numba's front end and NVVM) and a cubin
#: key (the linker); an absent one counts as "absent".
_COMPILER_DISTRIBUTIONS = ("numba", "numba-cuda", "llvmlite", "nvidia-nvvm", "nvidia-cuda-nvcc",
                           "nvidia-cuda-nvcc-cu12")
_LINKER_DISTRIBUTIONS = ("cuda-core", "nvidia-nvjitlink", "nvidia-nvjitlink-cu12")


def _versions(names: tuple[str, ...]) -> str:
    return ";".join(f"{name}={distribution_version(name)}" for name in names)


def variant_key(spec: Any, cc: tuple[int, int]) -> str:
    """The key of ``spec``'s PTX for ``cc`` (see the module docstring); ``spec`` gives its
    ``name``, ``abi``, ``launch_bounds`` and ``code(cc)``, the pieces of its code: generated
    text (str) or :class:`ModuleCode`."""
    return key_and_size(spec, tuple(cc))[0]


def key_and_size(spec: Any, cc: tuple[int, int]) -> tuple[str, int]:
    """The PTX key and the size of the variant's code in characters, which orders the compiles
    (the costliest, most text, first)."""
    import hashlib  # here, not at the package's import

    digest = hashlib.sha256(f"sgblas-variant-{_KEY_FORMAT}\0{spec.name}\0sm_{cc[0]}{cc[1]}\0"
                            f"{spec.abi.name}{tuple(spec.abi.params)}\0{spec.launch_bounds}\0"
                            f"{_versions(_COMPILER_DISTRIBUTIONS)}\0{SKIPPED_PASSES}\0".encode())
    size = 0
    for piece in spec.code(cc):
        text = _code(piece)
        size += os.stat(piece.path).st_size if isinstance(piece, ModuleCode) else len(piece)
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()[:24], size


def cubin_key(ptx_key: str) -> str:
    """The key of the cubin linked from the PTX of ``ptx_key`` by this process's linker."""
    import hashlib

    return hashlib.sha256(f"{ptx_key}\0{_versions(_LINKER_DISTRIBUTIONS)}".encode()).hexdigest()[:24]
