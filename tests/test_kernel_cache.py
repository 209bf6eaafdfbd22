"""sgblas's cubin cache: location, entry format, integrity checks, and a real compile without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgblas.runtime import cache as kernel_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(tmp_path))
    return tmp_path


def test_location_precedence(tmp_path, monkeypatch):
    for variable in (kernel_cache.CACHE_DIR_VARIABLE, "NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernel_cache.cache_dir() == tmp_path / "home" / ".cache" / "sgblas"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_dir() == tmp_path / "xdg" / "sgblas"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert kernel_cache.cache_dir() == tmp_path / "numba" / "sgblas"
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(tmp_path / "mine"))
    assert kernel_cache.cache_dir() == tmp_path / "mine"


def test_round_trip_and_key_in_the_name(cache):
    cubin = b"\x7fELF" + bytes(range(256)) * 3 + b"\n\n"
    path = kernel_cache.write("sgemm_x", (9, 0), "_Z6kernel", cubin)
    assert path.parent == cache and kernel_cache.source_key() in path.name and "sm_90" in path.name
    entry = kernel_cache.read("sgemm_x", (9, 0))
    assert entry == kernel_cache.CacheEntry("_Z6kernel", cubin, path)
    assert kernel_cache.read("sgemm_x", (8, 0)) is None  # another compute capability misses
    assert kernel_cache.read("sgemm_y", (9, 0)) is None
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["flip a cubin byte", "truncate", "header only", "bad json", "wrong key"])
def test_damaged_entries_are_misses(cache, damage):
    cubin = b"\x7fELF" + b"x" * 100
    path = kernel_cache.write("sgemm_x", (9, 0), "_Z6kernel", cubin)
    data = path.read_bytes()
    header, _, body = data.partition(b"\n")
    if damage == "flip a cubin byte":
        data = header + b"\n" + body[:-1] + b"y"
    elif damage == "truncate":
        data = data[:-10]
    elif damage == "header only":
        data = header
    elif damage == "bad json":
        data = b"{" + data
    else:
        fields = json.loads(header)
        fields["key"] = "0" * 20
        data = json.dumps(fields).encode() + b"\n" + body
    path.write_bytes(data)
    assert kernel_cache.read("sgemm_x", (9, 0)) is None


def test_source_key_covers_every_kernel_module():
    # Every module the kernels are built from is hashed: a new kernel file is covered automatically.
    kernels = Path(kernel_cache.__file__).parent.parent / "kernels"
    assert kernel_cache._KERNELS_DIR == kernels.resolve()
    assert {p.name for p in kernels.glob("*.py")} >= {"general.py", "general_jit.py", "sgemm_simt.py",
                                                       "memory.py", "scale.py", "scale_jit.py", "signatures.py"}
    assert len(kernel_cache.source_key()) == 20


def test_a_warmup_worker_caches_a_cubin_for_an_absent_compute_capability(cache):
    # What `python -m sgblas.warmup --cc 80` runs per variant: no GPU is needed (nvJitLink links).
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", SGBLAS_NO_WARMUP="1")
    result = subprocess.run([sys.executable, "-m", "sgblas.warmup", "--variant", "scale_c_32x8", "--cc", "80"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("compiled scale_c_32x8 "), result.stdout
    entry = kernel_cache.read("scale_c_32x8", (8, 0))
    assert entry is not None and entry.cubin[:4] == b"\x7fELF"
    assert entry.entry_name.startswith("_Z") and "scale" in entry.entry_name
    # The SM a cubin targets is in its ELF e_flags (offset 48), bits 8-15 in this ELF ABI
    # (bits 0-7 in the older one).
    flags = int.from_bytes(entry.cubin[48:52], "little")
    assert 80 in ((flags >> 8) & 0xFF, flags & 0xFF), hex(flags)
