"""Host-side logic of ``perf.power``: reasons, summaries, samplers, the run loop, the command line.

No GPU and no NVML library are needed: NVML is a fake object with the C functions' names,
nvidia-smi a fake runner, and the GPU of the run loop a model with a virtual clock.
"""

from __future__ import annotations

import ctypes
import json
import math
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from perf import bench, power, results_io

REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# Clock-event reasons


@pytest.mark.parametrize("mask, names", [
    (None, []),
    (0, []),
    (0x4, ["SW power cap"]),
    (0x1, ["idle"]),
    (0x4 | 0x8 | 0x80, ["SW power cap", "HW slowdown", "HW power brake"]),
    (0x2 | 0x10 | 0x20 | 0x40, ["applications clocks setting", "sync boost", "SW thermal", "HW thermal"]),
    (0x4 | 0x1000, ["SW power cap", "unknown 0x1000"]),
])
def test_decode_reasons(mask, names):
    assert power.decode_reasons(mask) == names


def test_every_named_reason_has_its_own_bit():
    bits = [bit for bit, _ in power.CLOCK_REASONS]
    assert len(set(bits)) == len(bits) and all(bit & (bit - 1) == 0 for bit in bits)
    names = {name for _, name in power.CLOCK_REASONS}
    assert {"SW power cap", "HW slowdown", "SW thermal", "HW thermal", "HW power brake", "sync boost",
            "idle", "applications clocks setting"} <= names


# --------------------------------------------------------------------------------------------
# Summaries


def _series(t0=-1.0, t1=6.0, step=0.1, inside=(0.0, 4.0)):
    """Samples every ``step`` s: idle outside ``inside`` (210 MHz, 90 W, idle bit), and inside
    alternating 1965/1980 MHz with one 1500 MHz dip, 690-700 W, SW power cap in 3 of 4."""
    samples, k = [], 0
    t = t0
    while t <= t1 + 1e-9:
        if inside[0] <= t <= inside[1]:
            mhz = 1500.0 if k == 7 else (1965.0 if k % 2 == 0 else 1980.0)
            reasons = 0x4 if k % 4 else 0x0
            samples.append(power.Sample(t, mhz, 690.0 + (k % 3) * 5, reasons, None))
            k += 1
        else:
            samples.append(power.Sample(t, 210.0, 90.0, 0x1, None))
        t = round(t + step, 10)
    return samples


def test_summarize_run_uses_only_the_window_and_the_energy_counter():
    samples = _series()
    inside = [s for s in samples if 0.0 <= s.t <= 4.0]
    flop = 2 * 8192 ** 3
    summary = power.summarize_run(
        flop_per_call=flop, calls=186, gpu_s=3.99, t_start=0.0, t_end=4.0, samples=samples,
        energy_start_mj=1_000_000, energy_end_mj=1_000_000 + 2_800_000,
        sms=132, lanes_per_sm=128, power_limit_w=700.0)
    assert summary["samples_in_window"] == len(inside) == 41
    assert summary["tflops"] == pytest.approx(flop * 186 / 3.99 / 1e12)
    clock_median = statistics.median(s.sm_mhz for s in inside)
    assert clock_median in (1965.0, 1980.0)  # the idle 210 MHz outside would drag it down
    assert summary["sm_clock_mhz"]["median"] == clock_median
    assert summary["sm_clock_mhz"]["mean"] == pytest.approx(statistics.fmean(s.sm_mhz for s in inside))
    assert summary["sm_clock_mhz"]["min"] == 1500.0
    peak = 2 * 128 * 132 * clock_median * 1e6 / 1e12
    assert summary["peak_tflops_at_clock"] == pytest.approx(peak)
    assert summary["share_of_peak"] == pytest.approx(summary["tflops"] / peak)
    assert summary["energy_j"] == pytest.approx(2800.0)
    assert "counter" in summary["energy"]["source"]
    assert summary["mean_power_w"] == pytest.approx(700.0)  # energy / window, not the samples
    assert summary["pj_per_flop"] == pytest.approx(2800.0 / (flop * 186) * 1e12)
    assert summary["power_sampled_w"]["mean"] == pytest.approx(statistics.fmean(s.power_w for s in inside))
    reasons = summary["clock_reasons"]
    assert reasons["active"] == ["SW power cap"]  # idle was set only outside the window
    assert reasons["share_of_samples"]["SW power cap"] == pytest.approx(
        sum(1 for s in inside if s.reasons & 0x4) / len(inside))
    assert summary["power_limit_w"] == 700.0


def test_peak_at_the_held_clock():
    # An H200 at 1965 MHz: 2 x 128 x 132 x 1.965 GHz = 66.4 TFLOP/s; 51.6 of it is 77.7 %.
    assert power.peak_tflops(132, 128, 1965) == pytest.approx(66.40128)
    assert power.peak_tflops(108, 64, 1410) == pytest.approx(2 * 64 * 108 * 1.41e-3)
    assert power.peak_tflops(None, 128, 1965) is None and power.peak_tflops(132, 128, None) is None


