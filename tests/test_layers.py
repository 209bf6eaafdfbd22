"""The package's layers: runtime below kernels below dispatch below the API, no import cycles,
and Numba imported only to build a kernel.

The registry, every kernel's constants and grid, legality and the cost model are plain Python:
``import sgblas`` on a machine with a warm cache, and every dispatch decision, run without
Numba (it costs 0.5-0.8 s to import). The checks of what imports Numba run in fresh
interpreters, since this test session has imported it long ago; each records who imported
``numba`` first, if anyone.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import child_env

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sgblas"

#: Lower number, lower layer; a module may import only from its own layer or below.
LAYERS = {"runtime": 0, "kernels": 1, "dispatch": 2}
TOP = 3  # sgblas/*.py: the API and the commands
#: The vocabulary every layer speaks (status codes, math modes, exceptions): imports nothing.
FOUNDATION = {"sgblas.enums": -1, "sgblas.errors": -1}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    if module in FOUNDATION:
        return FOUNDATION[module]
    parts = module.split(".")
    return LAYERS.get(parts[1], TOP) if len(parts) > 1 else TOP


def _imports() -> dict[str, set[str]]:
    """Every sgblas module -> the sgblas modules it imports anywhere (top level or inside a
    function: a lazy import is still a dependency)."""
    graph: dict[str, set[str]] = {}
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sgblas"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("sgblas"))
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_no_module_imports_from_a_layer_above_its_own():
    wrong = [f"{mod} (layer {_layer(mod)}) imports {dep} (layer {_layer(dep)})"
             for mod, deps in _imports().items() for dep in deps
             if _layer(dep) > _layer(mod) and dep != "sgblas"]
    assert not wrong, "\n".join(wrong)


def test_there_are_no_import_cycles():
    graph = _imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for dep in graph.get(node, ()):
            if dep == "sgblas":  # the package's __init__ is the top; modules import it only for names
                continue
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


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

_CHOOSE_SCRIPT = _TRACE_NUMBA + r"""
import json
from sgblas.dispatch.plan import choose
from sgblas.enums import MathMode
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import REGISTRY
from sgblas.runtime.device import DeviceProperties

A = 0x7F0000000000
props = DeviceProperties(132, 2048, 32, 65536, 233472)
out = {}
for label, (ta, tb, m, n, k) in {"large NN": ("N", "N", 4096, 4096, 4096), "TN": ("T", "N", 512, 512, 512)}.items():
    p = GemmProblem((9, 0), MathMode.FP32, ta, tb, m, n, k, A, m if ta == "N" else k, A + 2**32,
                    k if tb == "N" else n, A + 2**33, m)
    spec = choose(p, props, 1 << 25).spec
    out[label] = [spec.name, list(spec.grid(m, n, k))]
out["names"] = [s.name for s in REGISTRY]
out.update(numba_report())
print(json.dumps(out))
"""

#: Under the simulator (no compilation), building each kernel imports Numba, and only then.
_BUILD_SCRIPT = _TRACE_NUMBA + r"""
import json
from sgblas.kernels.spec import REGISTRY
assert "numba" not in sys.modules
builders = {}
for spec in REGISTRY:
    builders.setdefault(spec.builder.__code__, spec)  # one variant per distinct builder
out = {spec.name: spec.build().__module__ for spec in builders.values()}
out["numba"] = "numba" in sys.modules
print(json.dumps(out))
"""


def _run(script: str, *args: str, simulator: str | None) -> dict:
    env = child_env(drop=["NUMBA_ENABLE_CUDASIM"],
                    **({} if simulator is None else {"NUMBA_ENABLE_CUDASIM": simulator}))
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=str(REPO),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("simulator", [None, "1"], ids=["driver", "simulator"])
def test_choosing_a_kernel_imports_no_numba(simulator):
    out = _run(_CHOOSE_SCRIPT, simulator=simulator)
    assert not out["numba"], f"numba was imported first by:\n{out['first_import']}"
    assert out["large NN"][0].startswith("sgemm_") and "_nn_" in out["large NN"][0]
    assert out["TN"][0].startswith("sgemm_") and "_tn_" in out["TN"][0]
    assert len(out["names"]) == len(set(out["names"]))


def test_building_a_kernel_imports_numba_and_only_then():
    out = _run(_BUILD_SCRIPT, simulator="1")
    assert out.pop("numba")
    assert set(out.values()) <= {"sgblas.kernels.sgemm_simt", "sgblas.kernels.general_jit",
                                 "sgblas.kernels.scale_jit"} | {m for m in out.values() if m.startswith("sgblas.kernels.")}
