"""Throughput, SM clock, power and energy of ``sgblas.sgemm`` and cuBLAS strict FP32, side by side.

Usage (from the repository root; both forms work)::

    python -m perf.power                  # 4096^3, 8192^3, 16384^3, all four pairs, 4 s per run
    python -m perf.power --quick          # 4096^3 only, 1 s per run
    python perf/power.py --shape 8192x8192x8192 --pairs NN --rounds 3 --cooldown 5
    python -m perf.power --list           # print the cases and exit (no GPU needed)

At the largest sizes both libraries run into the board's power limit, so their throughput is
set by the clock the power budget allows, not by the kernels' cycle counts alone. This tool
measures that: for each case and library it runs the calls back to back for ``--seconds`` of
GPU time while a sampler thread reads the SM clock, the power draw and the clock-event
(throttle) reasons, and reports TFLOP/s, the clock held during the run, the share of the FFMA
peak at that clock, the mean power and the energy per FLOP.

What is measured, and how:

- The calls are ``perf.bench``'s (its machinery is imported, not copied): cuBLAS ``gemmEx``
  through CuPy with ``CUBLAS_COMPUTE_32F_PEDANTIC`` (``NVIDIA_TF32_OVERRIDE=0`` set before CuPy
  loads cuBLAS), sgblas through ``sgblas.sgemm`` on a handle bound to the same CuPy stream;
  fresh standard-normal column-major operands with tight leading dimensions; when a case's
  operands are below 4 x L2, several buffer sets that consecutive calls rotate among (L2-cold).
- Correctness once per case: sgblas's C against cuBLAS's on the same inputs (relative Frobenius
  error below ``--tolerance``, 1e-5), or the case is marked failed (and still timed, flagged).
- A run: after ``--warmup`` untimed calls and one more block of them, whose median time per
  call plans the run, the calls are enqueued back to back. A CUDA event is recorded after every
  call, and before enqueueing call i the host waits (polling, so the sampler thread keeps the
  interpreter) until call i - depth has finished, where depth is the number of calls that make
  ``--lead-s`` (0.1 s) of GPU work, plus one, at least 2 (raised during the run if the calls
  turn out faster than planned); so depth - 1 calls or more are always queued ahead of the GPU
  and it never waits for the host. A short sleeping kernel ahead of the start event covers the
  enqueueing of the first calls. The host stops enqueueing once the calls queued so far make
  ``--seconds`` of GPU time at the rate the finished calls ran (measured on the events). A call
  whose predecessor had already finished once the host had enqueued it (the queue ran dry) is
  counted (``drained``; a run with drains is noted, its GPU time may hold gaps).
  GPU time = the events around the whole run; TFLOP/s = 2mnk x calls / GPU time.
- Sampling: a thread reads every ``--interval`` (0.1 s) the SM clock (MHz), the power draw (W),
  the clock-event reasons bitmask and the total energy counter (mJ), through NVML by ctypes
  (``libnvidia-ml.so.1``), else ``pynvml``, else by polling ``nvidia-smi`` (``--sampler``
  chooses). The NVML device is found by the PCI bus id CUDA reports for ``--device`` (so
  ``CUDA_VISIBLE_DEVICES`` cannot point it at another board); both ids are recorded. Each sample
  carries the host time (``perf_counter``) halfway through its reads. The run window is the
  host time from just before the first call is enqueued to the moment the host saw the end
  event complete (both within a millisecond of the GPU's start and end); statistics use only
  the samples inside it, after the sampler has begun a read past the window's end.
- Energy: NVML's total energy counter moves in steps, every 100 ms on an H100 and an H200, so
  two reads at a run's ends can each be a step (about 70 J at 700 W) off. Between samples the
  thread therefore reads the counter every ``--energy-poll`` (5 ms; a read takes about 3 ms)
  and notes when its value changes; mean power = the energy between the counter's first and
  last updates inside the run window / the time between them (0.3 % from the updates' timing
  in 3 s runs), energy = mean power x GPU time, energy per FLOP = energy / (2mnk x calls) in
  pJ/FLOP, which is mean power / FLOP rate. With fewer than two updates inside the window the
  counter's values at its ends are used; without a counter (``nvidia-smi``) the power samples
  are integrated over the window (piecewise linear, held flat beyond the first and last
  sample), and the output says which. The sampled power (``power_sampled_w``) is stored but not
  the headline: on these GPUs it is a one-second average that lags a run's start by a second
  (an integral of it came out 15 % low in a 3 s run from idle).
- FFMA peak at the held clock = 2 x FP32 lanes per SM (128 on sm_86 and later, sm_90
  included; 64 on sm_70 to sm_80) x SMs x the median SM clock of the run; share = TFLOP/s /
  that peak.
- Clock-event reasons active in any sample of the window are decoded (SW power cap, HW
  slowdown, SW thermal, HW thermal, HW power brake, sync boost, idle, applications clocks
  setting, display clock setting), each with the share of samples it was active in.
- Order: per case, sgblas then cuBLAS, ``--rounds`` times (sgblas, cuBLAS, sgblas, cuBLAS...),
  so drift touches both; ``--cooldown`` seconds of idle before each run; ``--preheat`` seconds
  of untimed back-to-back sgblas calls before a case's first run. With several rounds the
  per-library figures are medians over the rounds.

Writes ``perf/results/power_<UTC date-time>_<device>.json`` (``--out DIR`` elsewhere; schema
``sgblas-power/1``, see ``perf/README.md``) and prints two Markdown tables: per library, and the
sgblas/cuBLAS ratios. Exit status: 0 if every case passed, 1 if any failed or errored, 2 on a
usage or setup error (no GPU, no CuPy, no way to read the power, TF32 override set).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import ctypes
import gc
import json
import math
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):  # run as `python perf/power.py`: make `perf` and `sgblas` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf import bench, environment, results_io  # noqa: E402  (after the path fix above)

__all__ = [
    "POWER_SCHEMA",
    "DEFAULT_SIZES",
    "CLOCK_REASONS",
    "decode_reasons",
    "Sample",
    "Tick",
    "NvmlError",
    "Nvml",
    "NvmlSource",
    "PynvmlSource",
    "SmiSource",
    "open_source",
    "Sampler",
    "RunWindow",
    "run_back_to_back",
    "integrate_power",
    "counter_power",
    "summarize_run",
    "aggregate_runs",
    "power_markdown",
    "parse_args",
    "main",
]

POWER_SCHEMA = "sgblas-power/1"
DEFAULT_SIZES: tuple[int, ...] = (4096, 8192, 16384)
QUICK_SIZES: tuple[int, ...] = (4096,)
#: Most calls kept queued ahead of the GPU (bounded by CUDA's launch queue, not by the lead).
MAX_DEPTH = 256
#: How often the host looks at the oldest queued call's event while waiting (seconds).
POLL_S = 5e-4

#: NVML clock-event (formerly "clocks throttle") reason bits, ``nvmlClocksEventReason*``.
CLOCK_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "idle"),
    (0x2, "applications clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "SW thermal"),
    (0x40, "HW thermal"),
    (0x80, "HW power brake"),
    (0x100, "display clock setting"),
)


def decode_reasons(mask: int | None) -> list[str]:
    """The names of the bits set in an NVML clock-event reasons mask (unknown bits by value)."""
    if mask is None:
        return []
    mask = int(mask)
    names = [name for bit, name in CLOCK_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in CLOCK_REASONS)
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"unknown 0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


class Sample(NamedTuple):
    """One reading: host time (perf_counter, halfway through the reads), SM clock (MHz), power
    (W), clock-event reasons mask and the total energy counter (mJ); None where unread."""

    t: float
    sm_mhz: float | None
    power_w: float | None
    reasons: int | None
    energy_mj: float | None


# --------------------------------------------------------------------------------------------
# PCI bus ids


def parse_bus_id(text: str | bytes | None) -> tuple[int, int, int, int] | None:
    """'[domain:]bus:device.function' (hex) -> (domain, bus, device, function); None if not one."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text.strip().rstrip("\x00")
    try:
        head, function = text.rsplit(".", 1)
        parts = head.split(":")
        if len(parts) == 2:
            parts = ["0", *parts]
        if len(parts) != 3:
            return None
        domain, bus, device = (int(p, 16) for p in parts)
        return domain, bus, device, int(function, 16)
    except ValueError:
        return None


