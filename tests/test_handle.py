"""Handle: devices, streams, closing."""

from __future__ import annotations

import pytest

import sgblas
from sgblas import InvalidValueError, MathMode, Status
from sgblas.handle import stream_handle


def test_defaults():
    with sgblas.Handle() as h:
        assert h.device == 0 and h.math_mode is MathMode.FP32 and h.stream is None and h.stream_handle == 0
        assert not h.closed
    assert h.closed


@pytest.mark.parametrize("device", [-1, 99, "0", True, 1.0])
def test_bad_device(device):
    with pytest.raises(InvalidValueError, match="device="):
        sgblas.Handle(device=device)


def test_bad_math_mode():
    with pytest.raises(InvalidValueError, match="math_mode"):
        sgblas.Handle(math_mode="fp32")


class _Torchish:
    cuda_stream = 0x1234


class _Cupyish:
    ptr = 0x5678


class _Protocol:
    def __cuda_stream__(self):
        return (0, 0x9ABC)


@pytest.mark.parametrize("stream, raw", [(None, 0), (0, 0), (0x42, 0x42), (_Torchish(), 0x1234),
                                         (_Cupyish(), 0x5678), (_Protocol(), 0x9ABC)])
def test_stream_handles(stream, raw):
    assert stream_handle(stream) == raw


@pytest.mark.parametrize("stream", [True, -5, "stream", 1.5, object()])
def test_bad_streams(stream):
    with pytest.raises(InvalidValueError, match="stream"):
        stream_handle(stream)


def test_set_stream_and_close():
    h = sgblas.Handle()
    h.set_stream(None)
    assert h.stream_handle == 0
    h.close()
    assert h.closed and "closed" in repr(h)


def test_no_device_raises_not_initialized(monkeypatch):
    import sgblas.handle

    monkeypatch.setattr(sgblas.handle, "device_count", lambda: 0)
    with pytest.raises(sgblas.SgblasError) as info:
        sgblas.Handle()
    assert info.value.status == Status.NOT_INITIALIZED


def test_workspace_is_the_handles_and_set_outside_calls():
    from sgblas.handle import DEFAULT_WORKSPACE_BYTES

    with sgblas.Handle() as h:
        assert h.workspace_bytes == DEFAULT_WORKSPACE_BYTES and h.workspace_ptr
        h._plans[("marker",)] = None
        h.set_workspace(4096)
        assert h.workspace_bytes == 4096 and not h._plans  # which variants fit is decided again
        h.set_workspace(0)
        assert h.workspace_bytes == 0 and h.workspace_ptr == 0
    with sgblas.Handle(workspace_bytes=0) as h:
        assert h.workspace_bytes == 0
    assert h.workspace_bytes == 0  # closing freed it


@pytest.mark.parametrize("bad", [-1, 1.5, True, "32"])
def test_workspace_size_must_be_a_non_negative_int(bad):
    with pytest.raises(sgblas.InvalidValueError, match="workspace_bytes="):
        sgblas.Handle(workspace_bytes=bad)
    with sgblas.Handle(workspace_bytes=0) as h, pytest.raises(sgblas.InvalidValueError, match="workspace_bytes="):
        h.set_workspace(bad)


def test_explain_names_the_alignment_class_and_every_other_variant():
    from numba import cuda
    import numpy as np

    from sgblas.kernels.spec import GEMM_KERNELS

    a = cuda.to_device(np.ones(12, np.float32))
    with sgblas.Handle() as h:
        e = sgblas.explain(h, "N", "N", 3, 2, 2, a, 3, a, 2, cuda.to_device(np.ones(6, np.float32)), 3)
    assert e.kernel is not None and e.alignment in (4, 8, 16)
    assert {n for n, _ in e.refusals + e.passed_over} == {s.name for s in GEMM_KERNELS} - {e.kernel}
    assert f"alignment class {e.alignment} bytes" in str(e) and "cannot run" in str(e)


_FIRST_HANDLE_TAKES_THE_RESERVE = """
import sgblas
from sgblas import handle as handle_module
assert handle_module._RESERVED == {}, handle_module._RESERVED  # the import reserves nothing
sgblas.initialize()
reserved = dict(handle_module._RESERVED)
device = sgblas.Handle(workspace_bytes=0).device  # a handle without a workspace leaves it
assert reserved.get(device), reserved
assert handle_module._RESERVED == reserved
first = sgblas.Handle()
assert first.workspace_ptr == reserved[device][0] and device not in handle_module._RESERVED
sgblas.initialize()  # once per device and process: nothing is reserved again
assert device not in handle_module._RESERVED
second = sgblas.Handle()
assert second.workspace_ptr and second.workspace_ptr != first.workspace_ptr
first.close(); second.close()
print("ok")
"""