def test_integrate_power_piecewise_linear():
    ramp = [power.Sample(float(t), None, 100.0 + 10.0 * t, None, None) for t in range(11)]
    # integral of 100 + 10 t over [2.5, 7.5]
    assert power.integrate_power(ramp, 2.5, 7.5) == pytest.approx(500.0 + 5.0 * (7.5 ** 2 - 2.5 ** 2))
    # held flat beyond the first and last samples
    assert power.integrate_power(ramp, -2.0, 0.0) == pytest.approx(200.0)
    assert power.integrate_power(ramp, 10.0, 12.0) == pytest.approx(400.0)
    # uneven spacing, a sample without power ignored
    uneven = [power.Sample(0.0, None, 100.0, None, None), power.Sample(0.3, None, None, None, None),
              power.Sample(1.0, None, 300.0, None, None), power.Sample(4.0, None, 300.0, None, None)]
    assert power.integrate_power(uneven, 0.0, 4.0) == pytest.approx(200.0 + 900.0)
    assert power.integrate_power([power.Sample(1.0, 1.0, None, 0, None)], 0.0, 1.0) is None


def test_summarize_run_integrates_power_without_a_counter():
    samples = [power.Sample(round(-0.05 + 0.1 * i, 3), 1980.0, 600.0 + 10.0 * i, 0x4, None)
               for i in range(30)]
    summary = power.summarize_run(
        flop_per_call=2 * 4096 ** 3, calls=700, gpu_s=2.0, t_start=0.0, t_end=2.0, samples=samples,
        energy_start_mj=None, energy_end_mj=None, sms=132, lanes_per_sm=128, power_limit_w=None)
    expected = power.integrate_power(samples, 0.0, 2.0)
    # power(t) = 600 + 10 (t + 0.05) / 0.1 = 605 + 100 t: 2 x 605 + 100 x 2 = 1410 J
    assert expected == pytest.approx(1410.0)
    assert summary["energy_j"] == pytest.approx(1410.0)
    assert summary["energy"]["source"].startswith("integrated from power samples")
    assert summary["energy"]["method"] == "integrated_samples"
    assert summary["mean_power_w"] == pytest.approx(705.0)
    assert summary["pj_per_flop"] == pytest.approx(1410.0 / (2 * 4096 ** 3 * 700) * 1e12)
    # a counter that went backwards is not believed either
    backwards = power.summarize_run(
        flop_per_call=1, calls=1, gpu_s=2.0, t_start=0.0, t_end=2.0, samples=samples,
        energy_start_mj=5, energy_end_mj=4, sms=None, lanes_per_sm=None, power_limit_w=None)
    assert backwards["energy"]["source"].startswith("integrated")
    assert backwards["peak_tflops_at_clock"] is None and backwards["share_of_peak"] is None


def test_summarize_run_without_samples():
    summary = power.summarize_run(
        flop_per_call=10, calls=3, gpu_s=1.0, t_start=0.0, t_end=1.0, samples=[],
        energy_start_mj=0, energy_end_mj=500, sms=132, lanes_per_sm=128, power_limit_w=None)
    assert summary["samples_in_window"] == 0 and summary["sm_clock_mhz"]["median"] is None
    assert summary["peak_tflops_at_clock"] is None and summary["energy_j"] == pytest.approx(0.5)
    assert summary["clock_reasons"] == {"mask_any": None, "active": [], "share_of_samples": {}, "samples": 0}


def _ticks(t0=-0.35, t1=4.4, period=0.1, watts=700.0, bracket=0.008):
    """Counter updates every ``period`` s at ``watts``, each seen ``bracket`` s after the read
    that still had the old value."""
    ticks, t, energy = [], t0, 5_000_000.0
    while t <= t1:
        energy += watts * period * 1e3
        ticks.append(power.Tick(t, t - bracket / 2, t + bracket / 2, energy))
        t = round(t + period, 10)
    return ticks


def test_counter_power_between_the_first_and_last_updates_inside():
    ticks = _ticks(watts=696.0)
    result = power.counter_power(ticks, 0.0, 4.0)
    inside = [k for k in ticks if 0.0 <= k.t_lo and k.t_hi <= 4.0]
    assert result["updates"] == len(inside) == 40
    assert result["span_s"] == pytest.approx(inside[-1].t - inside[0].t) == pytest.approx(3.9)
    assert result["watts"] == pytest.approx(696.0)
    assert result["uncertainty"] == pytest.approx(0.008 / 3.9)
    assert power.counter_power(ticks, 0.0, 0.15) is None  # one update only
    assert power.counter_power(ticks[:3] + ticks[-3:], 0.0, 4.0) is None  # span below half the window
    assert power.counter_power([], 0.0, 4.0) is None