def nvml_bus_id(text: str | bytes | None) -> str | None:
    """A PCI bus id in NVML's spelling, ``DDDDDDDD:BB:DD.F`` (CUDA writes a 4-digit domain)."""
    parsed = parse_bus_id(text)
    if parsed is None:
        return None
    domain, bus, device, function = parsed
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"


# --------------------------------------------------------------------------------------------
# Sources of readings: NVML by ctypes, pynvml, nvidia-smi

NVML_CLOCK_SM = 1
NVML_SUCCESS = 0
_NVML_ERRORS = {
    1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED", 10: "TIMEOUT", 12: "LIBRARY_NOT_FOUND", 13: "FUNCTION_NOT_FOUND",
    15: "GPU_IS_LOST", 999: "UNKNOWN",
}


class NvmlError(RuntimeError):
    """An NVML call returned something other than NVML_SUCCESS (or is missing)."""

    def __init__(self, function: str, code: int) -> None:
        self.function = function
        self.code = code
        super().__init__(f"{function} returned NVML_ERROR_{_NVML_ERRORS.get(code, code)} ({code})")


class _PciInfo(ctypes.Structure):
    """``nvmlPciInfo_t`` (the v3 layout: legacy 16-byte id, five ints, 32-byte id)."""

    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class Nvml:
    """The few NVML calls this tool makes, on ``lib``: ``libnvidia-ml.so.1`` opened by ctypes, or
    any object with functions of the same names that return an ``nvmlReturn_t`` and write their
    results through the ctypes pointers they are given (the tests pass a fake).

    Every output goes through ``ctypes.pointer(...)`` and every handle is a ``c_void_p``, so no
    ``argtypes`` are needed on the functions.
    """

    LIBRARY_NAMES = ("libnvidia-ml.so.1", "libnvidia-ml.so", "nvml.dll")

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._call("nvmlInit_v2")
        self._reasons_function: str | None = None

    @classmethod
    def load(cls, names: Sequence[str] = LIBRARY_NAMES) -> Nvml:
        errors = []
        for name in names:
            try:
                lib = ctypes.CDLL(name)
            except OSError as exc:
                errors.append(f"{name}: {exc}")
                continue
            return cls(lib)
        raise OSError("NVML is not loadable: " + "; ".join(errors))

    def _call(self, name: str, *args: Any) -> None:
        function = getattr(self.lib, name, None)
        if function is None:
            raise NvmlError(name, 13)
        code = int(function(*args))
        if code != NVML_SUCCESS:
            raise NvmlError(name, code)

    def handle_by_index(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.pointer(handle))
        return handle

    def handle_by_pci_bus_id(self, bus_id: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByPciBusId_v2", ctypes.c_char_p(bus_id.encode()),
                   ctypes.pointer(handle))
        return handle

    def _uint(self, name: str, handle: ctypes.c_void_p, *args: Any) -> int:
        value = ctypes.c_uint()
        self._call(name, handle, *args, ctypes.pointer(value))
        return int(value.value)

    def sm_clock_mhz(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetClockInfo", handle, ctypes.c_int(NVML_CLOCK_SM))

    def power_w(self, handle: ctypes.c_void_p) -> float:
        return self._uint("nvmlDeviceGetPowerUsage", handle) / 1000.0  # mW

    def power_limit_w(self, handle: ctypes.c_void_p) -> float:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", handle) / 1000.0  # mW

    def energy_mj(self, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_ulonglong()
        self._call("nvmlDeviceGetTotalEnergyConsumption", handle, ctypes.pointer(value))
        return int(value.value)

    def clock_reasons(self, handle: ctypes.c_void_p) -> int:
        """The clock-event reasons mask: ``nvmlDeviceGetCurrentClocksEventReasons``, or on older
        drivers ``nvmlDeviceGetCurrentClocksThrottleReasons`` (the same bits)."""
        names = ([self._reasons_function] if self._reasons_function else
                 ["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"])
        error: NvmlError | None = None
        for name in names:
            value = ctypes.c_ulonglong()
            try:
                self._call(name, handle, ctypes.pointer(value))
            except NvmlError as exc:
                if exc.code not in (3, 13):  # not supported / missing: try the older name
                    raise
                error = exc
                continue
            self._reasons_function = name
            return int(value.value)
        assert error is not None
        raise error

    @property
    def reasons_function(self) -> str | None:
        return self._reasons_function

    def pci_bus_id(self, handle: ctypes.c_void_p) -> str | None:
        info = _PciInfo()
        try:
            self._call("nvmlDeviceGetPciInfo_v3", handle, ctypes.pointer(info))
        except NvmlError:
            return None
        return info.busId.decode(errors="replace") or None

    def name(self, handle: ctypes.c_void_p) -> str | None:
        buffer = ctypes.create_string_buffer(96)
        try:
            self._call("nvmlDeviceGetName", handle, buffer, ctypes.c_uint(len(buffer)))
        except NvmlError:
            return None
        return buffer.value.decode(errors="replace") or None

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self._call("nvmlShutdown")


class Source:
    """Where the readings come from. ``read`` gives (SM MHz, W, reasons mask, energy mJ)."""

    kind = "abstract"
    has_energy = False

    def read(self) -> tuple[float | None, float | None, int | None, float | None]:
        raise NotImplementedError

    def energy_mj(self) -> float | None:
        return None

    def power_limit_w(self) -> float | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def close(self) -> None:
        pass


def _try(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:
        return None


def _select_device(by_pci: Callable[[str], Any] | None, by_index: Callable[[int], Any],
                   index: int, cuda_bus_id: str | None, bus_id_of: Callable[[Any], Any]
                   ) -> tuple[Any, dict[str, Any]]:
    """The NVML device for CUDA ordinal ``index``: by PCI bus id when CUDA gave one, else by
    index (which CUDA_VISIBLE_DEVICES may renumber); returns (handle, the record of the choice)."""
    info: dict[str, Any] = {"cuda_index": index, "cuda_pci_bus_id": cuda_bus_id}
    wanted = nvml_bus_id(cuda_bus_id)
    handle = None
    if wanted and by_pci is not None:
        try:
            handle = by_pci(wanted)
            info["selected_by"] = "pci_bus_id"
        except Exception as exc:
            info["pci_lookup_error"] = f"{type(exc).__name__}: {exc}"
    if handle is None:
        handle = by_index(index)
        info["selected_by"] = "index"
        info["index_note"] = ("NVML numbers all boards, CUDA only the visible ones: with "
                              "CUDA_VISIBLE_DEVICES set the index may name another board")
    nvml_id = _try(lambda: bus_id_of(handle))
    if isinstance(nvml_id, bytes):
        nvml_id = nvml_id.decode(errors="replace")
    info["nvml_pci_bus_id"] = nvml_id
    a, b = parse_bus_id(cuda_bus_id), parse_bus_id(nvml_id)
    info["pci_bus_ids_match"] = (a == b) if a is not None and b is not None else None
    return handle, info


class NvmlSource(Source):
    """Readings through :class:`Nvml` (ctypes)."""

    kind = "nvml-ctypes"

    def __init__(self, nvml: Nvml, index: int = 0, cuda_bus_id: str | None = None) -> None:
        self.nvml = nvml
        self.handle, self.selection = _select_device(nvml.handle_by_pci_bus_id, nvml.handle_by_index,
                                                     index, cuda_bus_id, nvml.pci_bus_id)
        try:
            nvml.energy_mj(self.handle)
            self.has_energy = True
        except NvmlError:
            self.has_energy = False
        try:
            nvml.clock_reasons(self.handle)
            self._reasons = True
        except NvmlError:
            self._reasons = False

    def read(self) -> tuple[float | None, float | None, int | None, float | None]:
        nvml, h = self.nvml, self.handle
        return (_try(lambda: nvml.sm_clock_mhz(h)), _try(lambda: nvml.power_w(h)),
                _try(lambda: nvml.clock_reasons(h)) if self._reasons else None,
                _try(lambda: nvml.energy_mj(h)) if self.has_energy else None)

    def energy_mj(self) -> float | None:
        return _try(lambda: self.nvml.energy_mj(self.handle)) if self.has_energy else None

    def power_limit_w(self) -> float | None:
        return _try(lambda: self.nvml.power_limit_w(self.handle))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "library": "libnvidia-ml.so.1 (ctypes)",
                "name": self.nvml.name(self.handle), **self.selection,
                "energy": ("nvmlDeviceGetTotalEnergyConsumption" if self.has_energy
                           else "integrated from power samples (no energy counter)"),
                "reasons_function": self.nvml.reasons_function,
                "power": "nvmlDeviceGetPowerUsage", "clock": "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"}

    def close(self) -> None:
        self.nvml.shutdown()


class PynvmlSource(Source):
    """Readings through the ``pynvml`` module (nvidia-ml-py)."""

    kind = "pynvml"

    def __init__(self, module: Any, index: int = 0, cuda_bus_id: str | None = None) -> None:
        self.nv = module
        module.nvmlInit()

        def by_pci(bus_id: str) -> Any:
            try:
                return module.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
            except TypeError:
                return module.nvmlDeviceGetHandleByPciBusId(bus_id)

        self.handle, self.selection = _select_device(
            by_pci, module.nvmlDeviceGetHandleByIndex, index, cuda_bus_id,
            lambda h: module.nvmlDeviceGetPciInfo(h).busId)
        self.has_energy = _try(lambda: module.nvmlDeviceGetTotalEnergyConsumption(self.handle)) is not None
        self._reasons = None
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            function = getattr(module, name, None)
            if function is not None and _try(lambda f=function: f(self.handle)) is not None:
                self._reasons, self._reasons_name = function, name
                break

    def read(self) -> tuple[float | None, float | None, int | None, float | None]:
        nv, h = self.nv, self.handle
        power = _try(lambda: nv.nvmlDeviceGetPowerUsage(h))
        return (_try(lambda: nv.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)),
                power / 1000.0 if power is not None else None,
                _try(lambda: self._reasons(h)) if self._reasons else None,
                self.energy_mj())

    def energy_mj(self) -> float | None:
        return _try(lambda: self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)) if self.has_energy else None

    def power_limit_w(self) -> float | None:
        value = _try(lambda: self.nv.nvmlDeviceGetEnforcedPowerLimit(self.handle))
        return value / 1000.0 if value is not None else None

    def describe(self) -> dict[str, Any]:
        name = _try(lambda: self.nv.nvmlDeviceGetName(self.handle))
        return {"kind": self.kind, "library": "pynvml", **self.selection,
                "name": name.decode() if isinstance(name, bytes) else name,
                "energy": ("nvmlDeviceGetTotalEnergyConsumption" if self.has_energy
                           else "integrated from power samples (no energy counter)"),
                "reasons_function": getattr(self, "_reasons_name", None)}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


