"""What a result was measured on: device, driver, CUDA runtime, package versions, host, commit.

Every probe is optional and lazy: a missing package or tool gives ``None`` for its field, never
an exception, so the same code records what it can on a GPU machine, under the CUDA simulator
and on a CPU-only machine.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "REPO_ROOT",
    "scrub_paths",
    "public_argv",
    "simulator_enabled",
    "package_versions",
    "device_info",
    "environment_info",
    "git_info",
]

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Distribution names whose versions every result records (the first installed of each tuple).
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "numba": ("numba",),
    "numba_cuda": ("numba-cuda",),
    "numpy": ("numpy",),
    "llvmlite": ("llvmlite",),
    "cuda_bindings": ("cuda-bindings",),
    "cuda_core": ("cuda-core",),
    # The compiler behind the kernel cache: NVVM makes the PTX, nvJitLink the cubin; the
    # kernels' speed depends on both (docs/history/tuning-ladder-4-runs-j-to-l.md, "Run J").
    "nvvm": ("nvidia-nvvm",),
    "nvjitlink": ("nvidia-nvjitlink", "nvidia-nvjitlink-cu13", "nvidia-nvjitlink-cu12"),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "torch": ("torch",),
}

#: Environment variables that change what a benchmark measures.
_RELEVANT_ENV = (
    "NVIDIA_TF32_OVERRIDE",
    "NUMBA_ENABLE_CUDASIM",
    "NUMBA_CACHE_DIR",
    "NUMBA_OPT",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUBLAS_WORKSPACE_CONFIG",
)


_PATH_VALUED_ENV = ("NUMBA_CACHE_DIR",)

_SITE_PACKAGES = re.compile(r"[^\s\"']*[/\\](?:site|dist)-packages[/\\]")


def scrub_paths(text: str) -> str:
    """``text`` (a traceback, an error message) without the folders of the measuring machine.

    The checkout's own folder and everything up to ``site-packages/`` are dropped, so committed
    results name files relative to the repository or to the installed packages only.
    """
    text = text.replace(str(REPO_ROOT) + os.sep, "")
    return _SITE_PACKAGES.sub("", text)


def public_argv(argv: list[str], path_options: tuple[str, ...] = ("--out", "--results")) -> list[str]:
    """``argv`` with the values of folder options replaced by ``<DIR>`` (they are local paths)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("<DIR>")
            hide_next = False
            continue
        name = arg.split("=", 1)[0]
        if name in path_options:
            if "=" in arg:
                out.append(f"{name}=<DIR>")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _dist_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions() -> dict[str, str | None]:
    """Versions of Python, sgblas and the CUDA-related packages (None when not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    try:
        import sgblas

        versions["sgblas"] = getattr(sgblas, "__version__", None)
    except Exception as exc:  # sgblas itself broken: record why rather than fail the record
        versions["sgblas"] = f"import failed: {type(exc).__name__}: {exc}"
    for key, names in _DISTRIBUTIONS.items():
        versions[key] = _dist_version(names)
    # A module already imported may come from a path that no distribution describes.
    for key, module in (("cupy", "cupy"), ("torch", "torch"), ("numba", "numba"), ("numpy", "numpy")):
        loaded = sys.modules.get(module)
        if loaded is not None and getattr(loaded, "__version__", None):
            versions[key] = str(loaded.__version__)
    return versions


def _driver_version_string() -> str | None:
    """The display driver version (e.g. '580.159.04') from NVML or nvidia-smi, if available."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            value = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return value.decode() if isinstance(value, bytes) else str(value)
    except Exception:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
        return out[0].strip() if out else None
    except Exception:
        return None


def _cudart_version() -> list[int] | None:
    """The CUDA runtime (cudart) version, through cuda-bindings (a numba-cuda dependency)."""
    try:
        from cuda.bindings import runtime

        err, version = runtime.cudaRuntimeGetVersion()
        if int(err) != 0:
            return None
        return _version_pair(int(version))
    except Exception:
        return None