def test_summarize_run_prefers_the_counter_updates():
    flop = 2 * 16384 ** 3
    # the reads at the window's ends are a step off: they give 2700 J over 4 s (675 W)
    summary = power.summarize_run(
        flop_per_call=flop, calls=23, gpu_s=3.98, t_start=0.0, t_end=4.0, samples=_series(),
        energy_start_mj=0, energy_end_mj=2_700_000, sms=132, lanes_per_sm=128, power_limit_w=700.0,
        ticks=_ticks(watts=698.0))
    assert summary["mean_power_w"] == pytest.approx(698.0)
    assert summary["energy_j"] == pytest.approx(698.0 * 3.98)  # mean power x GPU time
    assert summary["pj_per_flop"] == pytest.approx(698.0 * 3.98 / (flop * 23) * 1e12)
    # energy per FLOP is mean power over the FLOP rate
    assert summary["pj_per_flop"] == pytest.approx(698.0 / (summary["tflops"] * 1e12) * 1e12)
    assert summary["energy"]["direct_j"] == pytest.approx(2700.0)
    assert summary["energy"]["counter_updates"]["updates"] == 40
    assert summary["energy"]["source"].startswith("energy counter: mean power between")
    assert summary["energy"]["method"] == "counter_updates"
    few = power.summarize_run(
        flop_per_call=flop, calls=23, gpu_s=3.98, t_start=0.0, t_end=4.0, samples=_series(),
        energy_start_mj=0, energy_end_mj=2_700_000, sms=132, lanes_per_sm=128, power_limit_w=700.0,
        ticks=_ticks(t0=1.0, t1=1.1))
    assert few["energy"]["source"] == "energy counter read at both ends of the window"
    assert few["energy"]["method"] == "counter_ends"
    assert few["energy_j"] == pytest.approx(2700.0) and few["mean_power_w"] == pytest.approx(675.0)


def _run(tflops, mhz, watts, pj, share=None):
    return {"calls": 10, "tflops": tflops, "mean_power_w": watts, "pj_per_flop": pj, "energy_j": 1.0,
            "peak_tflops_at_clock": 66.0, "share_of_peak": tflops / 66.0, "power_limit_w": 700.0,
            "gpu_s": 4.0, "sm_clock_mhz": {"median": mhz, "mean": mhz}, "power_sampled_w": {"mean": watts},
            "clock_reasons": {"share_of_samples": share or {}},
            "energy": {"source": "energy counter", "method": "counter_updates"}}


def test_aggregate_runs_and_ratios():
    sg = power.aggregate_runs([_run(51.0, 1965, 696, 13.6, {"SW power cap": 0.5}),
                               _run(52.0, 1970, 690, 13.2, {"SW power cap": 0.9}),
                               _run(50.0, 1950, 699, 14.0)])
    assert sg["rounds"] == 3 and sg["calls"] == 30
    assert sg["tflops"] == 51.0 and sg["sm_clock_mhz"] == 1965 and sg["mean_power_w"] == 696
    assert sg["clock_reasons"] == {"SW power cap": 0.9} and sg["energy_methods"] == ["counter_updates"]
    cb = power.aggregate_runs([_run(51.2, 1980, 666, 13.0)])
    r = power.ratios(sg, cb)
    assert r["tflops"] == pytest.approx(51.0 / 51.2)
    assert r["sm_clock"] == pytest.approx(1965 / 1980)
    assert r["mean_power"] == pytest.approx(696 / 666)
    assert r["pj_per_flop"] == pytest.approx(13.6 / 13.0)
    assert power.ratios(sg, None) is None and power.aggregate_runs([]) is None


# --------------------------------------------------------------------------------------------
# NVML through ctypes, against a fake library


class FakeNvmlLib:
    """The C functions by name; results written through the ctypes pointers given."""

    BUS_ID = b"00000000:19:00.0"

    def __init__(self, event_reasons=True, energy=True, pci_lookup=True):
        self.calls = []
        self.initialised = False
        self.energy = 1_000
        if not event_reasons:
            self.nvmlDeviceGetCurrentClocksEventReasons = None
        if not energy:
            self.nvmlDeviceGetTotalEnergyConsumption = lambda handle, out: 3  # NOT_SUPPORTED
        self.pci_lookup = pci_lookup

    def nvmlInit_v2(self):
        self.initialised = True
        return 0

    def nvmlShutdown(self):
        self.initialised = False
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, out):
        self.calls.append(("index", index.value))
        out.contents.value = 0x1000 + index.value
        return 0 if index.value < 8 else 2

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, out):
        self.calls.append(("pci", bus_id.value))
        if not self.pci_lookup or bus_id.value.upper() != self.BUS_ID:
            return 6  # NOT_FOUND
        out.contents.value = 0x2000
        return 0

    def nvmlDeviceGetClockInfo(self, handle, clock_type, out):
        assert handle.value in (0x2000, 0x1000, 0x1001) and clock_type.value == power.NVML_CLOCK_SM
        out.contents.value = 1965
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, out):
        out.contents.value = 696_123  # mW
        return 0

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, out):
        out.contents.value = 700_000
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle, out):
        self.energy += 70_000  # mJ, beyond 2^32 soon enough: an unsigned long long
        out.contents.value = self.energy + 2 ** 33
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, out):
        out.contents.value = 0x4
        return 0

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, out):
        out.contents.value = 0x4 | 0x8
        return 0

    def nvmlDeviceGetPciInfo_v3(self, handle, out):
        out.contents.busId = self.BUS_ID if handle.value == 0x2000 else b"00000000:3B:00.0"
        return 0

    def nvmlDeviceGetName(self, handle, buffer, length):
        assert length.value == len(buffer)
        buffer.value = b"NVIDIA H200"
        return 0