def _smi_number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", ...


def _smi_mask(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


class SmiSource(Source):
    """Readings by polling ``nvidia-smi --query-gpu=...`` (no energy counter: the power samples
    are integrated). ``runner(argv) -> stdout`` runs the command (the tests pass a fake)."""

    kind = "nvidia-smi"
    REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")

    def __init__(self, index: int = 0, cuda_bus_id: str | None = None,
                 runner: Callable[[list[str]], str] | None = None) -> None:
        self.runner = runner or self._run
        bus_id = nvml_bus_id(cuda_bus_id)
        self.selector = bus_id or str(index)
        self.selection: dict[str, Any] = {"cuda_index": index, "cuda_pci_bus_id": cuda_bus_id,
                                          "selected_by": "pci_bus_id" if bus_id else "index"}
        self.reason_field: str | None = None
        last_error: Exception | None = None
        for reason_field in self.REASON_FIELDS:
            try:
                self._query(["clocks.sm", "power.draw", reason_field])
            except Exception as exc:
                last_error = exc
                continue
            self.reason_field = reason_field
            break
        if self.reason_field is None:
            self._query(["clocks.sm", "power.draw"])  # raises when nvidia-smi cannot answer at all
            self.selection["reasons_error"] = str(last_error)
        self.selection["nvml_pci_bus_id"] = _try(lambda: self._query(["pci.bus_id"])[0])
        a, b = parse_bus_id(cuda_bus_id), parse_bus_id(self.selection["nvml_pci_bus_id"])
        self.selection["pci_bus_ids_match"] = (a == b) if a is not None and b is not None else None

    @staticmethod
    def _run(argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            raise RuntimeError(f"nvidia-smi exited with {done.returncode}: "
                               f"{(done.stdout + done.stderr).strip()[:300]}")
        return done.stdout

    def _query(self, fields: list[str]) -> list[str]:
        out = self.runner(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                           "--format=csv,noheader,nounits", "-i", self.selector])
        line = next((x for x in out.splitlines() if x.strip()), "")
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            raise RuntimeError(f"nvidia-smi answered {line!r} to {fields}")
        return values

    def read(self) -> tuple[float | None, float | None, int | None, float | None]:
        fields = ["clocks.sm", "power.draw"] + ([self.reason_field] if self.reason_field else [])
        values = self._query(fields)
        mask = _smi_mask(values[2]) if self.reason_field else None
        return _smi_number(values[0]), _smi_number(values[1]), mask, None

    def power_limit_w(self) -> float | None:
        return _try(lambda: _smi_number(self._query(["enforced.power.limit"])[0]))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "library": "nvidia-smi --query-gpu (polled)", **self.selection,
                "energy": "integrated from power samples (nvidia-smi has no energy counter)",
                "reasons_field": self.reason_field}


def open_source(kind: str, index: int, cuda_bus_id: str | None) -> tuple[Source | None, list[str]]:
    """The first source that works, in the order NVML by ctypes, pynvml, nvidia-smi (or only
    ``kind``); (source or None, why each one tried did not)."""
    tried: list[str] = []
    order = ("nvml", "pynvml", "nvidia-smi") if kind == "auto" else (kind,)
    for name in order:
        try:
            if name == "nvml":
                nvml = Nvml.load()
                try:
                    return NvmlSource(nvml, index, cuda_bus_id), tried
                except Exception:
                    nvml.shutdown()
                    raise
            if name == "pynvml":
                import pynvml  # type: ignore[import-not-found]

                return PynvmlSource(pynvml, index, cuda_bus_id), tried
            if name == "nvidia-smi":
                if shutil.which("nvidia-smi") is None:
                    raise FileNotFoundError("nvidia-smi is not on PATH")
                return SmiSource(index, cuda_bus_id), tried
        except Exception as exc:
            tried.append(f"{name}: {environment.scrub_paths(f'{type(exc).__name__}: {exc}')}")
    return None, tried


# --------------------------------------------------------------------------------------------
# The sampler thread


class Tick(NamedTuple):
    """An update of the energy counter: it happened between ``t_lo`` and ``t_hi`` (the host times
    of the read that still saw the old value and of the one that saw ``energy_mj``); ``t`` is
    their midpoint."""

    t: float
    t_lo: float
    t_hi: float
    energy_mj: float


