"""The tests' shared helpers: the device-case helpers of :mod:`sgblas.testing`, the one testing
toolkit, the environment of the fresh processes some tests start, and the PTX the static tests
read.

``Case`` is :class:`sgblas.testing.GemmCase`: random column-major operands of one sgemm call
with padded leading dimensions, on the host and the device, and its check against the float64
reference (the message names the seed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

from sgblas.runtime.device import DeviceProperties
from sgblas.testing import GemmCase as Case
from sgblas.testing import column_major, stored_shape

__all__ = ["Case", "column_major", "stored_shape", "REPO", "TESTS", "child_env", "PTX_NEEDS", "ptx_targets",
           "start_ptx", "stop_ptx", "ptx", "find_ptxas", "ptxas_report", "run_gemm", "plan_handle",
           "pool_simulator"]

#: The checkout's root, and its tests folder.
REPO: str = str(Path(__file__).resolve().parents[1])
TESTS: str = str(Path(__file__).resolve().parent)


#: Device properties of an H200 (132 SMs), for host tests of dispatch. No memory bus width, so
#: no calibration matches them: the cost model predicts with its default rates.
H200_PROPS = DeviceProperties(132, 2048, 32, 65536, 233472)
#: A 16-byte aligned device-like address, and a workspace the size of the handle's default.
ALIGNED = 0x7F0000000000
WORKSPACE = 32 * 1024 * 1024


def problem(cc=(9, 0), ta="N", tb="N", m=4096, n=4096, k=4096, lda=None, ldb=None, ldc=None,
            a=ALIGNED, b=ALIGNED + 2**32, c=ALIGNED + 2**33, mode=None):
    """A ``GemmProblem`` with tight leading dimensions unless given, at aligned addresses."""
    from sgblas.enums import MathMode
    from sgblas.kernels.problem import GemmProblem

    lda = lda if lda is not None else (m if ta == "N" else k)
    ldb = ldb if ldb is not None else (k if tb == "N" else n)
    ldc = ldc if ldc is not None else m
    return GemmProblem(cc, mode or MathMode.FP32, ta, tb, m, n, k, a, lda, b, ldb, c, ldc)


def plan_handle(**fields):
    """What :func:`sgblas.dispatch.plan.execute` and ``make_plan`` read of a handle, as a namespace:
    ``fields`` (properties, _kernels, _stream, _context, workspace_ptr, ...) and the handle's
    workspace order, fresh."""
    from types import SimpleNamespace

    from sgblas.dispatch.plan import WorkspaceOrder

    return SimpleNamespace(_ws_order=WorkspaceOrder(), **fields)


def child_env(*, drop: Iterable[str] = (), **variables: str) -> dict[str, str]:
    """The environment of a fresh Python process a test starts: this process's, less the
    variables in ``drop``, plus ``variables``, with the checkout and its ``tests`` folder (a
    test module a child imports takes its helpers from there) first on ``PYTHONPATH`` and the
    entries already there kept (where a machine's packages are installed beside the system's,
    the child needs them too)."""
    dropped = set(drop)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(variables)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, TESTS, env.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------------------------------------
# The CUDA simulator's blocks
# ---------------------------------------------------------------------------------------------
#
# numba-cuda's simulator runs a block's threads as Python threads: BlockManager.run starts a new
# thread per CUDA thread (about 0.1 ms each, 25 ms for a block of 256) and polls them in a loop
# that holds the interpreter lock, releasing a barrier only when a pass finds every live thread
# blocked in it. The replacement below keeps idle threads from block to block and lets the last
# thread to reach a barrier release it, with the same barrier, exit and exception semantics;
# a block of 256 threads costs 8 ms instead of 26-30 (17 ms instead of 48-110 with one barrier),
# and the simulator tests run about a sixth faster. It is installed only when numba-cuda's
# block loop and thread class are the ones it was written against (numba-cuda 0.30's, by the
# hashes of their source); another version keeps its own loop and the tests run slower.

_SIMULATOR_SOURCES_SHA256 = {"BlockManager.run": "f5b9106aec437684", "BlockThread": "31539332ab25b3d0"}
#: How long a failed block waits for its other threads to stop at a barrier or return before
#: its error is raised anyway (a thread that never does is left running, as numba-cuda does).
_ABORT_WAIT_S = 60.0


class _Block:
    """One block's barrier: how many of its threads are running and how many wait at the
    barrier; the last to arrive (or to exit while the others wait) releases it."""

    def __init__(self, count: int):
        import threading

        self.cond = threading.Condition()
        self.running = count
        self.waiting = 0
        self.generation = 0
        self.failed = None

    def _release(self) -> None:
        self.waiting = 0
        self.generation += 1
        self.cond.notify_all()

    def wait(self) -> None:
        with self.cond:
            generation = self.generation
            self.waiting += 1
            if self.waiting == self.running:
                self._release()
                return
            while generation == self.generation and self.failed is None:
                self.cond.wait()

    def leave(self, worker) -> None:
        with self.cond:
            self.running -= 1
            if worker.exception is not None and self.failed is None:
                self.failed = worker
            if self.running and self.waiting == self.running:
                self._release()
            self.cond.notify_all()  # the launching thread waits for the block's end


def _worker_class():
    """A ``BlockThread`` that runs one CUDA thread of a block after another: the simulator's
    kernel API reads ``threadIdx``, ``blockIdx``, ``thread_id`` and ``_manager`` of the current
    thread and calls its ``syncthreads``, so a kept thread takes those of each new job."""
    import sys
    import threading

    import numpy as np
    from numba.cuda.simulator.kernel import BlockThread

    class Worker(BlockThread):
        def __init__(self):
            threading.Thread.__init__(self, daemon=True)  # BlockThread's own needs a block
            self._go = threading.Event()
            self._job = None
            self._block = None
            self.syncthreads_event = threading.Event()
            self.syncthreads_blocked = False
            self.exception = None
            self.abort = False
            self.debug = False

        def run(self):
            while True:
                self._go.wait()
                self._go.clear()
                job = self._job
                if job is None:
                    return
                f, args, manager, block, block_idx, thread_idx, thread_id, debug = job
                self._manager, self._block, self.debug = manager, block, debug
                self.blockIdx, self.threadIdx, self.thread_id = block_idx, thread_idx, thread_id
                self.exception, self.abort = None, False
                try:
                    if debug:
                        with np.errstate(divide="raise"):
                            f(*args)
                    else:
                        f(*args)
                except Exception as e:  # BlockThread.run's message and traceback
                    where = "tid=%s ctaid=%s" % (list(self.threadIdx), list(self.blockIdx))
                    self.exception = (type(e)(where if str(e) == "" else "%s: %s" % (where, e)),
                                      sys.exc_info()[2])
                finally:
                    self._job = None
                    block.leave(self)

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            self._block.wait()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    return Worker


_pool: dict = {"idle": [], "worker": None, "lock": None}


def _pooled_block_run(self, grid_point, *args):
    """numba-cuda 0.30's ``BlockManager.run`` on kept threads with a released-by-the-last
    barrier: every thread of the block runs ``self._f(*args)``; a barrier opens when every
    thread still running has reached it; the first exception aborts the others (at their next
    barrier) and is raised."""
    import numpy as np
    from numba.cuda.simulator.kernelapi import Dim3

    points = list(np.ndindex(*self._block_dim))
    block = _Block(len(points))
    with _pool["lock"]:  # host threads may launch at once (tests/test_threads.py)
        idle = _pool["idle"]
        while len(idle) < len(points):
            worker = _pool["worker"]()
            worker.start()
            idle.append(worker)
        workers = [idle.pop() for _ in points]
    dim_x, dim_y, _ = self._block_dim
    block_idx = Dim3(*grid_point)
    for worker, (x, y, z) in zip(workers, points):
        worker._job = (self._f, args, self, block, block_idx, Dim3(x, y, z), x + dim_x * (y + dim_y * z), self._debug)
        worker._go.set()
    with block.cond:
        while block.running and block.failed is None:
            block.cond.wait()
        failed = block.failed
        if failed is not None:
            for worker in workers:
                worker.abort = True
            block.cond.notify_all()
            block.cond.wait_for(lambda: block.running == 0, timeout=_ABORT_WAIT_S)
    with _pool["lock"]:
        _pool["idle"].extend(w for w in workers if w._job is None)
    if failed is not None:
        raise failed.exception[0].with_traceback(failed.exception[1])


def _forget_pool_in_child() -> None:
    # A forked child has only the thread that forked: the parent's kept threads are not there.
    import threading

    _pool["idle"] = []
    _pool["lock"] = threading.Lock()


def pool_simulator() -> bool:
    """Install :func:`_pooled_block_run` as the simulator's block loop when numba-cuda's loop and
    thread class are the ones it reproduces; returns whether it did (conftest calls this under
    the simulator)."""
    import hashlib
    import inspect
    import textwrap
    import threading

    from numba.cuda.simulator import kernel

    try:
        sources = {"BlockManager.run": inspect.getsource(kernel.BlockManager.run),
                   "BlockThread": inspect.getsource(kernel.BlockThread)}
    except (AttributeError, OSError, TypeError):
        return False
    for name, source in sources.items():
        if hashlib.sha256(textwrap.dedent(source).encode()).hexdigest()[:16] != _SIMULATOR_SOURCES_SHA256[name]:
            return False
    _pool.update(worker=_worker_class(), lock=threading.Lock())
    os.register_at_fork(after_in_child=_forget_pool_in_child)
    kernel.BlockManager.run = _pooled_block_run
    return True


# ---------------------------------------------------------------------------------------------
# PTX for the static tests
# ---------------------------------------------------------------------------------------------
#
# The static tests read the sm_90 (and one sm_80) PTX of a few variants, which Numba compiles
# outside the simulator, 10-30 s of single-threaded front end each. The test session runs in
# one process, so the other CPUs are free: conftest starts background processes (one per
# other CPU, one on two CPUs) at the end of collection that compile, in the order below, what
# the selected tests will read, and moves those tests to the end of the run. A test then
# waits only for what is not ready yet.


def _general_targets() -> list[tuple[str, tuple[int, int]]]:
    """The general kernel's NT and TN variants: between them every copy path of its generator."""
    from sgblas.kernels.spec import GEMM_KERNELS

    return [(s.name, (9, 0)) for s in GEMM_KERNELS
            if s.name.startswith("sgemm_general_") and s.pair in (("N", "T"), ("T", "N"))]


