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
