"""``import sgblas`` initialises no CUDA (docs/api.md, "Set-up, the warm-up command and the cache").

Every scenario runs in a fresh interpreter, since this test session imported sgblas (and, on a
GPU, made contexts) long ago. On any machine: the import opens no driver library and imports
neither Numba nor NumPy, with the simulator on or off, and a child forked after it uses sgblas.
On a GPU (``gpu``): after the import no device has an active primary context and the process
holds no device memory, also when a context was already current; the import is fast;
``is_available()`` creates no context; a child forked after the import runs Numba, CuPy and
sgblas with right results; ``initialize()`` does the set-up the import no longer does.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import pytest

from helpers import PRIMARY_CONTEXTS_CODE, run_fresh

#: The import's budget on a GPU machine with a warm kernel cache (the cache is not read at import).
IMPORT_LIMIT_S = 0.100

#: Runs first in a child: records every ctypes library the process opens from then on.
_RECORD_LIBRARIES = r"""
import ctypes, json, sys, time
OPENED = []
class _Recorded(ctypes.CDLL):
    def __init__(self, name, *args, **kwargs):
        OPENED.append(str(name))
        super().__init__(name, *args, **kwargs)
class _RecordedPy(ctypes.PyDLL):
    def __init__(self, name, *args, **kwargs):
        OPENED.append(str(name))
        super().__init__(name, *args, **kwargs)
ctypes.CDLL, ctypes.PyDLL = _Recorded, _RecordedPy

def libcuda_mapped():
    try:
        with open("/proc/self/maps") as maps:
            return "libcuda" in maps.read()
    except OSError:
        return None
"""

_IMPORT_AND_REPORT = _RECORD_LIBRARIES + r"""
mapped_before = libcuda_mapped()
t0 = time.perf_counter()
import sgblas
seconds = time.perf_counter() - t0
from sgblas import handle
from sgblas.runtime import device, driver, loader
print(json.dumps({
    "seconds": seconds,
    "opened": [name for name in OPENED if "cuda" in name.lower()],
    "libcuda_handle": driver._libcuda is not None, "cuinit_called": driver._init_code is not None,
    "libcuda_mapped_by_import": bool(libcuda_mapped()) and not mapped_before,
    "modules": sorted(m for m in ("numba", "numpy", "cupy", "torch", "cuda", "cuda.bindings", "llvmlite")
                      if m in sys.modules),
    "device_answers": [f.cache_info().currsize for f in (device.device_count, device.compute_capability,
                                                         device.primary_context_handle, device.device_properties)],
    "loaded": sorted(loader._loaded), "resident": len(loader.resident_contexts()),
    "reserved": sorted(handle._RESERVED),
}))
"""


@pytest.mark.parametrize("simulator", ["0", "1"], ids=["driver", "simulator"])
def test_import_opens_no_driver_library_and_imports_neither_numba_nor_numpy(simulator):
    (report,), _ = run_fresh(_IMPORT_AND_REPORT, NUMBA_ENABLE_CUDASIM=simulator)
    assert report["opened"] == [] and not report["libcuda_handle"] and not report["cuinit_called"], report
    assert not report["libcuda_mapped_by_import"], report
    assert report["modules"] == [], f"import sgblas imported {report['modules']}"
    assert report["device_answers"] == [0, 0, 0, 0], report
    assert report["loaded"] == [] and report["resident"] == 0 and report["reserved"] == [], report


def test_is_available_answers_without_a_driver_and_never_raises():
    """Off the simulator, on a machine without a GPU the answer is False (no libcuda, or no
    device); with one it is the driver's, and either way nothing is loaded or allocated."""
    (report,), _ = run_fresh(_RECORD_LIBRARIES + textwrap.dedent(r"""
        import sgblas
        from sgblas import handle
        from sgblas.runtime import driver, loader
        available = sgblas.is_available()
        print(json.dumps({"available": available, "devices": driver.device_count(),
                          "loaded": sorted(loader._loaded), "resident": len(loader.resident_contexts()),
                          "reserved": sorted(handle._RESERVED)}))
    """), NUMBA_ENABLE_CUDASIM="0")
    assert report["available"] is (report["devices"] > 0), report
    assert report["loaded"] == [] and report["resident"] == 0 and report["reserved"] == [], report