def _version_pair(value: Any) -> list[int] | None:
    try:
        if isinstance(value, int):  # CUDA encodes 13000 as 13.0
            return [value // 1000, (value % 1000) // 10]
        return [int(v) for v in value][:2]
    except Exception:
        return None


_TOOL_VERSION = re.compile(rb"Cuda compilation tools, release [\d.]+, V([\d.]+)")


def cubin_toolchain(cubin: bytes) -> str | None:
    """The version of the compiler that assembled ``cubin``, from its ELF note (nvJitLink's
    or the driver's ptxas), or None when the note is absent."""
    found = _TOOL_VERSION.search(cubin)
    return found.group(1).decode() if found else None


def cache_toolchains(cc: tuple[int, int]) -> dict[str, int]:
    """How many of the registry's variants for ``cc`` the kernel cache holds, by the version
    of the compiler that assembled each (``"missing"`` for those it does not hold). A result
    belongs to the cubins that ran, which may have been compiled elsewhere than the measuring
    machine: the same PTX assembled by 13.0 and 13.5 ran some kernels 2-4% apart
    (docs/history/tuning-ladder-4-runs-j-to-l.md, "Run J")."""
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import cache as kernel_cache
    from sgblas.runtime.build import cubin_key, variant_key

    counts: dict[str, int] = {}
    for spec in REGISTRY:
        entry = kernel_cache.read(spec.name, cc, cubin_key(variant_key(spec, cc)))
        key = "missing" if entry is None else (cubin_toolchain(entry.cubin) or "unknown")
        counts[key] = counts.get(key, 0) + 1
    return counts


def device_info(device: int = 0) -> dict[str, Any]:
    """Name, compute capability, SMs, clock, L2, memory, driver, runtime and NVRTC of ``device``.

    Uses Numba (always present with sgblas); adds CuPy's view of the runtime and cuBLAS when
    CuPy is already imported. Under the CUDA simulator returns a record marked
    ``"simulator": True``.
    """
    info: dict[str, Any] = {"index": device, "simulator": simulator_enabled()}
    if info["simulator"]:
        info.update(name="CUDA simulator", compute_capability=[0, 0])
        return info
    try:
        from numba import cuda

        dev = cuda.gpus[device]
        with dev:
            current = cuda.get_current_device()
            info["name"] = current.name.decode() if isinstance(current.name, bytes) else str(current.name)
            info["compute_capability"] = list(current.compute_capability)
            info["uuid"] = getattr(current, "uuid", None)
            for key, attribute in (
                ("multiprocessors", "MULTIPROCESSOR_COUNT"),
                ("clock_khz", "CLOCK_RATE"),
                ("memory_clock_khz", "MEMORY_CLOCK_RATE"),
                ("memory_bus_bits", "GLOBAL_MEMORY_BUS_WIDTH"),
                ("l2_bytes", "L2_CACHE_SIZE"),
                ("pci_bus_id", "PCI_BUS_ID"),
            ):
                try:
                    info[key] = int(getattr(current, attribute))
                except Exception:
                    info[key] = None
            try:
                info["memory_bytes"] = int(cuda.current_context().get_memory_info().total)
            except Exception:
                info["memory_bytes"] = None
        info["driver_cuda_version"] = _version_pair(cuda.cudadrv.driver.driver.get_version())
        try:  # numba-cuda's "runtime" version is the NVRTC (toolkit) version it compiles with
            info["nvrtc_version"] = _version_pair(cuda.runtime.get_version())
        except Exception:
            info["nvrtc_version"] = None
    except Exception as exc:
        info.setdefault("name", "unknown")
        info.setdefault("compute_capability", None)
        info["error"] = f"{type(exc).__name__}: {exc}"
    info["driver_version"] = _driver_version_string()
    info["runtime_version"] = _cudart_version()
    if info.get("compute_capability"):
        info["kernel_cache_toolchains"] = cache_toolchains(tuple(info["compute_capability"]))
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            info["cupy_runtime_version"] = _version_pair(cupy.cuda.runtime.runtimeGetVersion())
        except Exception:
            info["cupy_runtime_version"] = None
    return info


def git_info(root: Path = REPO_ROOT) -> dict[str, Any]:
    """Commit and dirty flag of the checkout the benchmark ran from (None outside git)."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=20, check=True).stdout.strip()
        except Exception:
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _env_value(name: str) -> str | None:
    value = os.environ.get(name)
    if value is not None and name in _PATH_VALUED_ENV:
        return "(set)"  # a folder on the measuring machine: not worth publishing
    return value


def environment_info() -> dict[str, Any]:
    """Host, platform, Python executable, package versions, relevant variables, git commit."""
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "versions": package_versions(),
        "env": {name: _env_value(name) for name in _RELEVANT_ENV},
        "git": git_info(),
    }
