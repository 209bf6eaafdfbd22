"""Strict FP32 whatever the environment says (docs/api.md, "Precision"), on a GPU.

The same products (a few shapes, every transpose pair; ``sgemm`` on Numba arrays and ``gemm`` on
Numba, CuPy and PyTorch operands, as many of those libraries as are installed) run in fresh
processes: once with every TF32 switch off, then with ``NVIDIA_TF32_OVERRIDE=1``, with
``CUPY_TF32=1``, with PyTorch's ``allow_tf32`` and ``set_float32_matmul_precision("medium")``
(and ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``), and with all of them. C must be the same bytes in
every run. Each process runs every product twice and checks that the two agree, so a difference
between runs cannot be mistaken for a switch taking effect; the products with the switches off
are checked against the float64 reference; and PyTorch's and CuPy's own matmuls show that their
switches were live (their bytes change).

Run: ``python -m pytest -m gpu tests/test_precision_gpu.py``. The static half of the promise (no
tensor-core, TF32 or flush-to-zero instruction in any kernel's PTX) is in
``tests/test_public_api.py`` and runs without a GPU.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import child_env

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
PAIRS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
#: A large square product (the 16-byte-aligned kernels), tails in every dimension (the 4-byte
#: class), and a long K with few output tiles (where split-K or skinny variants may be chosen).
SHAPES = ((1024, 1024, 1024), (1000, 999, 333), (256, 64, 4096))
ALPHA, BETA = 1.25, -0.5
#: The frameworks' own product, whose bytes show whether a switch was live.
FRAMEWORK_SHAPE = (1024, 1024, 1024)

#: name -> (environment variables, whether PyTorch's switches are turned on in the process)
MODES: dict[str, tuple[dict[str, str], bool]] = {
    "off": ({"NVIDIA_TF32_OVERRIDE": "0", "CUPY_TF32": "0"}, False),
    "nvidia_tf32_override": ({"NVIDIA_TF32_OVERRIDE": "1", "CUPY_TF32": "0"}, False),
    # NVIDIA_TF32_OVERRIDE=0 would veto the frameworks' own switches, so it is left unset where
    # a framework switch is the one under test.
    "cupy_tf32": ({"CUPY_TF32": "1"}, False),
    "torch_tf32": ({"CUPY_TF32": "0", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, True),
    "all": ({"NVIDIA_TF32_OVERRIDE": "1", "CUPY_TF32": "1", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, True),
}
_SWITCHES = ("NVIDIA_TF32_OVERRIDE", "CUPY_TF32", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NUMBA_ENABLE_CUDASIM")


def operands(m: int, n: int, k: int, ta: str, tb: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored A (m x k, or k x m for 'T'), B and C of one product as Fortran-ordered float32
    arrays, the same in every process: full-mantissa values, which TF32 would round."""
    rng = np.random.default_rng(zlib.crc32(repr((m, n, k, ta, tb)).encode()))
    a = rng.standard_normal((m, k) if ta == "N" else (k, m), dtype=np.float32)
    b = rng.standard_normal((k, n) if tb == "N" else (n, k), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)
    return np.asfortranarray(a), np.asfortranarray(b), np.asfortranarray(c)


def _libraries() -> dict[str, Any]:
    found: dict[str, Any] = {}
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        found["cupy"] = cupy
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            found["torch"] = torch
    return found


def _products(libraries: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every product's C, as host bytes, keyed ``path/mxnxk/pair``."""
    from numba import cuda

    import sgblas

    out: dict[str, np.ndarray] = {}
    with sgblas.Handle() as handle:
        for (m, n, k), (ta, tb) in ((s, p) for s in SHAPES for p in PAIRS):
            a, b, c = operands(m, n, k, ta, tb)
            key = f"{m}x{n}x{k}/{ta}{tb}"
            dA, dB, dC = cuda.to_device(a.ravel(order="F")), cuda.to_device(b.ravel(order="F")), cuda.to_device(
                c.ravel(order="F"))
            status = sgblas.sgemm(handle, ta, tb, m, n, k, ALPHA, dA, a.shape[0], dB, b.shape[0], BETA, dC, m)
            assert status == sgblas.Status.SUCCESS, sgblas.last_error_message()
            out[f"sgemm-numba/{key}"] = dC.copy_to_host()
            flags = dict(alpha=ALPHA, beta=BETA, trans_a=ta == "T", trans_b=tb == "T")
            nc = cuda.to_device(c)
            sgblas.gemm(cuda.to_device(a), cuda.to_device(b), nc, **flags)
            out[f"gemm-numba/{key}"] = nc.copy_to_host()
            if "cupy" in libraries:
                cp = libraries["cupy"]
                cc = cp.asarray(c, order="F")
                sgblas.gemm(cp.asarray(a, order="F"), cp.asarray(b, order="F"), cc, **flags)
                out[f"gemm-cupy/{key}"] = cp.asnumpy(cc)
            if "torch" in libraries:
                torch = libraries["torch"]
                # C-ordered tensors: gemm reads them as transposes, the other half of its paths
                tc = torch.from_numpy(np.ascontiguousarray(c)).cuda()
                sgblas.gemm(torch.from_numpy(np.ascontiguousarray(a)).cuda(),
                            torch.from_numpy(np.ascontiguousarray(b)).cuda(), tc, **flags)
                out[f"gemm-torch/{key}"] = tc.cpu().numpy()
    return out


def _framework_products(libraries: dict[str, Any]) -> dict[str, np.ndarray]:
    m, n, k = FRAMEWORK_SHAPE
    a, b, _ = operands(m, n, k, "N", "N")
    out = {}
    if "cupy" in libraries:
        cp = libraries["cupy"]
        out["framework/cupy.matmul"] = cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b)))
    if "torch" in libraries:
        torch = libraries["torch"]
        out["framework/torch.mm"] = torch.mm(torch.from_numpy(np.ascontiguousarray(a)).cuda(),
                                             torch.from_numpy(np.ascontiguousarray(b)).cuda()).cpu().numpy()
    return out