#: One SIMT variant per copy strategy (tests/kernels/test_ptx_static.py), the main one for sm_80 too;
#: and two with the 4 x 4 thread tile (the slice kernel is one that once kept a stack).
SIMT_TARGETS = ("sgemm_simt_nn_128x128x16_2s_a16", "sgemm_simt_tn_128x128x16_2s_a8", "sgemm_simt_tt_128x64x16_2s_a4",
                "sgemm_simt_tn_32x32x16t4x4_2s_a4", "sgemm_splitk_nn_32x64x16t4x4_2s_a4")


def _simt_targets() -> list[tuple[str, tuple[int, int]]]:
    return [(name, (9, 0)) for name in SIMT_TARGETS] + [(SIMT_TARGETS[0], (8, 0))]


def _skinny_targets() -> list[tuple[str, tuple[int, int]]]:
    """Both skinny loops (dot: m small in NN; axpy: n small in NN) and the reduction."""
    from sgblas.kernels import reduce, skinny

    configs = {(c.transa, c.transb, c.small): c for c in skinny.MANIFEST if c.align == 16}
    return [(configs[("N", "N", "m")].name(), (9, 0)), (configs[("N", "N", "n")].name(), (9, 0)),
            (reduce.NAME, (9, 0))]


def _lowk_targets() -> list[tuple[str, tuple[int, int]]]:
    """The low-K generator's NT and TN rows: between them A read along m and along k, B along
    k and along n."""
    from sgblas.kernels import lowk

    return [(c.name(), (9, 0)) for c in lowk.LOWK_MANIFEST if c.pair in (("N", "T"), ("T", "N"))]