_FORK = r"""
import json, os, sys, traceback
import sgblas
pid = os.fork()
if pid == 0:
    code = 1
    try:
        import numpy as np
        from numba import cuda
        from sgblas.testing import tolerance

        rng = np.random.default_rng(11)
        m, n, k = SIZES
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        allowed = tolerance(k, np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))

        def error(got):
            return float(np.max(np.abs(got.astype(np.float64) - ref) / allowed))

        # Numba's own work first, then sgemm on a handle.
        da, db = cuda.to_device(np.asfortranarray(a)), cuda.to_device(np.asfortranarray(b))
        dc = cuda.device_array((m, n), np.float32, order="F")
        with sgblas.Handle() as h:
            status = sgblas.sgemm(h, "N", "N", m, n, k, 1.0, da, m, db, k, 0.0, dc, m)
        out = {"sgemm_status": status.name, "sgemm_error": error(dc.copy_to_host())}
        try:
            import cupy as cp
        except ImportError:
            cp = None
        if cp is not None:
            out["gemm_library"] = "cupy"
            out["gemm_error"] = error(cp.asnumpy(sgblas.gemm(cp.asarray(a), cp.asarray(b))))
        else:
            out["gemm_library"] = "numba"
            out["gemm_error"] = error(sgblas.gemm(cuda.to_device(a), cuda.to_device(b)).copy_to_host())
        print(json.dumps(dict(out, who="child")), flush=True)
        code = 0 if status == sgblas.Status.SUCCESS and max(out["sgemm_error"], out["gemm_error"]) <= 1 else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
_, status = os.waitpid(pid, 0)
print(json.dumps({"who": "parent", "child_exit": os.waitstatus_to_exitcode(status)}), flush=True)
"""


def _fork_and_check(sizes: tuple[int, int, int], **variables: str) -> dict:
    records, proc = run_fresh(f"SIZES = {sizes!r}\n" + _FORK, **variables)
    parent = [r for r in records if r.get("who") == "parent"]
    child = [r for r in records if r.get("who") == "child"]
    assert parent and parent[0]["child_exit"] == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    (result,) = child
    assert result["sgemm_status"] == "SUCCESS", result
    assert result["sgemm_error"] <= 1 and result["gemm_error"] <= 1, result  # ratios to the K-scaled tolerance
    return result


def test_a_child_forked_after_import_uses_sgblas_under_the_simulator():
    """What the import leaves behind does not stop a forked child (the GPU form is below)."""
    _fork_and_check((5, 3, 4), NUMBA_ENABLE_CUDASIM="1")


# ---------------------------------------------------------------------------------------------
# On a GPU
# ---------------------------------------------------------------------------------------------

_CONTEXTS_AFTER_IMPORT = PRIMARY_CONTEXTS_CODE + textwrap.dedent(r"""
    import json, os, subprocess, time
    t0 = time.perf_counter()
    import sgblas
    seconds = time.perf_counter() - t0
    from sgblas.runtime import driver
    opened = driver._libcuda is not None
    print(json.dumps({"seconds": seconds, "sgblas_opened_libcuda": opened, "pid": os.getpid(),
                      "contexts": primary_contexts()}))
""")


def _compute_app_pids() -> set[int] | None:
    """The pids nvidia-smi lists as holding device memory, None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    return {int(line.split(",")[0]) for line in out.stdout.splitlines() if line.split(",")[0].strip().isdigit()}


@pytest.mark.gpu
def test_after_import_no_device_has_a_context_and_the_import_is_fast():
    reports = [run_fresh(_CONTEXTS_AFTER_IMPORT, NUMBA_ENABLE_CUDASIM="0")[0][0] for _ in range(3)]
    for report in reports:
        assert not report["sgblas_opened_libcuda"], report
        assert report["contexts"] and not any(c["active"] for c in report["contexts"]), report
    best = min(r["seconds"] for r in reports)
    assert best <= IMPORT_LIMIT_S, f"import sgblas took {best * 1e3:.1f} ms at best of 3 fresh processes"


_HOLDS_MEMORY = PRIMARY_CONTEXTS_CODE + textwrap.dedent(r"""
    import json, os, sys
    import sgblas
    print(json.dumps({"phase": "imported", "pid": os.getpid(), "contexts": primary_contexts()}), flush=True)
    sys.stdin.readline()                      # the test looks at nvidia-smi now
    handle = sgblas.Handle()                  # then at a process that does hold memory
    print(json.dumps({"phase": "handle", "contexts": primary_contexts()}), flush=True)
    sys.stdin.readline()
