"""sgblas's on-disk kernel cache: one cubin per (variant, compute capability, kernel sources).

Every variant is compiled by Numba with its explicit signature for one compute capability
and linked to a cubin, which is stored here; ``import sgblas`` then loads cubins straight
into the driver without importing Numba. An entry's file name carries the variant, the
compute capability and a key over everything that shapes the generated code: the text of
every module in :mod:`sgblas.kernels` and the installed numba, numba-cuda and llvmlite
versions. Editing a kernel, or upgrading Numba, therefore misses the cache and recompiles;
a new CUDA toolkit does not (the old cubin stays valid): ``python -m sgblas.warmup
--rebuild`` recompiles on demand.

Location, first that is set: ``$SGBLAS_CACHE_DIR``; ``$NUMBA_CACHE_DIR/sgblas``;
``$XDG_CACHE_HOME/sgblas``; ``~/.cache/sgblas``.

An entry is one file: a JSON header line (entry-point name, compute capability, the
cubin's SHA-256 and length, the key) followed by the cubin. It is written to a temporary
file and renamed into place, so concurrent writers (parallel warm-up workers, two
processes) never leave a torn entry; a header or checksum that does not match is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

__all__ = ["CACHE_DIR_VARIABLE", "CacheEntry", "cache_dir", "source_key", "entry_path", "read", "write"]

#: The environment variable that chooses sgblas's kernel cache directory.
CACHE_DIR_VARIABLE = "SGBLAS_CACHE_DIR"

_FORMAT = 1
_KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"


class CacheEntry(NamedTuple):
    """A cached cubin and the name of its kernel entry point."""

    entry_name: str
    cubin: bytes
    path: Path


def cache_dir() -> Path:
    """The directory entries are read from and written to (see the module docstring)."""
    explicit = os.environ.get(CACHE_DIR_VARIABLE)
    if explicit:
        return Path(explicit)
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        return Path(numba_dir) / "sgblas"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sgblas"


def _distribution_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def source_key() -> str:
    """A hex digest over the kernel sources and the compiler-side package versions."""
    digest = hashlib.sha256(f"sgblas-kernel-cache-{_FORMAT}\n".encode())
    for path in sorted(_KERNELS_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in ("numba", "numba-cuda", "llvmlite"):
        digest.update(f"{dist}={_distribution_version(dist)}\n".encode())
    return digest.hexdigest()[:20]


def entry_path(variant: str, cc: tuple[int, int]) -> Path:
    """Where ``variant``'s cubin for ``cc`` lives under the current key."""
    return cache_dir() / f"{variant}.sm_{cc[0]}{cc[1]}.{source_key()}.cubin"


def read(variant: str, cc: tuple[int, int]) -> CacheEntry | None:
    """The cached entry, or None when it is absent, unreadable or fails its checksum."""
    path = entry_path(variant, cc)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header_line, newline, cubin = data.partition(b"\n")
    if not newline:
        return None
    try:
        header = json.loads(header_line)
        ok = (header.get("format") == _FORMAT and header.get("variant") == variant
              and header.get("cc") == list(cc) and header.get("key") == source_key()
              and header.get("length") == len(cubin)
              and header.get("sha256") == hashlib.sha256(cubin).hexdigest())
    except (ValueError, AttributeError):
        return None
    if not ok:
        return None
    return CacheEntry(str(header["entry_name"]), cubin, path)


def write(variant: str, cc: tuple[int, int], entry_name: str, cubin: bytes) -> Path:
    """Store a cubin atomically; returns its path (raises OSError if the directory is unwritable)."""
    path = entry_path(variant, cc)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": _FORMAT, "variant": variant, "cc": list(cc), "key": source_key(),
              "entry_name": entry_name, "length": len(cubin),
              "sha256": hashlib.sha256(cubin).hexdigest()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{variant}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header, sort_keys=True).encode() + b"\n" + cubin)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