def _representative_targets() -> list[tuple[str, tuple[int, int]]]:
    """One variant of each kernel generator (variants of a generator share its builder's code):
    one that another static test reads already where the generator has one, else the one with
    the smallest tile. The background compile is the suite's longest task on a small machine,
    and the checks that read these ask nothing of a particular variant."""
    from sgblas.kernels.spec import REGISTRY

    compiled = {t for module, targets in PTX_NEEDS.items() if module != "test_public_api" for t in targets()}
    generators: dict = {}
    for spec in REGISTRY:
        generators.setdefault(getattr(spec.builder, "__code__", spec.builder), []).append(spec)
    out = []
    for specs in generators.values():
        known = [s for s in specs if (s.name, (9, 0)) in compiled]
        pick = known[0] if known else min(specs, key=lambda s: s.tile[0] * s.tile[1])
        out.append((pick.name, (9, 0)))
    return out


#: The test modules that read PTX, in the order their tests run, with what they read.
PTX_NEEDS = {"test_general": _general_targets, "test_ptx_static": _simt_targets,
             "test_skinny": _skinny_targets, "test_lowk": _lowk_targets,
             "test_public_api": _representative_targets}

_PTX_SCRIPT = r"""
import os, sys, traceback
from sgblas.kernels.spec import by_name
from sgblas.runtime.build import compile_ptx
out = sys.argv[1]
for target in sys.argv[2:]:
    name, cc = target.split(":")
    cc = tuple(int(x) for x in cc.split("."))
    path = os.path.join(out, f"{name}.sm{cc[0]}{cc[1]}")
    try:
        text = compile_ptx(by_name(name), cc)
    except Exception:
        with open(path + ".err.tmp", "w") as f:
            f.write(traceback.format_exc())
        os.replace(path + ".err.tmp", path + ".err")
        continue
    with open(path + ".ptx.tmp", "w") as f:
        f.write(text)
    os.replace(path + ".ptx.tmp", path + ".ptx")
"""

