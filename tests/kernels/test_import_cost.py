"""The kernels' dispatch contracts import without Numba; Numba comes in only to build a kernel.

Every kernel module keeps its contract (``NAME``, ``TRANSPOSE_PAIRS``, ``BLOCK``,
``LAUNCH_BOUNDS``, ``grid``, ``can_implement``, ``kernel``) free of Numba, and its Numba code
in a module that ``kernel()`` imports on the first build (``general_jit``, ``scale_jit``, the
generator's namespace in ``sgemm_nn_simt``). The signatures that need ``numba.types`` live in
:mod:`sgblas.kernels.signatures`. The checks run in fresh interpreters, since this test
session has imported Numba long ago; each records who imported ``numba`` first, if anyone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgblas.dispatch.table import DISPATCH_TABLE
from sgblas.kernels import general, scale

REPO = str(Path(__file__).resolve().parents[2])

CONTRACT_MODULES = (
    "sgblas.dispatch.table",
    "sgblas.kernels.general",
    "sgblas.kernels.scale",
    "sgblas.kernels.sgemm_nn_128x128x16",
    "sgblas.kernels.sgemm_nn_128x64x16",
    "sgblas.kernels.abi",
)

#: Runs first in every child: remembers the import stack that first asked for numba.
_TRACE_NUMBA = r"""
import sys, traceback
class _NumbaTrace:
    first = None
    def find_spec(self, name, path=None, target=None):
        if (name == "numba" or name.startswith("numba.")) and _NumbaTrace.first is None:
            _NumbaTrace.first = "".join(traceback.format_stack(limit=25)[:-1])
        return None
sys.meta_path.insert(0, _NumbaTrace())
def numba_report():
    return {"numba": "numba" in sys.modules, "first_import": _NumbaTrace.first}
"""

_IMPORT_SCRIPT = _TRACE_NUMBA + r"""
import importlib, json
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(numba_report()))
"""

_SELECT_SCRIPT = _TRACE_NUMBA + r"""
import json
from sgblas.kernels.problem import GemmProblem
from sgblas.dispatch.table import DISPATCH_TABLE, select, select_cached, variant_name
from sgblas.enums import MathMode
from sgblas.kernels import scale

A = 0x7F0000000000
def problem(cc, ta, tb, m, n, k, a=A, mode=MathMode.FP32):
    return GemmProblem(cc, mode, ta, tb, m, n, k, a, m if ta == "N" else k,
                       A + 2**32, k if tb == "N" else n, A + 2**33, m)
cases = {
    "large NN sm_90": problem((9, 0), "N", "N", 4096, 4096, 4096),
    "small NN sm_90": problem((9, 0), "N", "N", 1024, 1024, 1024),
    "TN sm_90": problem((9, 0), "T", "N", 512, 512, 512),
    "NN sm_75": problem((7, 5), "N", "N", 4096, 4096, 4096),
    "misaligned NN": problem((9, 0), "N", "N", 4096, 4096, 4096, a=A + 4),
    "TF32": problem((9, 0), "N", "N", 64, 64, 64, mode=MathMode.TF32),
}
out = {}
for label, p in cases.items():
    s = select(p)
    assert select_cached(p) == s
    out[label] = None if s.module is None else variant_name(s.module, p.transa, p.transb)
    if s.module is not None:
        out[label + " grid"] = list(s.module.grid(p.m, p.n))
out["contracts"] = {m.NAME: {"pairs": [list(t) for t in m.TRANSPOSE_PAIRS], "block": list(m.BLOCK),
                             "bounds": m.LAUNCH_BOUNDS and list(m.LAUNCH_BOUNDS)}
                    for m in DISPATCH_TABLE}