def test_nvml_wrapper_reads_through_pointers():
    lib = FakeNvmlLib()
    nvml = power.Nvml(lib)
    assert lib.initialised
    handle = nvml.handle_by_pci_bus_id("00000000:19:00.0")
    assert isinstance(handle, ctypes.c_void_p) and handle.value == 0x2000
    assert nvml.sm_clock_mhz(handle) == 1965
    assert nvml.power_w(handle) == pytest.approx(696.123)
    assert nvml.power_limit_w(handle) == pytest.approx(700.0)
    first = nvml.energy_mj(handle)
    assert first > 2 ** 32 and nvml.energy_mj(handle) - first == 70_000
    assert nvml.clock_reasons(handle) == 0x4
    assert nvml.reasons_function == "nvmlDeviceGetCurrentClocksEventReasons"
    assert nvml.pci_bus_id(handle) == "00000000:19:00.0"
    assert nvml.name(handle) == "NVIDIA H200"
    with pytest.raises(power.NvmlError, match="NOT_FOUND"):
        nvml.handle_by_pci_bus_id("00000000:AA:00.0")
    nvml.shutdown()
    assert not lib.initialised


def test_nvml_reasons_fall_back_to_the_throttle_function():
    nvml = power.Nvml(FakeNvmlLib(event_reasons=False))
    handle = nvml.handle_by_index(0)
    assert nvml.clock_reasons(handle) == 0x4 | 0x8
    assert nvml.reasons_function == "nvmlDeviceGetCurrentClocksThrottleReasons"
    assert power.decode_reasons(nvml.clock_reasons(handle)) == ["SW power cap", "HW slowdown"]


def test_nvml_source_picks_the_board_by_pci_bus_id():
    lib = FakeNvmlLib()
    # CUDA writes a 4-digit domain and lower case; NVML is asked in its own spelling.
    source = power.NvmlSource(power.Nvml(lib), index=1, cuda_bus_id="0000:19:00.0")
    assert ("pci", b"00000000:19:00.0") in lib.calls and not any(c[0] == "index" for c in lib.calls)
    info = source.describe()
    assert info["selected_by"] == "pci_bus_id" and info["pci_bus_ids_match"] is True
    assert info["cuda_pci_bus_id"] == "0000:19:00.0" and info["nvml_pci_bus_id"] == "00000000:19:00.0"
    assert info["name"] == "NVIDIA H200" and "TotalEnergy" in info["energy"]
    mhz, watts, reasons, energy = source.read()
    assert (mhz, watts, reasons) == (1965, pytest.approx(696.123), 0x4) and energy > 0
    assert source.energy_mj() - energy == 70_000
    assert source.power_limit_w() == pytest.approx(700.0)
    source.close()
    assert not lib.initialised


def test_nvml_source_falls_back_to_the_index_and_says_so():
    lib = FakeNvmlLib(pci_lookup=False, energy=False)
    source = power.NvmlSource(power.Nvml(lib), index=1, cuda_bus_id="0000:19:00.0")
    info = source.describe()
    assert info["selected_by"] == "index" and "CUDA_VISIBLE_DEVICES" in info["index_note"]
    assert "NOT_FOUND" in info["pci_lookup_error"]
    assert info["pci_bus_ids_match"] is False  # index 1 is another board here
    assert not source.has_energy and source.energy_mj() is None
    assert info["energy"].startswith("integrated")
    assert source.read()[3] is None


def test_nvml_load_reports_a_missing_library():
    with pytest.raises(OSError, match="not loadable"):
        power.Nvml.load(["libsurely-not-nvml-for-this-test.so"])


def test_bus_id_spellings():
    assert power.parse_bus_id("0000:19:00.0") == (0, 0x19, 0, 0)
    assert power.parse_bus_id(b"00000000:3b:00.1\x00") == (0, 0x3B, 0, 1)
    assert power.parse_bus_id("19:00.0") == (0, 0x19, 0, 0)
    assert power.parse_bus_id("not a bus id") is None and power.parse_bus_id(None) is None
    assert power.nvml_bus_id("0000:3b:00.0") == "00000000:3B:00.0"


# --------------------------------------------------------------------------------------------
# pynvml and nvidia-smi