class Sampler:
    """Reads ``source`` every ``interval`` seconds on a daemon thread, into ``samples``; between
    those, when the source has an energy counter and ``energy_poll`` is positive, reads the
    counter every ``energy_poll`` seconds and notes each change of its value in ``ticks``.

    The counter moves in steps (every 0.1 s on an H100 and an H200, idle or busy), so two reads
    at a run's ends can each be off by a step; the first and last steps inside a run, timed to
    a poll, give its mean power far more closely.
    """

    def __init__(self, source: Source, interval: float, energy_poll: float = 0.005,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.source = source
        self.interval = interval
        self.energy_poll = energy_poll if getattr(source, "has_energy", False) else 0.0
        self.clock = clock
        self.samples: list[Sample] = []
        self.ticks: list[Tick] = []
        self.energy_reads = 0
        self.errors = 0
        self.last_error: str | None = None
        self._last_read_start = -math.inf
        self._last_energy: tuple[float, float] | None = None  # (time, value) of the last read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="perf.power sampler", daemon=True)

    def _energy_seen(self, t: float, value: float | None) -> None:
        if value is None:
            return
        self.energy_reads += 1
        last = self._last_energy
        if last is not None and value != last[1]:
            self.ticks.append(Tick((last[0] + t) / 2, last[0], t, value))
        self._last_energy = (t, value)

    def sample_once(self) -> Sample | None:
        t0 = self.clock()
        self._last_read_start = t0  # reads are sequential: every earlier one has been appended
        try:
            clock_mhz, power_w, reasons, energy = self.source.read()
        except Exception as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        t1 = self.clock()
        sample = Sample((t0 + t1) / 2, clock_mhz, power_w, reasons, energy)
        self.samples.append(sample)  # list.append is atomic: the main thread may read meanwhile
        self._energy_seen(sample.t, energy)
        return sample

    def poll_energy(self) -> None:
        t0 = self.clock()
        self._last_read_start = t0
        value = self.source.energy_mj()
        self._energy_seen((t0 + self.clock()) / 2, value)

    def _loop(self) -> None:
        due = self.clock()
        while not self._stop.is_set():
            if self.clock() >= due:
                self.sample_once()
                due += self.interval
                if due < self.clock():  # a slow read (nvidia-smi): start over rather than burst
                    due = self.clock()
            elif self.energy_poll:
                self.poll_energy()
            delay = due - self.clock()
            if self.energy_poll:
                delay = min(delay, self.energy_poll)
            self._stop.wait(max(0.0, delay))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(5.0, 3 * self.interval))

    def wait_past(self, t: float, timeout: float | None = None) -> bool:
        """Wait until a read has started after ``t``: every sample timed at or before ``t`` (a
        sample's time is after its read's start) is then in ``samples``, since the reads run one
        after another on one thread. False on timeout or a stopped thread."""
        limit = time.perf_counter() + (timeout if timeout is not None else 3 * self.interval + 2.0)
        while not self._last_read_start > t:
            if not self._thread.is_alive() or time.perf_counter() > limit:
                return False
            time.sleep(min(self.interval / 4, 0.01))
        return True

    def window(self, t0: float, t1: float) -> list[Sample]:
        return [s for s in list(self.samples) if t0 <= s.t <= t1]

    def around(self, t0: float, t1: float) -> list[Sample]:
        """The samples in [t0, t1] and the nearest one on either side (for interpolation)."""
        samples = list(self.samples)
        inside = [i for i, s in enumerate(samples) if t0 <= s.t <= t1]
        before = [i for i, s in enumerate(samples) if s.t < t0][-1:]
        after = [i for i, s in enumerate(samples) if s.t > t1][:1]
        return [samples[i] for i in before + inside + after]

    def ticks_in(self, t0: float, t1: float) -> list[Tick]:
        """The counter's updates known to lie inside [t0, t1]."""
        return [k for k in list(self.ticks) if t0 <= k.t_lo and k.t_hi <= t1]


# --------------------------------------------------------------------------------------------
# One run: calls back to back with a bounded queue


@dataclass
class RunWindow:
    """What :func:`run_back_to_back` measured."""

    calls: int
    gpu_s: float
    t_start: float
    t_end: float
    energy_start_mj: float | None
    energy_end_mj: float | None
    depth: int
    spin_s: float
    drained: int
    stopped_by: str
    host_s: float = 0.0
    waits: int = 0
    notes: list[str] = field(default_factory=list)


def plan_depth(t_call: float, lead_s: float, max_depth: int = MAX_DEPTH) -> int:
    """Calls to keep queued: enough for ``lead_s`` of GPU work plus the one running, 2 to
    ``max_depth``."""
    if not t_call > 0:
        return max_depth
    return max(2, min(max_depth, math.ceil(lead_s / t_call) + 1))


def run_back_to_back(backend: Any, launch: Callable[[int], None], *, seconds: float, t_call: float,
                     host_s_per_call: float, lead_s: float, start_index: int = 0,
                     energy: Callable[[], float | None] | None = None,
                     clock: Callable[[], float] = time.perf_counter,
                     sleep: Callable[[float], None] = time.sleep, poll_s: float = POLL_S,
                     max_depth: int = MAX_DEPTH) -> RunWindow:
    """Enqueue ``launch(start_index + i)`` back to back until the calls make about ``seconds`` of
    GPU time; events around the run give the GPU time.

    ``backend`` is a :class:`perf.bench.Backend` (``event``, ``record``, ``done``,
    ``elapsed_s``, ``spin``, ``synchronize``). An event follows every call; before call i the
    host polls until call i - depth is done, so depth - 1 calls or more stay queued. depth is
    planned from the warm-up's ``t_call`` and raised (never lowered) once the finished calls
    show a shorter time per call. The number of calls is decided as the run goes: call i is
    enqueued while (i + 0.5) x the time per call measured on the finished calls (``t_call``
    until one has finished) is below ``seconds``. The host window [t_start, t_end] runs from
    just before the first enqueue to the moment the host saw the end event complete;
    ``energy()`` is read at both ends.
    """
    depth = plan_depth(t_call, lead_s, max_depth)
    first_depth = depth
    size = max_depth + 1  # the ring outlasts any depth: call j's event is ring[j % size]
    ring = [backend.event() for _ in range(size)]
    start, end = backend.event(), backend.event()
    spin_s = min(bench.MAX_SPIN_S, 1.5 * max(host_s_per_call, 0.0) * depth + 2e-4)
    rate = t_call if t_call > 0 else seconds
    guard_s = 4 * seconds + 30.0
    drained = waits = 0
    stopped_by = "seconds"
    notes: list[str] = []

    def wait_for(event: Any) -> None:
        while not backend.done(event):
            sleep(poll_s)

    backend.synchronize()
    e0 = energy() if energy else None
    t0 = clock()
    backend.spin(spin_s)
    backend.record(start)
    calls = 0
    while True:
        if calls >= depth:
            oldest = ring[(calls - depth) % size]
            if not backend.done(oldest):
                waits += 1
                wait_for(oldest)
            rate = backend.elapsed_s(start, oldest) / (calls - depth + 1)
            depth = max(depth, plan_depth(rate, lead_s, max_depth))
        if calls >= 1 and (calls + 0.5) * rate >= seconds:
            break
        if clock() - t0 > guard_s:
            stopped_by = "host_guard"
            notes.append(f"stopped after {guard_s:.0f} s of host time")
            break
        launch(start_index + calls)
        if calls and backend.done(ring[(calls - 1) % size]):
            # Everything before this call had run by the time the host had enqueued it: the
            # queue was empty, and the GPU may have waited for the host (the launch's host work).
            drained += 1
        backend.record(ring[calls % size])
        calls += 1
    host_s = clock() - t0
    backend.record(end)
    wait_for(end)
    t1 = clock()
    e1 = energy() if energy else None
    gpu_s = backend.elapsed_s(start, end)
    if drained:
        notes.append(f"the GPU had run out of queued calls {drained} times (host-bound calls?); "
                     f"the GPU time includes those gaps")
    if depth != first_depth:
        notes.append(f"queue depth raised from {first_depth} to {depth} calls: the warm-up's "
                     f"time per call ({t_call * 1e3:.3g} ms) was above the run's ({rate * 1e3:.3g} ms)")
    return RunWindow(calls=calls, gpu_s=gpu_s, t_start=t0, t_end=t1, energy_start_mj=e0,
                     energy_end_mj=e1, depth=depth, spin_s=spin_s, drained=drained,
                     stopped_by=stopped_by, host_s=host_s, waits=waits, notes=notes)