@pytest.mark.gpu
def test_the_first_default_workspace_is_reserved_by_initialize_and_taken_once():
    import subprocess
    import sys

    from helpers import child_env

    done = subprocess.run([sys.executable, "-c", _FIRST_HANDLE_TAKES_THE_RESERVE], capture_output=True, text=True,
                          env=child_env(), timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


class _FakeDriver:
    """Allocations and their ids, as the driver hands them out (ids are never reused)."""

    def __init__(self):
        self.live: dict[int, int] = {}
        self.next_ptr, self.next_id = 0x7F0000000000, 1

    def mem_alloc(self, nbytes):
        ptr, self.next_ptr = self.next_ptr, self.next_ptr + nbytes
        self.live[ptr], self.next_id = self.next_id, self.next_id + 1
        return ptr

    def reset(self):  # a context reset frees everything
        self.live.clear()

    def pointer_buffer_id(self, ptr):
        return self.live.get(ptr)


def _allocate_with(monkeypatch, fake) -> None:
    """Make the handle module allocate through ``fake`` as on a device, with no reserve yet."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from sgblas import handle as handle_module

    monkeypatch.setattr(handle_module, "BACKEND", SimpleNamespace(simulated=False))
    for name in ("mem_alloc", "pointer_buffer_id"):
        monkeypatch.setattr(handle_module.driver, name, getattr(fake, name))
    monkeypatch.setattr(handle_module.driver, "made_current", lambda ctx: nullcontext())
    monkeypatch.setattr(handle_module, "primary_context_handle", lambda device: 0)
    monkeypatch.setattr(handle_module, "_RESERVED", {})
    monkeypatch.setattr(handle_module, "_EVER_RESERVED", set())


@pytest.mark.parametrize("reset, nbytes, taken", [
    (False, None, True),       # the first default-size workspace is the reserved one
    (True, None, False),       # not after a context reset freed it
    (False, 4096, False),      # nor for another size
])
def test_the_reserved_workspace_is_taken_once_and_only_while_it_is_alive(monkeypatch, reset, nbytes, taken):
    from sgblas import handle as handle_module
    from sgblas.handle import DEFAULT_WORKSPACE_BYTES

    fake = _FakeDriver()
    with sgblas.Handle(workspace_bytes=0) as h:
        _allocate_with(monkeypatch, fake)
        handle_module.reserve_workspace(h.device)
        reserved = handle_module._RESERVED[h.device][0]
        if reset:
            fake.reset()
        h.set_workspace(DEFAULT_WORKSPACE_BYTES if nbytes is None else nbytes)
        assert (h.workspace_ptr == reserved) == taken
        assert h.workspace_ptr in fake.live
        assert (h.device in handle_module._RESERVED) == (nbytes is not None)
        h._workspace = (0, 0, None)  # nothing real to free


def test_initialize_reserves_one_workspace_per_device_however_often_it_is_called(monkeypatch):
    from sgblas import handle as handle_module

    fake = _FakeDriver()
    with sgblas.Handle(workspace_bytes=0) as h:
        _allocate_with(monkeypatch, fake)
        assert sgblas.initialize() is None and sgblas.initialize(h.device) is None
        assert len(fake.live) == 1 and list(handle_module._RESERVED) == [h.device]
        h.set_workspace(handle_module.DEFAULT_WORKSPACE_BYTES)  # takes it
        assert handle_module._RESERVED == {}
        sgblas.initialize()
        assert len(fake.live) == 1 and handle_module._RESERVED == {}  # nothing that nobody would take
        h._workspace = (0, 0, None)  # nothing real to free


def test_initialize_loads_the_kernels_of_the_device():
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import loader

    assert sgblas.initialize(0) is None
    assert set(loader.loaded_kernels(0, REGISTRY)) == {spec.name for spec in REGISTRY}


@pytest.mark.parametrize("device", [-1, 99, "0", True, 1.0])
def test_initialize_refuses_a_bad_device_naming_it(device):
    with pytest.raises(InvalidValueError, match=f"device={device!r} is not a device ordinal"):
        sgblas.initialize(device)


def test_initialize_without_a_device_raises_not_initialized(monkeypatch):
    import sgblas.handle

    monkeypatch.setattr(sgblas.handle, "device_count", lambda: 0)
    with pytest.raises(sgblas.SgblasError, match="no CUDA device is present") as info:
        sgblas.initialize()
    assert info.value.status == Status.NOT_INITIALIZED


def test_initialize_reports_kernels_that_cannot_be_loaded_as_a_status(monkeypatch):
    from sgblas.runtime import loader

    def refuse(device, specs):
        raise RuntimeError("the cache is on fire")

    monkeypatch.setattr(loader, "loaded_kernels", refuse)
    with pytest.raises(sgblas.SgblasError, match="loading sgblas's kernels for device 0 failed: the cache is on fire") \
            as info:
        sgblas.initialize(0)
    assert info.value.status == Status.INTERNAL_ERROR