class FakePynvml:
    def __init__(self):
        self.energy = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        assert bus_id == b"00000000:19:00.0"
        return "h"

    def nvmlDeviceGetHandleByIndex(self, index):
        return "i"

    def nvmlDeviceGetPciInfo(self, handle):
        return type("PciInfo", (), {"busId": b"00000000:19:00.0"})()

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle):
        return 666_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy += 10
        return self.energy

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x4

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"


def test_pynvml_source():
    source = power.PynvmlSource(FakePynvml(), 0, "0000:19:00.0")
    assert source.describe()["selected_by"] == "pci_bus_id"
    assert source.describe()["reasons_function"] == "nvmlDeviceGetCurrentClocksThrottleReasons"
    mhz, watts, reasons, energy = source.read()
    assert (mhz, watts, reasons) == (1980, 666.0, 0x4) and energy is not None
    assert source.power_limit_w() == 700.0


def test_smi_source_parses_and_falls_back_to_the_older_field():
    commands = []

    def runner(argv):
        commands.append(argv)
        query = argv[1]
        assert argv[-2:] == ["-i", "00000000:19:00.0"]
        if "clocks_event_reasons" in query:
            raise RuntimeError('Field "clocks_event_reasons.active" is not a valid field to query.')
        if query.endswith("pci.bus_id"):
            return "00000000:19:00.0\n"
        if query.endswith("enforced.power.limit"):
            return "700.00\n"
        return "1965, 696.12, 0x0000000000000004\n"

    source = power.SmiSource(0, "0000:19:00.0", runner=runner)
    assert source.reason_field == "clocks_throttle_reasons.active"
    assert source.read() == (1965.0, 696.12, 0x4, None)
    assert source.energy_mj() is None and not source.has_energy
    assert source.power_limit_w() == 700.0
    info = source.describe()
    assert info["pci_bus_ids_match"] is True and "integrated" in info["energy"]
    assert all("--format=csv,noheader,nounits" in c for c in commands)


def test_smi_values_not_available():
    source = power.SmiSource(2, None, runner=lambda argv: "[N/A], [Not Supported], [N/A]\n")
    assert source.selector == "2" and source.read() == (None, None, None, None)


# --------------------------------------------------------------------------------------------
# The sampler thread


class CountingSource(power.Source):
    kind = "fake"

    def __init__(self, fail_every=0):
        self.n = 0
        self.fail_every = fail_every

    def read(self):
        self.n += 1
        if self.fail_every and self.n % self.fail_every == 0:
            raise RuntimeError("flaky read")
        return 1900.0 + self.n, 650.0, 0x4, 1000.0 * self.n


def test_sampler_thread_reads_and_windows():
    sampler = power.Sampler(CountingSource(fail_every=5), interval=0.005)
    sampler.start()
    try:
        time.sleep(0.05)
        t0 = time.perf_counter()
        time.sleep(0.05)
        t1 = time.perf_counter()
        assert sampler.wait_past(t1, timeout=2.0)
        inside = sampler.window(t0, t1)
        assert inside and all(t0 <= s.t <= t1 for s in inside)
        around = sampler.around(t0, t1)
        assert around[0].t < t0 and around[-1].t > t1 and around[1:-1] == inside
        assert [s.t for s in sampler.samples] == sorted(s.t for s in sampler.samples)
    finally:
        sampler.stop()
    assert sampler.errors >= 1 and "flaky read" in sampler.last_error
    assert not sampler.wait_past(time.perf_counter() + 10, timeout=0.05)  # stopped: no hang