# --------------------------------------------------------------------------------------------
# Summaries (pure arithmetic: the tests feed made-up samples)


def integrate_power(samples: Sequence[Sample], t0: float, t1: float) -> float | None:
    """Joules over [t0, t1] from the power samples: piecewise linear between samples, held at
    the first (last) sample's value before (after) it; None without any power sample."""
    points = sorted((s.t, s.power_w) for s in samples if s.power_w is not None)
    if not points or not t1 > t0:
        return None if not points else 0.0
    ts = [p[0] for p in points]
    ps = [p[1] for p in points]

    def power_at(t: float) -> float:
        i = bisect.bisect_right(ts, t)
        if i == 0:
            return ps[0]
        if i == len(ts):
            return ps[-1]
        ta, tb = ts[i - 1], ts[i]
        return ps[i - 1] + (ps[i] - ps[i - 1]) * (t - ta) / (tb - ta) if tb > ta else ps[i]

    knots = [t0, *(t for t in ts if t0 < t < t1), t1]
    return sum((b - a) * (power_at(a) + power_at(b)) / 2 for a, b in zip(knots, knots[1:]))


def _stats(values: Sequence[float]) -> dict[str, Any]:
    values = [float(v) for v in values if v is not None]
    if not values:
        return {"n": 0, "median": None, "mean": None, "min": None, "max": None}
    return {"n": len(values), "median": statistics.median(values), "mean": statistics.fmean(values),
            "min": min(values), "max": max(values)}


def peak_tflops(sms: int | None, lanes_per_sm: int | None, clock_mhz: float | None) -> float | None:
    """FFMA peak: 2 flop x FP32 lanes per SM x SMs x clock, in TFLOP/s."""
    if not sms or not lanes_per_sm or not clock_mhz:
        return None
    return 2.0 * lanes_per_sm * sms * clock_mhz * 1e6 / 1e12


def counter_power(ticks: Sequence[Tick], t_start: float, t_end: float,
                  min_span_share: float = 0.5) -> dict[str, Any] | None:
    """Mean power between the energy counter's first and last updates inside [t_start, t_end]:
    (last - first value) / (last - first time); None with fewer than two updates, or when they
    span less than ``min_span_share`` of the window. ``uncertainty`` is the relative error the
    updates' timing allows (half of each one's bracket, over the span)."""
    inside = [k for k in ticks if t_start <= k.t_lo and k.t_hi <= t_end]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    span = last.t - first.t
    if not span > 0 or span < min_span_share * (t_end - t_start):
        return None
    return {"watts": (last.energy_mj - first.energy_mj) / 1e3 / span, "span_s": span,
            "updates": len(inside),
            "uncertainty": ((first.t_hi - first.t_lo) + (last.t_hi - last.t_lo)) / 2 / span}


def summarize_run(*, flop_per_call: int, calls: int, gpu_s: float, t_start: float, t_end: float,
                  samples: Sequence[Sample], energy_start_mj: float | None, energy_end_mj: float | None,
                  sms: int | None, lanes_per_sm: int | None, power_limit_w: float | None,
                  ticks: Sequence[Tick] = ()) -> dict[str, Any]:
    """The figures of one run from its calls, GPU time, window, samples and energy readings.

    ``samples`` may reach past the window (the nearest ones are used to integrate power at the
    edges); clock, power and reason statistics use only those inside [t_start, t_end].

    Energy, by the first of these that is available: the counter's updates inside the window
    (``ticks``: mean power between the first and last, times the GPU time); the counter read at
    both ends of the window (``energy_start_mj``, ``energy_end_mj``); the power samples
    integrated over the window. Mean power is the energy over the time it covers; energy per
    FLOP is the energy over the run's FLOPs.
    """
    flop = flop_per_call * calls
    window_s = t_end - t_start
    inside = [s for s in samples if t_start <= s.t <= t_end]
    clock = _stats([s.sm_mhz for s in inside if s.sm_mhz is not None])
    power = _stats([s.power_w for s in inside if s.power_w is not None])
    tflops = flop / gpu_s / 1e12 if gpu_s > 0 else None

    direct_j = None
    if energy_start_mj is not None and energy_end_mj is not None and energy_end_mj >= energy_start_mj:
        direct_j = (energy_end_mj - energy_start_mj) / 1e3
    by_ticks = counter_power(ticks, t_start, t_end)
    energy: dict[str, Any] = {"start_mj": energy_start_mj, "end_mj": energy_end_mj,
                              "direct_j": direct_j, "counter_updates": by_ticks}
    if by_ticks is not None and gpu_s > 0:
        mean_power = by_ticks["watts"]
        energy_j = mean_power * gpu_s
        energy["method"] = "counter_updates"
        energy["source"] = (f"energy counter: mean power between its first and last updates in the "
                            f"run ({by_ticks['updates']} updates over {by_ticks['span_s']:.2f} s) "
                            f"x GPU time")
    elif direct_j is not None:
        energy_j = direct_j
        mean_power = direct_j / window_s if window_s > 0 else None
        energy["method"] = "counter_ends"
        energy["source"] = "energy counter read at both ends of the window"
    else:
        energy_j = integrate_power(samples, t_start, t_end)
        mean_power = energy_j / window_s if energy_j is not None and window_s > 0 else None
        energy["method"] = "integrated_samples" if energy_j is not None else "none"
        energy["source"] = ("integrated from power samples over the window (no energy counter)"
                            if energy_j is not None else "none")
    energy["joules"] = energy_j
    peak = peak_tflops(sms, lanes_per_sm, clock["median"])

    with_reasons = [s.reasons for s in inside if s.reasons is not None]
    mask_any = 0
    for mask in with_reasons:
        mask_any |= int(mask)
    share = {name: sum(1 for m in with_reasons if int(m) & bit) / len(with_reasons)
             for bit, name in CLOCK_REASONS if mask_any & bit} if with_reasons else {}
    return {
        "calls": calls,
        "flop": flop,
        "gpu_s": gpu_s,
        "window_s": window_s,
        "tflops": tflops,
        "sm_clock_mhz": clock,
        "power_sampled_w": power,
        "mean_power_w": mean_power,
        "energy": energy,
        "energy_j": energy_j,
        "pj_per_flop": energy_j / flop * 1e12 if energy_j is not None and flop else None,
        "peak_tflops_at_clock": peak,
        "share_of_peak": tflops / peak if tflops is not None and peak else None,
        "power_limit_w": power_limit_w,
        "clock_reasons": {"mask_any": mask_any if with_reasons else None,
                          "active": decode_reasons(mask_any) if with_reasons else [],
                          "share_of_samples": share, "samples": len(with_reasons)},
        "samples_in_window": len(inside),
    }


_AGGREGATED = ("tflops", "mean_power_w", "pj_per_flop", "energy_j", "peak_tflops_at_clock",
               "share_of_peak", "power_limit_w", "gpu_s")


def aggregate_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """One library's figures over its rounds: the median of each run's figure (the value itself
    with one round); throttle reasons: every one active in any run, with its largest share."""
    if not runs:
        return None

    def median_of(values: Sequence[Any]) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    out: dict[str, Any] = {"rounds": len(runs),
                           "calls": sum(r["calls"] for r in runs)}
    for key in _AGGREGATED:
        out[key] = median_of([r.get(key) for r in runs])
    out["sm_clock_mhz"] = median_of([r["sm_clock_mhz"]["median"] for r in runs])
    out["sm_clock_mean_mhz"] = median_of([r["sm_clock_mhz"]["mean"] for r in runs])
    out["power_sampled_w"] = median_of([r["power_sampled_w"]["mean"] for r in runs])
    share: dict[str, float] = {}
    for r in runs:
        for name, value in r["clock_reasons"]["share_of_samples"].items():
            share[name] = max(share.get(name, 0.0), value)
    out["clock_reasons"] = share
    out["energy_methods"] = sorted({r["energy"]["method"] for r in runs})
    return out


