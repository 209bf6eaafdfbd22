"""sgblas's front end (``runtime/frontend.py``): Numba's pipeline minus the passes that cannot
change a generated kernel, installed only while sgblas compiles, giving the PTX of the full
pipeline. Numba's real compiler is needed, so the checks run in one child process without the
simulator (the whole registry's PTX was compared on the GPU host: docs/design.md, "Building")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import child_env

_CHECKS = r"""
import json, re, threading
from numba import cuda
from numba.cuda import compiler
from numba.cuda.core.compiler_lock import global_compiler_lock
from numba.cuda.flags import CUDAFlags
from sgblas.kernels.spec import by_name
from sgblas.runtime.build import compile_ptx
from sgblas.runtime.frontend import sgblas_pipeline

def names():
    # A pipeline needs only its state's flags to be defined.
    probe = compiler.CUDACompiler.__new__(compiler.CUDACompiler)
    probe.state = type("State", (), {"flags": CUDAFlags(), "func_ir": None})()
    return [entry[0].__name__ for manager in probe.define_pipelines() for entry in manager.passes]

out = {"full": names()}
with sgblas_pipeline():
    out["inside"] = names()
out["after"] = names()

# A compile on another thread takes Numba's lock, so it cannot run inside sgblas's block.
seen, started = [], threading.Event()
def other():
    started.set()
    with global_compiler_lock:
        seen.append(names())
with sgblas_pipeline():
    thread = threading.Thread(target=other)
    thread.start()
    started.wait()
    thread.join(0.3)
    out["other_ran_inside"] = bool(seen)
thread.join(10)
out["other_saw"] = seen[0]

# Numba numbers each compile of a function in its mangled names: that number aside.
def text(ptx):
    return re.sub(r"B\d+v\d+B", "B_v_B", ptx)

out["same_ptx"] = {}
for name in ("scale_c_32x8", "reduce_splitk_fixed_order_cm_256x4_1s_a4"):
    spec, cc = by_name(name), (9, 0)
    full, _ = cuda.compile_ptx(spec.build(cc), spec.abi.signature().args, cc=cc,
                               launch_bounds=spec.launch_bounds)
    out["same_ptx"][name] = text(compile_ptx(spec, cc)) == text(full)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def checks() -> dict:
    done = subprocess.run([sys.executable, "-c", _CHECKS], env=child_env(drop=["NUMBA_ENABLE_CUDASIM"]),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_skipped_passes_are_left_out_inside_the_block_and_back_after_it(checks):
    from sgblas.runtime.frontend import SKIPPED_PASSES

    full = checks["full"]
    assert set(SKIPPED_PASSES) <= set(full), "Numba's pipeline no longer has these passes"
    assert checks["inside"] == [name for name in full if name not in SKIPPED_PASSES]
    assert checks["after"] == full


def test_another_thread_compiles_with_the_full_pipeline_while_sgblas_compiles(checks):
    assert not checks["other_ran_inside"], "a compile on another thread ran inside sgblas's block"
    assert checks["other_saw"] == checks["full"]


def test_a_variant_compiles_to_the_same_ptx_as_through_the_full_pipeline(checks):
    assert checks["same_ptx"] == {"scale_c_32x8": True, "reduce_splitk_fixed_order_cm_256x4_1s_a4": True}
