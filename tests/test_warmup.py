"""Ahead-of-time warm-up: no call compiles, and the warm-up command is idempotent."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from sgblas.runtime import cache as kernel_cache
from sgblas.warmup import EXIT_NOWHERE_TO_STORE, _nowhere_to_store, _parse_ccs, main


def test_parse_ccs():
    assert _parse_ccs("80,89, 90") == [(8, 0), (8, 9), (9, 0)]
    with pytest.raises(Exception, match="'9'"):
        _parse_ccs("9")


def test_simulator_has_nothing_to_warm(capsys):
    import sgblas.runtime.device

    if not sgblas.runtime.device.SIMULATOR:
        pytest.skip("only meaningful under the simulator")
    assert main([]) == 0
    assert "nothing to warm up" in capsys.readouterr().out


def _run(code: str, env_extra=None, timeout=900):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.gpu
def test_warmup_command_is_idempotent_and_fast_the_second_time():
    first = subprocess.run([sys.executable, "-m", "sgblas.warmup"], capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout + first.stderr
    second = subprocess.run([sys.executable, "-m", "sgblas.warmup"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "0 compiled now" in second.stdout, second.stdout
    seconds = float(second.stdout.rsplit("done in", 1)[1].split()[0])
    assert seconds < 2.0, second.stdout


@pytest.mark.gpu
def test_fresh_process_first_calls_compile_nothing():
    subprocess.run([sys.executable, "-m", "sgblas.warmup"], capture_output=True, timeout=1800, check=True)
    result = _run("""
        import numpy as np
        import sgblas
        from numba import cuda
        from numba.cuda.core import event
        from sgblas.runtime.loader import load_reports
        from sgblas.runtime.device import current_device

        passes = event.install_recorder("numba-cuda:run_pass")
        locks = event.install_recorder("numba-cuda:compiler_lock")
        with passes as p, locks as l:
            h = sgblas.Handle()   # the device's set-up: the import loads nothing
            sources = {r.source for r in load_reports(current_device())}
            for ta in "NT":
                for tb in "NT":
                    for m, n, k in ((64, 64, 64), (1000, 999, 77), (256, 256, 0)):
                        a = cuda.to_device(np.ones(max(1, m * max(k, 1)), np.float32))
                        b = cuda.to_device(np.ones(max(1, max(k, 1) * n), np.float32))
                        c = cuda.to_device(np.zeros(m * n, np.float32))
                        lda = m if ta == "N" else max(k, 1)
                        ldb = max(k, 1) if tb == "N" else n
                        assert sgblas.sgemm(h, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, m) == 0
            cuda.synchronize()
        print("SOURCES", sorted(sources))
        print("EVENTS", len(p.buffer), len(l.buffer))
    """)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SOURCES ['cache']" in result.stdout, result.stdout
    assert "EVENTS 0 0" in result.stdout, result.stdout


@pytest.mark.gpu
def test_import_and_handle_load_cached_cubins_without_numba():
    subprocess.run([sys.executable, "-m", "sgblas.warmup"], capture_output=True, timeout=1800, check=True)
    result = _run("""
        import sys, time
        t0 = time.perf_counter()
        import sgblas
        from sgblas.runtime.loader import load_reports
        from sgblas.runtime.device import current_device
        h = sgblas.Handle()
        t1 = time.perf_counter()
        print("NUMBA", "numba" in sys.modules, "NUMPY", "numpy" in sys.modules)
        print("SOURCES", sorted({r.source for r in load_reports(current_device())}))
        print("VARIANTS", len(h._kernels), "SECONDS", round(t1 - t0, 3))
        from sgblas.runtime import driver
        local = {k.name: driver.kernel_attribute(k.function, driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, h.device)
                 for k in h._kernels.values()}
        print("LOCAL", sorted(set(local.values())), local)
    """)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NUMBA False" in result.stdout, result.stdout
    assert "SOURCES ['cache']" in result.stdout, result.stdout
    from sgblas.kernels.spec import REGISTRY

    assert f"VARIANTS {len(REGISTRY)}" in result.stdout, result.stdout
    assert "LOCAL [0]" in result.stdout, result.stdout  # no variant spills or keeps a stack



# -- a kernel cache nobody can write ---------------------------------------------------------


@pytest.fixture
def nowhere(tmp_path):
    """Environment whose two cache locations lie under a regular file: not even root can
    create them, so no location of the search path is writable."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return {kernel_cache.CACHE_DIR_VARIABLE: str(blocker / "site"), "NUMBA_CACHE_DIR": str(blocker / "numba"),
            "NUMBA_ENABLE_CUDASIM": "0"}


def test_warmup_with_nowhere_to_store_fails_with_a_sentence_before_compiling(nowhere):
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "sgblas.warmup", "--cc", "80"], capture_output=True, text=True,
                            env=dict(os.environ, **nowhere), timeout=300)
    seconds = time.perf_counter() - t0
    assert result.returncode == EXIT_NOWHERE_TO_STORE, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert "kernel variants to compile and nowhere to store them" in message
    assert f"{nowhere[kernel_cache.CACHE_DIR_VARIABLE]} ($SGBLAS_CACHE_DIR): it does not exist and cannot be created" \
        in message
    assert os.path.join(nowhere["NUMBA_CACHE_DIR"], "sgblas") in message and "SGBLAS_CACHE_DIR" in message
    assert "compiled" not in result.stdout and seconds < 60, (seconds, result.stdout)  # nothing was compiled


def test_a_warmup_worker_with_nowhere_to_store_fails_with_a_sentence(nowhere):
    result = subprocess.run([sys.executable, "-m", "sgblas.warmup", "--variant", "scale_c_32x8", "--cc", "80"],
                            capture_output=True, text=True, env=dict(os.environ, **nowhere), timeout=300)
    assert result.returncode == EXIT_NOWHERE_TO_STORE, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.startswith("sgblas.warmup cannot store scale_c_32x8 for sm_80: "), result.stderr


def test_a_complete_read_only_cache_needs_no_writable_location(tmp_path, monkeypatch):
    from sgblas.kernels.spec import REGISTRY

    site = tmp_path / "site"
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(site))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    monkeypatch.setattr(kernel_cache, "_warned", set())
    from sgblas.runtime.build import cubin_key, variant_key

    for spec in REGISTRY:
        kernel_cache.write(spec.name, (8, 0), cubin_key(variant_key(spec, (8, 0))), "_Z6kernel",
                           b"\x7fELF" + spec.name.encode())
    os.chmod(site, 0o555)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "a-file" / "numba"))
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):  # as for a user who is not root
        if os.path.realpath(kwargs.get("dir") or "") == os.path.realpath(site):
            raise PermissionError(13, "Permission denied", str(kwargs["dir"]))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    assert _nowhere_to_store([(8, 0)], rebuild=False) is None  # everything is there: nothing to store
    refusal = _nowhere_to_store([(8, 0)], rebuild=True)
    assert refusal is not None and f"{site} ($SGBLAS_CACHE_DIR): writing there failed (Permission denied" in refusal
    assert _nowhere_to_store([(9, 0)], rebuild=False).startswith(
        f"sgblas.warmup has {len(REGISTRY)} kernel variants to compile")