def ratios(sg: dict[str, Any] | None, cb: dict[str, Any] | None) -> dict[str, float | None] | None:
    """sgblas / cuBLAS of TFLOP/s, SM clock, mean power and energy per FLOP."""
    if not sg or not cb:
        return None

    def ratio(key: str) -> float | None:
        a, b = sg.get(key), cb.get(key)
        return a / b if a is not None and b else None

    return {"tflops": ratio("tflops"), "sm_clock": ratio("sm_clock_mhz"),
            "mean_power": ratio("mean_power_w"), "pj_per_flop": ratio("pj_per_flop")}


# --------------------------------------------------------------------------------------------
# Markdown


def _fmt(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _reasons_cell(share: dict[str, float]) -> str:
    if not share:
        return "none"
    return ", ".join(f"{name} {value:.0%}" for name, value in sorted(share.items(), key=lambda x: -x[1]))


ENERGY_METHODS = {
    "counter_updates": "the energy counter's first and last updates inside each run (mean power) x GPU time",
    "counter_ends": "the energy counter read at each run's ends (each read up to one 100 ms step off)",
    "integrated_samples": "the power samples integrated over each run (no energy counter; they may "
                          "be one-second averages that lag the run's start)",
    "none": "nothing (no counter, no power samples)",
}


def power_markdown(doc: dict[str, Any]) -> str:
    """Two tables: each library's figures per case, then the sgblas/cuBLAS ratios."""
    rows, ratio_rows = [], []
    for case in doc["cases"]:
        label = results_io.shape_label(case["m"], case["n"], case["k"])
        for lib, name in (("sgblas", "sgblas"), ("cublas", "cuBLAS")):
            agg = case.get(lib)
            if not agg:
                continue
            rows.append([label, case["pair"], name, _fmt(agg["tflops"]), _fmt(agg["sm_clock_mhz"], 0),
                         _fmt(agg["peak_tflops_at_clock"]), _fmt(agg["share_of_peak"], 1, 100),
                         _fmt(agg["mean_power_w"], 0), _fmt(agg["power_limit_w"], 0),
                         _fmt(agg["pj_per_flop"], 2), _fmt(agg["energy_j"], 0),
                         _reasons_cell(agg["clock_reasons"]), agg["rounds"]])
        r = case.get("ratio") or {}
        check = case.get("check") or {}
        status = case["status"] if case["status"] == "ok" else f"{case['status']}: {case.get('reason') or ''}"
        ratio_rows.append([label, case["pair"], case.get("kernel") or "-", _fmt(r.get("tflops"), 3),
                           _fmt(r.get("sm_clock"), 3), _fmt(r.get("mean_power"), 3),
                           _fmt(r.get("pj_per_flop"), 3), results_io._check_cell(check), status])
    first = results_io.markdown_table(
        ["shape", "pair", "library", "TFLOP/s", "SM MHz (median)", "FFMA peak at that clock",
         "% of peak", "mean W", "limit W", "pJ/FLOP", "J/run", "clock-event reasons (share of samples)",
         "runs"], rows, align="lllrrrrrrrrlr")
    second = results_io.markdown_table(
        ["shape", "pair", "sgblas kernel", "TFLOP/s sgblas/cuBLAS", "clock", "power", "pJ/FLOP",
         "check", "status"], ratio_rows, align="lllrrrrll")
    methods = sorted({m for case in doc["cases"] for lib in ("sgblas", "cublas")
                      for m in (case.get(lib) or {}).get("energy_methods", [])})
    legend = "; ".join(ENERGY_METHODS.get(m, m) for m in methods) or "not measured"
    return first + "\n\n" + second + "\n\nEnergy from: " + legend + "."


# --------------------------------------------------------------------------------------------
# Command line


def selected_shapes(args: argparse.Namespace) -> list[tuple[int, int, int, str]]:
    if args.shape:
        return [(m, n, k, "custom") for m, n, k in args.shape]
    return [(s, s, s, "square") for s in (QUICK_SIZES if args.quick else DEFAULT_SIZES)]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perf.power",
        description="TFLOP/s, SM clock, power and energy per FLOP of sgblas.sgemm and cuBLAS strict "
                    "FP32 (gemmEx PEDANTIC), each run back to back for a few seconds of GPU time "
                    "while a thread samples the clock and the power.")
    group = parser.add_argument_group("cases")
    group.add_argument("--shape", action="append", type=bench.parse_shape, metavar="MxNxK",
                       help="a shape (repeatable; default: 4096^3, 8192^3, 16384^3)")
    group.add_argument("--pairs", type=bench.parse_pairs, default=bench.PAIRS, metavar="NN,NT,TN,TT",
                       help="transpose pairs, comma-separated, or 'all' (default: all)")
    group.add_argument("--quick", action="store_true", help="4096^3 only, 1 s runs")
    group.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")

    group = parser.add_argument_group("runs and sampling")
    group.add_argument("--seconds", type=float, default=None, metavar="S",
                       help="GPU time of each run (default: 4, quick: 1)")
    group.add_argument("--interval", type=float, default=0.1, metavar="S",
                       help="seconds between samples of clock, power and reasons (default: 0.1)")
    group.add_argument("--rounds", type=int, default=1, metavar="N",
                       help="runs per library and case, alternating sgblas and cuBLAS (default: 1)")
    group.add_argument("--cooldown", type=float, default=0.0, metavar="S",
                       help="idle seconds before each run (default: 0)")
    group.add_argument("--preheat", type=float, default=0.0, metavar="S",
                       help="untimed back-to-back sgblas calls for S seconds before a case's first "
                            "run (default: 0)")
    group.add_argument("--warmup", type=int, default=3, metavar="N",
                       help="untimed calls per library and case before its runs (default: 3)")
    group.add_argument("--lead-s", type=float, default=0.1, metavar="S",
                       help="GPU work kept queued ahead of the GPU during a run (default: 0.1)")
    group.add_argument("--energy-poll", type=float, default=0.005, metavar="S",
                       help="read the energy counter every S seconds between samples, to time its "
                            "updates (0: read it only at the ends of each run; default: 0.005)")
    group.add_argument("--sampler", choices=("auto", "nvml", "pynvml", "nvidia-smi"), default="auto",
                       help="how to read clock and power: NVML by ctypes, pynvml or nvidia-smi; "
                            "auto takes the first that works (default)")
    group.add_argument("--l2-multiple", type=float, default=4.0, metavar="X",
                       help="rotate buffer sets until they span X times the L2 size (default: 4)")
    group.add_argument("--max-sets", type=int, default=32, metavar="N", help="default: 32")

    group = parser.add_argument_group("libraries and checks")
    group.add_argument("--no-cublas", action="store_true", help="run sgblas alone")
    group.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest relative Frobenius error against cuBLAS (default: 1e-5)")
    group.add_argument("--fp64-check", action="store_true",
                       help="also compare both results with a float64 product (CuPy)")
    group.add_argument("--seed", type=int, default=20261129)
    group.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default: 0)")
    group.add_argument("--out", type=Path, default=results_io.RESULTS_DIR, metavar="DIR",
                       help="where the JSON goes (default: perf/results)")
    args = parser.parse_args(argv)

    if args.seconds is None:
        args.seconds = 1.0 if args.quick else 4.0
    if not args.seconds > 0 or not math.isfinite(args.seconds):
        parser.error("--seconds must be a positive number")
    if not args.interval > 0 or not math.isfinite(args.interval):
        parser.error("--interval must be a positive number")
    if not args.energy_poll >= 0:
        parser.error("--energy-poll cannot be negative")
    if not args.lead_s > 0:
        parser.error("--lead-s must be positive")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.cooldown < 0 or args.preheat < 0 or args.warmup < 0:
        parser.error("--cooldown, --preheat and --warmup cannot be negative")
    if args.max_sets < 1 or not args.l2_multiple > 0:
        parser.error("--max-sets must be at least 1 and --l2-multiple positive")
    if not args.tolerance > 0:
        parser.error("--tolerance must be positive")
    return args