class SteppingCounter(power.Source):
    """An energy counter that steps by 70 J every ``every`` reads of it; the clock is virtual."""

    kind = "fake"
    has_energy = True

    def __init__(self, clock, every=3):
        self.clock = clock
        self.reads = 0
        self.every = every

    def energy_mj(self):
        self.clock.now += 0.003  # a read takes 3 ms
        self.reads += 1
        return 70_000.0 * (self.reads // self.every)

    def read(self):
        return 1980.0, 700.0, 0, self.energy_mj()


class VirtualClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_sampler_notes_each_counter_update():
    clock = VirtualClock()
    source = SteppingCounter(clock)
    sampler = power.Sampler(source, interval=0.1, energy_poll=0.005, clock=clock)
    sampler.sample_once()
    for _ in range(11):
        clock.now += 0.005
        sampler.poll_energy()
    assert sampler.energy_reads == 12 and len(sampler.samples) == 1
    assert [k.energy_mj for k in sampler.ticks] == [70_000.0, 140_000.0, 210_000.0, 280_000.0]
    for tick in sampler.ticks:
        assert tick.t_lo < tick.t < tick.t_hi and tick.t_hi - tick.t_lo == pytest.approx(0.008)
    second = sampler.ticks[1]
    assert sampler.ticks_in(second.t_lo, second.t_hi) == [second]
    assert sampler.ticks_in(second.t_lo + 1e-6, second.t_hi) == []  # not wholly inside
    # a source without a counter is never polled between samples
    assert power.Sampler(CountingSource(), 0.1, energy_poll=0.005).energy_poll == 0.0


# --------------------------------------------------------------------------------------------
# The run loop against a model GPU


class FakeEvent:
    def __init__(self):
        self.t = None


class FakeGpu:
    """A stream that runs queued work in order on a virtual clock; the host's launches cost
    ``host_cost`` and its polls advance the clock by the poll interval."""

    def __init__(self, t_call, host_cost):
        self.now = 0.0
        self.busy_until = 0.0
        self.t_call = t_call
        self.host_cost = host_cost
        self.launched = []
        self.idle_before_call = []
        self.max_queued = 0

    def event(self):
        return FakeEvent()

    def record(self, event):
        event.t = max(self.now, self.busy_until)

    def done(self, event):
        return event.t is not None and event.t <= self.now

    def elapsed_s(self, a, b):
        assert self.done(a) and self.done(b)
        return b.t - a.t

    def synchronize(self):
        self.now = max(self.now, self.busy_until)

    def spin(self, seconds):
        self.busy_until = max(self.now, self.busy_until) + seconds

    def launch(self, index):
        self.now += self.host_cost
        if self.launched and self.now > self.busy_until:
            self.idle_before_call.append(self.now - self.busy_until)
        self.busy_until = max(self.now, self.busy_until) + self.t_call
        self.launched.append(index)
        if len(self.launched) > 1000:  # past the sleeping kernel that heads the run
            self.max_queued = max(self.max_queued, (self.busy_until - self.now) / self.t_call)

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_run_keeps_the_queue_full_and_stops_at_the_seconds():
    gpu = FakeGpu(t_call=0.0027, host_cost=30e-6)
    energy = iter([5_000.0, 2_805_000.0])
    window = power.run_back_to_back(
        gpu, gpu.launch, seconds=4.0, t_call=0.0025, host_s_per_call=30e-6, lead_s=0.1,
        start_index=7, energy=lambda: next(energy), clock=gpu.clock, sleep=gpu.sleep)
    assert window.depth == math.ceil(0.1 / 0.0025) + 1
    assert window.drained == 0 and gpu.idle_before_call == []  # the GPU never waited for the host
    assert gpu.launched == list(range(7, 7 + window.calls))
    assert window.calls == round(4.0 / 0.0027)  # the measured rate, not the warm-up's guess
    assert abs(window.gpu_s - 4.0) <= 0.0027
    assert window.gpu_s == pytest.approx(window.calls * 0.0027)
    assert gpu.max_queued <= window.depth + 1e-9
    assert window.t_end >= window.t_start + window.gpu_s
    assert window.t_end - window.t_start - window.gpu_s < 0.01  # the spin and the last poll only
    assert (window.energy_start_mj, window.energy_end_mj) == (5_000.0, 2_805_000.0)
    assert window.stopped_by == "seconds" and window.waits > 0


def test_run_of_slow_calls_keeps_two_queued():
    gpu = FakeGpu(t_call=0.172, host_cost=40e-6)
    window = power.run_back_to_back(gpu, gpu.launch, seconds=4.0, t_call=0.17, host_s_per_call=40e-6,
                                    lead_s=0.1, clock=gpu.clock, sleep=gpu.sleep)
    assert window.depth == 2 and window.drained == 0 and gpu.idle_before_call == []
    assert window.calls == round(4.0 / 0.172) and abs(window.gpu_s - 4.0) <= 0.172


def test_run_raises_the_depth_when_the_warm_up_guessed_too_slow():
    # A slow first call (0.3 s) once planned a 4096^3 run with depth 2 and stopped it early.
    gpu = FakeGpu(t_call=0.0027, host_cost=30e-6)
    window = power.run_back_to_back(gpu, gpu.launch, seconds=3.0, t_call=0.316, host_s_per_call=30e-6,
                                    lead_s=0.1, clock=gpu.clock, sleep=gpu.sleep)
    assert window.depth == math.ceil(0.1 / 0.0027) + 1
    assert any("queue depth raised from 2" in note for note in window.notes)
    assert window.stopped_by == "seconds" and abs(window.gpu_s - 3.0) <= 0.0027
    assert window.drained == 0 and gpu.idle_before_call == []


def test_run_counts_drains_when_the_host_is_the_bottleneck():
    gpu = FakeGpu(t_call=20e-6, host_cost=50e-6)
    window = power.run_back_to_back(gpu, gpu.launch, seconds=0.05, t_call=20e-6, host_s_per_call=50e-6,
                                    lead_s=0.001, clock=gpu.clock, sleep=gpu.sleep)
    assert window.drained > 0 and any("run out of queued calls" in n for n in window.notes)


# --------------------------------------------------------------------------------------------
# Command line, tables, files


def test_list_needs_no_gpu(capsys):
    assert power.main(["--list"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("12 cases")
    rows = out[:-1]
    assert len(rows) == 12
    for size in (4096, 8192, 16384):
        assert sorted(r.split()[1] for r in rows if r.split()[0] == f"{size}x{size}x{size}") == \
            ["NN", "NT", "TN", "TT"]
    assert rows[0].split()[0] == "4096x4096x4096" and rows[-1].split()[0] == "16384x16384x16384"


def test_quick_and_shape_options(capsys):
    assert power.main(["--list", "--quick"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("4 cases")
    args = power.parse_args(["--quick"])
    assert args.seconds == 1.0 and args.interval == 0.1 and args.rounds == 1
    assert power.parse_args([]).seconds == 4.0
    assert power.parse_args(["--quick", "--seconds", "2"]).seconds == 2.0
    assert power.main(["--list", "--shape", "1000x2000x300", "--pairs", "NN,TT"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("2 cases")


def test_list_as_a_script_runs_without_a_gpu():
    done = subprocess.run([sys.executable, "-m", "perf.power", "--list"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("12 cases")


@pytest.mark.parametrize("argv", [
    ["--seconds", "0"], ["--seconds", "-1"], ["--interval", "0"], ["--rounds", "0"],
    ["--cooldown", "-1"], ["--shape", "4096x4096"], ["--pairs", "NX"], ["--sampler", "dcgm"],
    ["--lead-s", "0"], ["--no-such-option"], ["--seconds", "nan"], ["--energy-poll", "-1"],
])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        power.main(argv)
    assert info.value.code == 2


def test_refuses_cublas_with_tf32_override(monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    assert power.main(["--quick"]) == 2
    assert "NVIDIA_TF32_OVERRIDE" in capsys.readouterr().err


def test_simulator_is_a_setup_error(monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert power.main(["--quick"]) == 2
    assert "simulator" in capsys.readouterr().err


def _synthetic_doc():
    sg = power.aggregate_runs([_run(51.6, 1965, 696, 13.7, {"SW power cap": 0.95})])
    cb = power.aggregate_runs([_run(51.2, 1980, 666, 13.0)])
    case = {"m": 8192, "n": 8192, "k": 8192, "pair": "NN", "kernel": "k128x128", "status": "ok",
            "reason": None, "check": {"rel_error": 2e-7, "passed": True},
            "sgblas": sg, "cublas": cb, "ratio": power.ratios(sg, cb)}
    return {"schema": power.POWER_SCHEMA, "kind": "power", "synthetic": True,
            "created": "2026-12-05T01:02:03+00:00", "device": {"name": "SYNTHETIC TEST DEVICE"},
            "cases": [case]}


def test_markdown_tables():
    text = power.power_markdown(_synthetic_doc())
    first, second, legend = text.split("\n\n")
    assert legend.startswith("Energy from: the energy counter's first and last updates")
    assert "| 8192x8192x8192 | NN | sgblas | 51.6 | 1965 |" in first
    assert "SW power cap 95%" in first and "| none |" in first
    assert f"{51.6 / 51.2:.3f}" in second and f"{696 / 666:.3f}" in second and "ok (2.0e-07)" in second


def test_save_names_the_file_and_never_overwrites(tmp_path):
    doc = _synthetic_doc()
    first = power._save(doc, tmp_path)
    second = power._save(doc, tmp_path)
    assert first.name == "power_20261205-010203_SYNTHETIC-TEST-DEVICE.json"
    assert second.name == "power_20261205-010203_SYNTHETIC-TEST-DEVICE-2.json"
    assert json.loads(first.read_text())["cases"][0]["ratio"]["tflops"] == pytest.approx(51.6 / 51.2)
    assert not list(results_io.RESULTS_DIR.glob("power_*SYNTHETIC*"))


# --------------------------------------------------------------------------------------------
# One case end to end, on a model GPU that keeps wall-clock time


class WallClockGpu:
    """perf.bench's backend interface over NumPy arrays: each call keeps a model GPU busy for
    ``t_call`` seconds of real time; events complete when the work queued before them would."""

    name = "model"

    def __init__(self, t_call):
        self.cp = np
        self.t_call = t_call
        self.busy_until = 0.0
        self.arrays = {}

    def _register(self, array):
        self.arrays[array.ctypes.data] = array
        return array

    def random_arrays(self, sizes, seed):
        rng = np.random.default_rng(seed)
        return [self._register(rng.standard_normal(n).astype(np.float32)) for n in sizes]

    def nan_filled(self, n):
        return self._register(np.full(n, np.nan, dtype=np.float32))

    def pointer(self, array):
        return array.ctypes.data

    def to_host(self, array):
        return array

    def release(self):
        pass

    def work(self):
        self.busy_until = max(time.perf_counter(), self.busy_until) + self.t_call

    def spin(self, seconds):
        if seconds > 0:
            self.busy_until = max(time.perf_counter(), self.busy_until) + seconds

    def synchronize(self):
        while time.perf_counter() < self.busy_until:
            time.sleep(1e-4)

    def event(self):
        return FakeEvent()

    def record(self, event):
        event.t = max(time.perf_counter(), self.busy_until)

    def done(self, event):
        return event.t is not None and event.t <= time.perf_counter()

    def wait(self, event):
        while not self.done(event):
            time.sleep(1e-4)

    def elapsed_s(self, a, b):
        return b.t - a.t


def _product(case, a, b, c, ldc, wrong=False):
    op_a = bench._fview(a, *case.a_dims, case.lda)
    op_b = bench._fview(b, *case.b_dims, case.ldb)
    op_a = op_a.T if case.transa == "T" else op_a
    op_b = op_b.T if case.transb == "T" else op_b
    bench._fview(c, case.m, case.n, ldc)[...] = (op_a @ op_b) * (1.01 if wrong else 1.0)


class ModelSgblas:
    def __init__(self, gpu, wrong=False):
        self.gpu, self.wrong = gpu, wrong

    def sgemm(self, handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        case = bench.Case(m, n, k, transa, transb, "custom")
        _product(case, a, b, c, ldc, self.wrong)
        self.gpu.work()
        return 0

    def explain(self, handle, *args):
        return types.SimpleNamespace(kernel="model_kernel")


class ModelCublas:
    def __init__(self, gpu):
        self.gpu = gpu

    def __call__(self, case, a_ptr, b_ptr, c_ptr):
        arrays = self.gpu.arrays
        _product(case, arrays[a_ptr], arrays[b_ptr], arrays[c_ptr], case.ldc)
        self.gpu.work()

    def describe(self):
        return {"function": "model cuBLAS"}


@pytest.mark.parametrize("wrong", [False, True])
def test_run_case_end_to_end_on_a_model_gpu(wrong, tmp_path):
    gpu = WallClockGpu(t_call=0.002)
    args = power.parse_args(["--shape", "8x8x8", "--pairs", "TN", "--seconds", "0.12",
                             "--interval", "0.01", "--rounds", "2", "--preheat", "0.02"])
    case = power.bench.build_cases(power.selected_shapes(args), args.pairs)[0]
    source = power.NvmlSource(power.Nvml(FakeNvmlLib()), 0, "0000:19:00.0")
    sampler = power.Sampler(source, args.interval, args.energy_poll)
    lines = []
    sampler.start()
    try:
        record = power.run_case(0, case, sgblas=ModelSgblas(gpu, wrong), handle=None, backend=gpu,
                                timing=bench.EventTiming(gpu), cublas=ModelCublas(gpu), sampler=sampler,
                                source=source, args=args, l2_bytes=60 * 2**20, sms=132, lanes=128,
                                log=lines.append)
    finally:
        sampler.stop()
    assert record["status"] == ("failed" if wrong else "ok")
    assert record["check"]["passed"] is (not wrong)
    assert record["kernel"] == "model_kernel" and record["buffer_sets"] == 32
    assert [(r["library"], r["round"]) for r in record["runs"]] == [
        ("sgblas", 1), ("cublas", 1), ("sgblas", 2), ("cublas", 2)]
    assert record["preheat"]["library"] == "sgblas" and record["preheat"]["calls"] > 0
    for run in record["runs"]:
        assert 0.09 < run["gpu_s"] < 0.3 and run["calls"] > 20
        assert run["tflops"] == pytest.approx(case.flop * run["calls"] / run["gpu_s"] / 1e12)
        assert run["samples_in_window"] >= 3 and len(run["samples"]["t_s"]) == run["samples_in_window"]
        assert all(0 <= t <= run["window_s"] for t in run["samples"]["t_s"])
        assert run["sm_clock_mhz"]["median"] == 1965 and run["clock_reasons"]["active"] == ["SW power cap"]
        assert run["power_limit_w"] == pytest.approx(700.0) and run["pj_per_flop"] > 0
        assert run["energy"]["source"].startswith("energy counter: mean power between")
    for lib in ("sgblas", "cublas"):
        assert record[lib]["rounds"] == 2 and record[lib]["warmup"] >= 3
    assert record["cublas"]["function"] == "model cuBLAS" and record["sgblas"]["call"] == "sgblas.sgemm"
    assert set(record["ratio"]) == {"tflops", "sm_clock", "mean_power", "pj_per_flop"}
    assert len(lines) == 4 and lines[0].startswith("sgblas r1:")
    doc = {"schema": power.POWER_SCHEMA, "kind": "power", "synthetic": True,
           "created": "2026-12-05T01:02:03+00:00", "device": {"name": "SYNTHETIC TEST DEVICE"},
           "cases": [record]}
    saved = json.loads(power._save(doc, tmp_path).read_text())
    assert saved["cases"][0]["runs"][3]["library"] == "cublas"
    table = power.power_markdown(saved)
    assert "| 8x8x8 | TN | sgblas |" in table and ("FAILED" in table) is wrong