def worker(out_path: str, torch_tf32: bool) -> None:
    """One run, in a process of its own: set PyTorch's switches (the environment carries the
    others), then run every product twice and save the first run's bytes."""
    libraries = _libraries()
    if "torch" in libraries:
        torch = libraries["torch"]
        torch.backends.cuda.matmul.allow_tf32 = torch_tf32
        torch.backends.cudnn.allow_tf32 = torch_tf32
        torch.set_float32_matmul_precision("medium" if torch_tf32 else "highest")
    first = _products(libraries)
    second = _products(libraries)
    unstable = [key for key in first if first[key].tobytes() != second[key].tobytes()]
    result = dict(first)
    result.update(_framework_products(libraries))
    result["libraries"] = np.array(sorted(libraries))
    result["unstable"] = np.array(unstable, dtype=str)
    np.savez(out_path, **result)


_WORKER = "import sys; from tests.test_precision_gpu import worker; worker(sys.argv[1], sys.argv[2] == '1')"


def _run(mode: str, out_dir: Path) -> dict[str, np.ndarray]:
    variables, torch_tf32 = MODES[mode]
    env = child_env(drop=_SWITCHES, **variables)
    path = out_dir / f"{mode}.npz"
    proc = subprocess.run([sys.executable, "-c", _WORKER, str(path), "1" if torch_tf32 else "0"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the {mode} run failed:\n{proc.stderr[-4000:]}"
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, np.ndarray]]:
    out_dir = tmp_path_factory.mktemp("precision")
    return {mode: _run(mode, out_dir) for mode in MODES}


def test_every_run_is_reproducible(runs):
    for mode, result in runs.items():
        assert not len(result["unstable"]), f"{mode}: two runs in one process differ: {list(result['unstable'])}"


def test_products_with_the_switches_off_are_right(runs):
    from sgblas.testing import compare, reference_values

    off = runs["off"]
    for (m, n, k), (ta, tb) in ((s, p) for s in SHAPES for p in PAIRS):
        a, b, c = operands(m, n, k, ta, tb)
        value, scale = reference_values(ta, tb, m, n, k, ALPHA, a.ravel(order="F"), a.shape[0],
                                        b.ravel(order="F"), b.shape[0], BETA, c.ravel(order="F"), m)
        for key in (key for key in off if key.endswith(f"/{m}x{n}x{k}/{ta}{tb}")):
            got = off[key]
            got = got.reshape((m, n), order="F") if got.ndim == 1 else got  # sgemm's C is a flat buffer
            ok, worst, where = compare(got, value, scale, k)
            assert ok, f"{key}: error {worst:.3g} x tolerance at {where}"


@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "off"])
def test_c_is_the_same_bytes_whatever_the_switches(runs, mode):
    off, switched = runs["off"], runs[mode]
    keys = [key for key in off if "/" in key and not key.startswith("framework/")]
    assert keys and set(keys) <= set(switched)
    changed = [key for key in keys if off[key].tobytes() != switched[key].tobytes()]
    assert not changed, f"with {mode} on, these products changed: {changed}"
    print(f"{mode}: {len(keys)} products identical; libraries {list(switched['libraries'])}")


@pytest.mark.parametrize("library, mode, key", [("torch", "torch_tf32", "framework/torch.mm"),
                                                ("cupy", "cupy_tf32", "framework/cupy.matmul")])
def test_the_framework_switch_was_live(runs, library, mode, key):
    """The framework's own matmul changed under its switch, so the switch reached that process
    and sgblas's unchanged bytes mean something."""
    if library not in runs["off"]["libraries"]:
        pytest.skip(f"{library} with CUDA is not installed")
    assert runs["off"][key].tobytes() != runs[mode][key].tobytes(), (
        f"{key} gave the same bytes with {mode} on: the switch did not take effect in that process")