_service: dict = {}


def ptx_targets(modules: Iterable[str]) -> list[tuple[str, tuple[int, int]]]:
    """What the named test modules read, in PTX_NEEDS's order, each target once."""
    wanted = set(modules)
    out: list[tuple[str, tuple[int, int]]] = []
    for module, targets in PTX_NEEDS.items():
        if module in wanted:
            out += [t for t in targets() if t not in out]
    return out


def _compile(out_dir: str, targets: list[tuple[str, tuple[int, int]]], log: str = "stderr.txt") -> subprocess.Popen:
    env = child_env(drop=["NUMBA_ENABLE_CUDASIM"])
    args = [f"{name}:{cc[0]}.{cc[1]}" for name, cc in targets]
    with open(os.path.join(out_dir, log), "w") as f:  # a pipe could fill and block the process
        return subprocess.Popen([sys.executable, "-c", _PTX_SCRIPT, out_dir, *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=f)


def start_ptx(out_dir: str, targets: list[tuple[str, tuple[int, int]]]) -> None:
    """Compile ``targets`` into ``out_dir`` in background processes (conftest calls this):
    target i in process i mod the count, so each process takes them in the tests' order."""
    count = max(1, min(len(targets), (os.cpu_count() or 2) - 1))
    procs = [_compile(out_dir, targets[i::count], f"stderr{i}.txt") for i in range(count)]
    _service.update(dir=out_dir, procs=procs,
                    owner={t: (procs[i % count], f"stderr{i % count}.txt") for i, t in enumerate(targets)})


def stop_ptx() -> None:
    for proc in _service.get("procs", ()):
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _files(out_dir: str, name: str, cc: tuple[int, int], log: str = "stderr.txt") -> tuple[Path, Path, Path]:
    base = Path(out_dir) / f"{name}.sm{cc[0]}{cc[1]}"
    return Path(f"{base}.ptx"), Path(f"{base}.err"), Path(out_dir) / log


def assert_waits_for_the_grid_first(ptx_text: str, cc: tuple[int, int], label: str) -> None:
    """A kernel built for sm_90 or later begins with one ``griddepcontrol.wait``, before any
    global access (the plan may launch it while the kernel ahead of it is still running:
    sgblas.runtime.device.GRID_WAIT_MIN_CC); one built for an older target has none (the
    instruction does not exist there)."""
    import re

    from sgblas.runtime.device import GRID_WAIT_MIN_CC

    if tuple(cc) < GRID_WAIT_MIN_CC:
        assert "griddepcontrol" not in ptx_text, f"{label}: griddepcontrol below sm_90"
        return
    assert ptx_text.count("griddepcontrol.wait;") == 1, f"{label}: not one griddepcontrol.wait"
    first = re.search(r"\b(ld|st)\.global|\bcp\.async\.c[ag]\b|\batom\.", ptx_text)
    assert first is not None and ptx_text.index("griddepcontrol.wait;") < first.start(), \
        f"{label}: global memory is accessed before griddepcontrol.wait"


def ptx(name: str, cc: tuple[int, int], timeout: float = 1800) -> str:
    """The PTX of variant ``name`` for ``cc``: from the background compile when the session
    started one for it, else compiled now in a child process (a test run on its own)."""
    if (name, cc) not in _service.get("owner", {}):
        import tempfile

        with tempfile.TemporaryDirectory() as out_dir:
            _compile(out_dir, [(name, cc)]).wait(timeout=timeout)
            done, err, log = _files(out_dir, name, cc)
            assert done.exists(), f"compiling {name} for sm_{cc[0]}{cc[1]} failed:\n" + (
                err.read_text() if err.exists() else log.read_text()[-4000:])
            return done.read_text()
    proc, log_name = _service["owner"][(name, cc)]
    done, err, log = _files(_service["dir"], name, cc, log_name)
    deadline = time.monotonic() + timeout
    while not done.exists():
        if err.exists():
            raise AssertionError(f"compiling {name} for sm_{cc[0]}{cc[1]} failed:\n{err.read_text()}")
        if proc.poll() is not None and not done.exists():
            raise AssertionError(f"the background PTX compile stopped before {name} (exit {proc.returncode}):\n"
                                 f"{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no PTX of {name} for sm_{cc[0]}{cc[1]} after {timeout} s")
        time.sleep(0.2)
    return done.read_text()


def find_ptxas() -> str | None:
    """A ptxas new enough for NVVM's PTX: the CUDA wheel's first, then PATH's."""
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels

        for base in nvidia.__path__:
            for candidate in sorted(Path(base).glob("*/bin/ptxas")):
                return str(candidate)
    except ImportError:
        pass
    return shutil.which("ptxas")


def ptxas_report(ptx: str, path: Path) -> str:
    """ptxas's ``-v`` report of ``ptx`` for sm_90 (the cubin beside ``path``, a ``.ptx`` file
    written there); skips the test when no ptxas is installed or it cannot assemble this PTX."""
    import pytest

    ptxas = find_ptxas()
    if ptxas is None:
        pytest.skip("no ptxas installed (the nvidia-cuda-nvcc wheel provides one)")
    path.write_text(ptx)
    proc = subprocess.run([ptxas, "-arch=sm_90", "-v", str(path), "-o", str(path.with_suffix(".cubin"))],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{ptxas} cannot assemble this PTX: {proc.stderr.strip()[:300]}")
    return proc.stderr


def run_gemm(launch, m: int, n: int, k: int, alpha: float, ops, beta: float):
    """``launch`` (a kernel of ABI GEMM, configured with its grid and block) on device copies of
    ``ops`` (:func:`sgblas.testing.make_operands`); returns C's buffer."""
    import numpy as np
    from numba import cuda

    d_c = cuda.to_device(ops.C)
    launch(np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), cuda.to_device(ops.A), np.int32(ops.lda),
           cuda.to_device(ops.B), np.int32(ops.ldb), np.float32(beta), d_c, np.int32(ops.ldc))
    return d_c.copy_to_host()


# ---------------------------------------------------------------------------------------------
# Fresh processes
# ---------------------------------------------------------------------------------------------
#
# What import and first calls do can only be seen in a process that has done nothing yet: the
# test session itself imported sgblas and Numba long ago, and under a GPU made contexts.

__all__ += ["run_fresh", "PRIMARY_CONTEXTS_CODE", "HOST_LIMIT_S"]

#: What "returns at once" means for a call behind another stream's work: a launch costs tens of
#: microseconds, and waiting for that work would cost a large fraction of a second. The margin
#: absorbs a slow or loaded host.
HOST_LIMIT_S = 0.005

#: Source a child runs to read, through ``cuda.bindings``, whether each device's primary context
#: is active: ``primary_contexts()`` returns ``[{"device", "active", "flags"}, ...]``. It calls
#: ``cuInit`` itself, so run it only after what the test is about.
PRIMARY_CONTEXTS_CODE = r"""
def primary_contexts():
    from cuda.bindings import driver as _cb
    (err,) = _cb.cuInit(0)
    assert err == _cb.CUresult.CUDA_SUCCESS, err
    err, count = _cb.cuDeviceGetCount()
    assert err == _cb.CUresult.CUDA_SUCCESS, err
    states = []
    for ordinal in range(count):
        err, dev = _cb.cuDeviceGet(ordinal)
        assert err == _cb.CUresult.CUDA_SUCCESS, err
        err, flags, active = _cb.cuDevicePrimaryCtxGetState(dev)
        assert err == _cb.CUresult.CUDA_SUCCESS, err
        states.append({"device": ordinal, "active": int(active), "flags": int(flags)})
    return states
"""


def run_fresh(code: str, *, timeout: float = 600, check: bool = True,
              **variables: str) -> tuple[list[dict], subprocess.CompletedProcess]:
    """Run ``code`` (dedented) in a fresh interpreter in the checkout, with :func:`child_env`'s
    environment plus ``variables``; returns the JSON objects it printed (each on a line of its
    own starting with ``{``) and the finished process. With ``check``, a non-zero exit status
    fails the test, showing the end of the child's output."""
    import json
    import textwrap

    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=child_env(**variables), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], proc