out["scale grid"] = list(scale.grid(100, 100))
out.update(numba_report())
print(json.dumps(out))
"""

#: Under the simulator (no compilation), building each kernel imports Numba, and only then.
_BUILD_SCRIPT = _TRACE_NUMBA + r"""
import json
from sgblas.dispatch.table import DISPATCH_TABLE
from sgblas.kernels import scale
assert "numba" not in sys.modules
out = {}
for m in DISPATCH_TABLE:
    d = m.kernel(*m.TRANSPOSE_PAIRS[-1])
    out[m.NAME] = d.py_func.__module__
out[scale.NAME] = scale.kernel().py_func.__module__
out["numba"] = "numba" in sys.modules
print(json.dumps(out))
"""


def _run(script: str, *args: str, simulator: str | None) -> dict:
    env = dict(os.environ, SGBLAS_NO_WARMUP="1")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulator is not None:
        env["NUMBA_ENABLE_CUDASIM"] = simulator
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("simulator", [None, "0", "1"], ids=["unset", "off", "on"])
def test_contract_modules_import_without_numba(simulator):
    report = _run(_IMPORT_SCRIPT, *CONTRACT_MODULES, simulator=simulator)
    assert not report["numba"], f"numba was imported first by:\n{report['first_import']}"


@pytest.mark.parametrize("module", CONTRACT_MODULES)
def test_each_contract_module_alone_imports_without_numba(module):
    report = _run(_IMPORT_SCRIPT, module, simulator="0")
    assert not report["numba"], f"{module}: numba was imported first by:\n{report['first_import']}"


def test_select_works_without_numba():
    out = _run(_SELECT_SCRIPT, simulator="0")
    assert not out["numba"], f"numba was imported first by:\n{out['first_import']}"
    assert out["large NN sm_90"] == "sgemm_nn_128x128x16"
    assert out["small NN sm_90"] == "sgemm_nn_128x64x16"
    assert out["TN sm_90"] == "sgemm_general_128x64x16_tn"
    assert out["NN sm_75"] == "sgemm_general_128x64x16_nn"
    assert out["misaligned NN"] == "sgemm_general_128x64x16_nn"
    assert out["TF32"] is None  # no kernel computes TF32; every guard refuses it
    assert out["large NN sm_90 grid"] == [32 * 32, 1, 1]
    assert out["TN sm_90 grid"] == [4, 8, 1]
    assert out["contracts"]["sgemm_general_128x64x16"]["bounds"] == [256, 2]
    assert out["contracts"]["sgemm_nn_128x128x16"]["bounds"] == [256, 2]
    assert out["contracts"]["sgemm_nn_128x64x16"]["bounds"] == [128, 4]
    assert out["scale grid"] == list(scale.grid(100, 100))


def test_kernel_imports_numba_only_when_built():
    out = _run(_BUILD_SCRIPT, simulator="1")
    assert out.pop("numba")
    assert out == {
        "sgemm_nn_128x128x16": "sgblas.kernels.sgemm_simt",
        "sgemm_nn_128x64x16": "sgblas.kernels.sgemm_simt",
        general.NAME: "sgblas.kernels.general_jit",
        scale.NAME: "sgblas.kernels.scale_jit",
    }


@pytest.mark.parametrize("module", DISPATCH_TABLE, ids=lambda m: m.NAME)
def test_every_dispatch_module_exposes_the_contract(module):
    for attr in ("NAME", "TRANSPOSE_PAIRS", "BLOCK", "LAUNCH_BOUNDS"):
        assert hasattr(module, attr), attr
    for attr in ("grid", "can_implement", "kernel"):
        assert callable(getattr(module, attr)), attr
    bounds = module.LAUNCH_BOUNDS
    assert bounds is None or (isinstance(bounds, tuple) and len(bounds) == 2
                              and bounds[0] == module.BLOCK[0] * module.BLOCK[1] * module.BLOCK[2])
    if hasattr(module, "CONFIG"):
        assert bounds == (module.CONFIG.THREADS, module.CONFIG.min_blocks)


def test_scale_and_general_bounds():
    assert scale.LAUNCH_BOUNDS is None
    assert general.LAUNCH_BOUNDS == (general.THREADS, general.MIN_BLOCKS_PER_SM)