""")


@pytest.mark.gpu
def test_after_import_the_process_holds_no_device_memory():
    """nvidia-smi lists the processes that hold device memory. A process that created a handle
    must be listed, or this machine's nvidia-smi cannot see this process (a container's pid
    namespace): then only the context state (the test above) speaks."""
    import json
    import sys

    from helpers import REPO, child_env

    proc = subprocess.Popen([sys.executable, "-c", _HOLDS_MEMORY], env=child_env(NUMBA_ENABLE_CUDASIM="0"), cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def record() -> dict:
        line = proc.stdout.readline()
        if not line.startswith("{"):
            proc.kill()
            pytest.fail(f"the child printed {line!r}:\n{proc.stderr.read()[-4000:]}")
        return json.loads(line)

    try:
        imported = record()
        before = _compute_app_pids()
        proc.stdin.write("\n")
        proc.stdin.flush()
        with_handle = record()
        after = _compute_app_pids()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    pid = imported["pid"]
    assert not any(c["active"] for c in imported["contexts"]), imported
    assert any(c["active"] for c in with_handle["contexts"]), with_handle  # the control: set-up did happen
    if before is None or pid not in (after or set()):
        pytest.skip("nvidia-smi is absent or does not list this process's pid; the context state was checked")
    assert pid not in before, f"nvidia-smi lists pid {pid} as holding device memory right after import sgblas"


_IMPORT_INTO_A_CURRENT_CONTEXT = PRIMARY_CONTEXTS_CODE + textwrap.dedent(r"""
    import json
    from cuda.bindings import driver as cb
    (err,) = cb.cuInit(0)
    err, dev = cb.cuDeviceGet(0)
    err, ctx = cb.cuDevicePrimaryCtxRetain(dev)
    (err,) = cb.cuCtxSetCurrent(ctx)
    assert err == cb.CUresult.CUDA_SUCCESS, err
    err, free_before, _ = cb.cuMemGetInfo()
    import sgblas
    from sgblas import handle
    from sgblas.runtime import driver, loader
    err, free_after, _ = cb.cuMemGetInfo()
    print(json.dumps({"sgblas_opened_libcuda": driver._libcuda is not None, "loaded": sorted(loader._loaded),
                      "resident": len(loader.resident_contexts()), "reserved": sorted(handle._RESERVED),
                      "free_drop": int(free_before) - int(free_after)}))
""")


@pytest.mark.gpu
def test_import_with_a_context_already_current_does_nothing_either():
    (report,), _ = run_fresh(_IMPORT_INTO_A_CURRENT_CONTEXT, NUMBA_ENABLE_CUDASIM="0")
    assert not report["sgblas_opened_libcuda"], report
    assert report["loaded"] == [] and report["resident"] == 0 and report["reserved"] == [], report
    assert report["free_drop"] < 16 * 1024 * 1024, report  # no 32 MiB workspace, no modules


_IS_AVAILABLE = PRIMARY_CONTEXTS_CODE + textwrap.dedent(r"""
    import json
    import sgblas
    available = sgblas.is_available()
    print(json.dumps({"available": available, "contexts": primary_contexts()}))
""")


@pytest.mark.gpu
def test_is_available_creates_no_context():
    (report,), _ = run_fresh(_IS_AVAILABLE, NUMBA_ENABLE_CUDASIM="0")
    assert report["available"] is True, report
    assert not any(c["active"] for c in report["contexts"]), report


_INITIALIZE = PRIMARY_CONTEXTS_CODE + textwrap.dedent(r"""
    import json
    import sgblas
    from sgblas import handle
    from sgblas.runtime import loader
    sgblas.initialize()
    reserved = dict(handle._RESERVED)
    sgblas.initialize()   # nothing more
    first = sgblas.Handle()
    print(json.dumps({"contexts": primary_contexts(), "loaded": sorted(loader._loaded),
                      "resident": len(loader.resident_contexts()), "reserved": sorted(reserved),
                      "again": sorted(handle._RESERVED), "took": first.workspace_ptr == reserved[first.device][0]}))
""")


@pytest.mark.gpu
def test_initialize_sets_up_the_current_device_once():
    (report,), _ = run_fresh(_INITIALIZE, NUMBA_ENABLE_CUDASIM="0")
    assert report["contexts"][0]["active"], report
    assert report["loaded"] == [0] and report["resident"] == 1 and report["reserved"] == [0], report
    assert report["took"] and report["again"] == [], report  # the first default-size handle took the reserve


@pytest.mark.gpu
def test_a_child_forked_after_import_runs_numba_cupy_and_sgblas():
    result = _fork_and_check((1000, 999, 777), NUMBA_ENABLE_CUDASIM="0")
    assert result["gemm_library"] in ("cupy", "numba"), result