def _cuda_bus_id(cupy: Any, index: int) -> str | None:
    device = cupy.cuda.Device(index)
    value = _try(lambda: device.pci_bus_id)
    if value is None:
        value = _try(lambda: cupy.cuda.runtime.deviceGetPCIBusId(index))
    return value.decode() if isinstance(value, bytes) else value


def _save(doc: dict[str, Any], out_dir: Path) -> Path:
    """``out_dir/power_<UTC YYYYmmdd-HHMMSS>_<device>.json``, never over an existing file."""
    from datetime import datetime

    out_dir.mkdir(parents=True, exist_ok=True)
    created = datetime.fromisoformat(doc["created"])
    stem = f"power_{created.strftime('%Y%m%d-%H%M%S')}_{results_io._slug(doc['device'].get('name') or 'unknown')}"
    path = out_dir / f"{stem}.json"
    counter = 2
    while path.exists():
        path = out_dir / f"{stem}-{counter}.json"
        counter += 1
    text = json.dumps(results_io._finite(doc), indent=1, default=results_io._json_default, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def warm_up(timing: Any, run: bench.LibraryRun, warmup: int) -> None:
    """``perf.bench``'s warm-up, then one block of ``max(2, warmup)`` calls whose median sets the
    time per call that a run plans its queue with (a library's first calls on a shape can be
    far slower than the rest: cuBLAS's first gemmEx at 4096^3 took 0.3 s on an H100, and a
    slow first call ends perf.bench's warm-up at once, leaving that one time)."""
    bench.warm_up(timing, run, max(warmup, 1))
    count = max(2, warmup)
    result = timing.block(run.launch, run.next_index, count, spin_s=0.0)
    run.next_index += count
    run.warmup += count
    run.t_call = results_io.summarize(result.samples)["median"]
    run.host_s_per_call = result.host_s / count


def _run_record(window: RunWindow, summary: dict[str, Any], library: str, round_: int,
                start_index: int, samples: Sequence[Sample]) -> dict[str, Any]:
    t0 = window.t_start
    return {
        "library": library, "round": round_, **summary,
        "start_index": start_index, "depth": window.depth, "spin_s": window.spin_s,
        "drained": window.drained, "waits": window.waits, "stopped_by": window.stopped_by,
        "host_enqueue_s": window.host_s, "notes": window.notes,
        "samples": {
            "t_s": [round(s.t - t0, 4) for s in samples],
            "sm_mhz": [s.sm_mhz for s in samples],
            "power_w": [s.power_w for s in samples],
            "reasons": [s.reasons for s in samples],
            "energy_mj": [s.energy_mj for s in samples],
        },
    }


def _progress(run: dict[str, Any]) -> str:
    reasons = _reasons_cell(run["clock_reasons"]["share_of_samples"])
    return (f"{run['library']:>6} r{run['round']}: {_fmt(run['tflops'], 2)} TFLOP/s in "
            f"{run['calls']} calls / {run['gpu_s']:.2f} s, {_fmt(run['sm_clock_mhz']['median'], 0)} MHz "
            f"({_fmt(run['share_of_peak'], 1, 100)}% of {_fmt(run['peak_tflops_at_clock'])}), "
            f"{_fmt(run['mean_power_w'], 0)} W, {_fmt(run['pj_per_flop'], 2)} pJ/FLOP; {reasons}")


def run_case(index: int, case: bench.Case, *, sgblas: Any, handle: Any, backend: Any, timing: Any,
             cublas: Any, sampler: Sampler, source: Source, args: argparse.Namespace, l2_bytes: int,
             sms: int | None, lanes: int | None, log: Callable[[str], None]) -> dict[str, Any]:
    """Check and measure one case; returns its JSON record."""
    record = bench._base_record(case)
    record.update(status="error", reason=None, explanation=None, runs=[], preheat=None, notes=[])
    nsets = bench.buffer_sets(case.working_set_bytes, l2_bytes, args.l2_multiple, args.max_sets)
    record["buffer_sets"] = nsets
    t_setup = time.perf_counter()
    drawn = backend.random_arrays(list(case.allocated) * nsets, bench._seed(args.seed, index))
    sets = [(drawn[3 * s], drawn[3 * s + 1], drawn[3 * s + 2]) for s in range(nsets)]
    del drawn
    backend.synchronize()
    record["setup_s"] = time.perf_counter() - t_setup
    a0, b0, c0 = sets[0]
    record["kernel"], record["explanation"] = bench.explain_kernel(sgblas, handle, case, a0, b0, c0)

    # Correctness once, on the first buffer set: every library's first call on this shape.
    t_check = time.perf_counter()
    c_sgblas = backend.nan_filled(case.allocated[2])
    bench.sgblas_call(sgblas, handle, case, a0, b0, c_sgblas)
    backend.synchronize()
    if cublas is not None:
        c_cublas = backend.nan_filled(case.allocated[2])
        cublas(case, backend.pointer(a0), backend.pointer(b0), backend.pointer(c_cublas))
        backend.synchronize()
        check = bench.check_against_cublas(backend, case, c_sgblas, c_cublas, a0, b0,
                                           args.tolerance, args.fp64_check)
        del c_cublas
    else:
        check = bench.check_by_projection(backend, case, c_sgblas, a0, b0, args.tolerance,
                                          bench._seed(args.seed, index, 99))
    del c_sgblas
    check["seconds"] = time.perf_counter() - t_check
    record["check"] = check

    runs = [bench.LibraryRun("sgblas", lambda i: bench.sgblas_call(sgblas, handle, case, *sets[i % nsets]))]
    if cublas is not None:
        pointers = [tuple(backend.pointer(x) for x in s) for s in sets]
        # Half a rotation away, so a cuBLAS run does not start on the set sgblas just left in L2.
        runs.append(bench.LibraryRun("cublas", lambda i: cublas(case, *pointers[i % nsets]),
                                     next_index=nsets // 2))
    for run in runs:
        warm_up(timing, run, args.warmup)

    def one_run(run: bench.LibraryRun, seconds: float) -> tuple[RunWindow, int]:
        start_index = run.next_index
        gc_was_enabled = gc.isenabled()
        gc.disable()  # no collector pause may let the queue drain
        try:
            window = run_back_to_back(backend, run.launch, seconds=seconds, t_call=run.t_call,
                                      host_s_per_call=run.host_s_per_call, lead_s=args.lead_s,
                                      start_index=start_index, energy=source.energy_mj)
        finally:
            if gc_was_enabled:
                gc.enable()
        run.next_index += window.calls
        return window, start_index

    if args.preheat > 0:
        window, _ = one_run(runs[0], args.preheat)
        record["preheat"] = {"library": runs[0].name, "calls": window.calls, "gpu_s": window.gpu_s}

    by_library: dict[str, list[dict[str, Any]]] = {run.name: [] for run in runs}
    for round_ in range(1, args.rounds + 1):
        for run in runs:
            if args.cooldown > 0:
                time.sleep(args.cooldown)
            limit = source.power_limit_w()
            window, start_index = one_run(run, args.seconds)
            if not sampler.wait_past(window.t_end):
                record["notes"].append(f"{run.name} round {round_}: the sampler had not read past the "
                                       f"run's end (errors: {sampler.errors}, {sampler.last_error})")
            summary = summarize_run(
                flop_per_call=case.flop, calls=window.calls, gpu_s=window.gpu_s,
                t_start=window.t_start, t_end=window.t_end,
                samples=sampler.around(window.t_start, window.t_end),
                energy_start_mj=window.energy_start_mj, energy_end_mj=window.energy_end_mj,
                sms=sms, lanes_per_sm=lanes, power_limit_w=limit,
                ticks=sampler.ticks_in(window.t_start, window.t_end))
            entry = _run_record(window, summary, run.name, round_, start_index,
                                sampler.window(window.t_start, window.t_end))
            record["runs"].append(entry)
            by_library[run.name].append(entry)
            record["notes"] += [f"{run.name} round {round_}: {note}" for note in window.notes]
            if summary["samples_in_window"] < 3:
                record["notes"].append(f"{run.name} round {round_}: only {summary['samples_in_window']} "
                                       f"samples in the run window (lengthen --seconds or shorten --interval)")
            log(_progress(entry))

    for run in runs:
        record[run.name] = {**aggregate_runs(by_library[run.name]), "warmup": run.warmup,
                            "t_call_warmup_s": run.t_call, "host_us_per_call": run.host_s_per_call * 1e6}
    if cublas is not None:
        record["cublas"].update(cublas.describe())
    record["sgblas"]["call"] = "sgblas.sgemm"
    record["ratio"] = ratios(record["sgblas"], record.get("cublas"))
    record["status"] = "ok" if check["passed"] else "failed"
    if not check["passed"]:
        record["reason"] = (f"relative error {check['rel_error']:.3g} is not below "
                            f"{args.tolerance:g} ({check['reference']})")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = bench.build_cases(selected_shapes(args), args.pairs)
    libraries = 1 if args.no_cublas else 2
    if args.list:
        width = max([20, *(len(case.label) for case in cases)])
        for case in cases:
            print(f"{case.label:>{width}} {case.pair}  {case.flop / 1e9:12.1f} GFLOP  "
                  f"{case.working_set_bytes / 2**20:10.1f} MiB")
        per_case = libraries * args.rounds * (args.seconds + args.cooldown) + args.preheat
        print(f"{len(cases)} cases, {libraries * args.rounds} runs of {args.seconds:g} s each "
              f"(at least {len(cases) * per_case:.0f} s of runs)")
        return 0
    if not cases:
        print("perf.power: no case selected", file=sys.stderr)
        return 2

    started = time.perf_counter()
    created = results_io.utc_now()
    tf32_note = None
    if not args.no_cublas:
        ok, tf32_note = bench.prepare_tf32_override()
        if not ok:
            print(f"perf.power: refusing to run cuBLAS: {tf32_note}", file=sys.stderr)
            return 2
    if environment.simulator_enabled():
        print("perf.power: needs a real GPU and its power readings; the CUDA simulator has neither",
              file=sys.stderr)
        return 2
    if not bench._gpu_present():
        print("perf.power: no CUDA GPU is usable here; run on a GPU machine", file=sys.stderr)
        return 2
    try:
        import cupy
    except ImportError as exc:
        print(f"perf.power: needs CuPy (the arrays, the stream and cuBLAS): {exc}", file=sys.stderr)
        return 2

    try:
        backend = bench.CupyBackend(args.device)
    except Exception as exc:
        print(f"perf.power: cannot use CUDA device {args.device}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    cuda_bus_id = _cuda_bus_id(cupy, args.device)
    source, tried = open_source(args.sampler, args.device, cuda_bus_id)
    if source is None:
        print("perf.power: cannot read the clock and power: " + "; ".join(tried), file=sys.stderr)
        return 2
    sampler_info = {**source.describe(), "interval_s": args.interval, "not_used": tried,
                    "power_note": "the power reading may be a one-second average on recent GPUs; "
                                  "mean power and energy come from the energy counter when it exists"}

    import sgblas

    device = environment.device_info(args.device)
    device["pci_bus_id_cuda"] = cuda_bus_id
    device["pci_bus_id_nvml"] = sampler_info.get("nvml_pci_bus_id")
    l2_bytes = device.get("l2_bytes") or bench.DEFAULT_L2_BYTES
    cc = device.get("compute_capability")
    sms = device.get("multiprocessors")
    lanes = results_io.FP32_LANES_PER_SM.get(tuple(cc)) if cc else None
    timing = bench.EventTiming(backend)
    sampler = Sampler(source, args.interval, args.energy_poll)
    records: list[dict[str, Any]] = []
    cublas = handle = None
    width = max([20, *(len(case.label) for case in cases)])
    sampler.start()
    try:
        with backend.activated():
            spin_info = backend.calibrate_spin()
            handle = sgblas.Handle(device=args.device, stream=backend.stream)
            if not args.no_cublas:
                cublas = bench.CublasPedantic(backend)
            print(f"perf.power: {len(cases)} cases on {device.get('name')} (cc {cc}, {sms} SMs, "
                  f"{lanes} FP32 lanes/SM), {args.seconds:g} s runs x {args.rounds} round(s), "
                  f"sampler: {source.kind} every {args.interval:g} s, energy: {sampler_info['energy']}",
                  flush=True)
            for index, case in enumerate(cases):
                prefix = f"[{index + 1:>2}/{len(cases)}] {case.label:>{width - 2}} {case.pair}"
                print(prefix, flush=True)
                try:
                    record = run_case(index, case, sgblas=sgblas, handle=handle, backend=backend,
                                      timing=timing, cublas=cublas, sampler=sampler, source=source,
                                      args=args, l2_bytes=l2_bytes, sms=sms, lanes=lanes,
                                      log=lambda text: print(f"    {text}", flush=True))
                except Exception as exc:  # one broken case must not lose the run
                    record = bench._errored(case, exc)
                finally:
                    with contextlib.suppress(Exception):
                        backend.release()
                records.append(record)
                check = record.get("check") or {}
                print(f"    {record['status']}" + (f": {record.get('reason')}" if record.get("reason") else "")
                      + (f" (check {check['rel_error']:.1e})" if check.get("rel_error") is not None else ""),
                      flush=True)
    finally:
        sampler.stop()
        if cublas is not None:
            cublas.close()
        if handle is not None:
            with contextlib.suppress(Exception):
                handle.close()
        source.close()

    env_info = environment.environment_info()
    doc: dict[str, Any] = {
        "schema": POWER_SCHEMA,
        "kind": "power",
        "created": created.isoformat(),
        "host": env_info["host"],
        "command": ["python", "-m", "perf.power",
                    *environment.public_argv(list(sys.argv[1:] if argv is None else argv))],
        "environment": env_info,
        "device": device,
        "settings": {
            "backend": backend.name,
            "spin": spin_info,
            "sampler": sampler_info,
            "energy_counter_reads": sampler.energy_reads,
            "energy_counter_updates": len(sampler.ticks),
            "sampler_errors": sampler.errors,
            "sampler_last_error": sampler.last_error,
            "cublas": cublas.describe() if cublas is not None else None,
            "tf32_override": tf32_note,
            "fp32_lanes_per_sm": lanes,
            "peak_formula": "2 x FP32 lanes per SM x SMs x median SM clock of the run",
            "run": ("calls back to back; an event after each call; the host keeps depth - 1 to depth "
                    "calls queued (depth = lead_s of work + 1, at least 2), stops once the queued "
                    "calls make --seconds at the measured rate; GPU time from events around the run"),
            "window": "host perf_counter from just before the first enqueue to the end event seen complete",
            "alpha": 1.0, "beta": 0.0,
            "inputs": "standard normal float32, fresh per buffer set, tight leading dimensions",
            "l2_bytes_assumed": l2_bytes,
            "args": {key: value for key, value in vars(args).items() if key not in ("out", "list")},
        },
        "cases": records,
        "summary": {
            "cases": len(records),
            **{status: sum(r["status"] == status for r in records) for status in ("ok", "failed", "error")},
            "elapsed_s": time.perf_counter() - started,
        },
    }
    path = _save(doc, args.out)
    print()
    print(power_markdown(doc))
    print()
    print(f"energy: {sampler_info['energy']}; sampler: {source.kind} ({sampler.errors} read errors)")
    print(f"wrote {path} in {doc['summary']['elapsed_s']:.0f} s")
    return 1 if doc["summary"]["failed"] + doc["summary"]["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