# ---------------------------------------------------------------------------------------------
# Covering arrays
# ---------------------------------------------------------------------------------------------
#
# A simulator test over a product of factors (transpose pair x alignment x shape class x
# alpha/beta) costs the product of their sizes, and every new variant multiplies it. A fault
# that shows only for one combination of two factors is caught by any case holding that pair of
# values, so a pairwise covering array keeps that power for about the product of the two
# largest factors. The default run takes the covering array; the ``slow`` set (README) the rest
# of the product, so the full product still runs where CI runs the slow set.

__all__ += ["pairwise", "covering_params"]


def pairwise(*factors, keep=None) -> list[tuple]:
    """A covering array of strength two over ``factors`` (sequences of values): combinations,
    one value of each factor in factor order, such that every pair of values of any two factors
    is in at least one. ``keep(combination)`` excludes combinations that cannot run; pairs that
    no kept combination holds are not required. Deterministic: greedy, each step taking the
    first combination (in product order) that covers the most pairs not yet covered, so the
    same factors give the same cases on every machine and in every run."""
    import itertools

    index_combos = [c for c in itertools.product(*(range(len(f)) for f in factors))
                    if keep is None or keep(tuple(f[i] for f, i in zip(factors, c)))]
    if len(factors) < 2:
        return [tuple(f[i] for f, i in zip(factors, c)) for c in index_combos]

    def pairs(c):
        return {(a, c[a], b, c[b]) for a, b in itertools.combinations(range(len(c)), 2)}

    covers = {c: pairs(c) for c in index_combos}
    uncovered = set().union(*covers.values()) if covers else set()
    chosen = []
    while uncovered:
        best = max(index_combos, key=lambda c: len(covers[c] & uncovered))
        chosen.append(best)
        uncovered -= covers[best]
    return [tuple(f[i] for f, i in zip(factors, c)) for c in sorted(chosen)]


def covering_params(*factors, keep=None, rest=None, ids=None) -> list:
    """The kept combinations of ``factors`` as ``pytest.param``s, for ``parametrize``: those
    of :func:`pairwise`'s covering array plain; of the others, those ``rest(combination)``
    accepts (default: all) marked ``slow``, the remaining ones left out. ``rest`` keeps a
    product the suite used to run partly (one shape class on every pair, say) whole between
    the default run and the slow set, without growing it. ``ids(combination)`` names a case
    (default: pytest's)."""
    import itertools

    import pytest

    core = set(pairwise(*factors, keep=keep))
    out = []
    for combo in itertools.product(*factors):
        if keep is not None and not keep(combo):
            continue
        if combo in core:
            marks = ()
        elif rest is None or rest(combo):
            marks = (pytest.mark.slow,)
        else:
            continue
        out.append(pytest.param(*combo, marks=marks, id=ids(combo) if ids else None))
    return out
