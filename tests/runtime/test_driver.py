"""The driver helpers that need no GPU to check: ``made_current``'s push and pop, and the layout
of the structures ``cuLaunchKernelEx`` reads."""

from __future__ import annotations

import pytest

from sgblas.runtime import driver


@pytest.fixture
def contexts(monkeypatch):
    stack = [0xA]
    monkeypatch.setattr(driver, "current_context", lambda: stack[-1])
    monkeypatch.setattr(driver, "push_context", lambda ctx: stack.append(ctx))
    monkeypatch.setattr(driver, "pop_context", lambda: stack.pop())
    return stack


def test_made_current_pushes_another_context_and_pops_it_even_on_error(contexts):
    with driver.made_current(0xB):
        assert contexts == [0xA, 0xB]
    assert contexts == [0xA]
    with pytest.raises(RuntimeError), driver.made_current(0xB):
        raise RuntimeError("inside")
    assert contexts == [0xA]


def test_made_current_leaves_the_current_context_alone(contexts):
    with driver.made_current(0xA):
        assert contexts == [0xA]
    assert contexts == [0xA]


def test_the_launch_config_has_cuda_h_layout_and_asks_for_programmatic_serialization():
    """CUlaunchAttribute: a 4-byte id padded to 8, then a 64-byte union; CUlaunchConfig: six
    dimensions and the shared bytes (28 bytes), the stream at 32, the attributes at 40, their
    count at 48, 56 bytes in all (cuda.h, CUDA 12)."""
    import ctypes

    assert ctypes.sizeof(driver._LaunchAttribute) == 72 and driver._LaunchAttribute.value.offset == 8
    layout = driver._LaunchConfig
    assert (layout.hStream.offset, layout.attrs.offset, layout.numAttrs.offset, ctypes.sizeof(layout)) == \
        (32, 40, 48, 56)
    config, address = driver._programmatic_config()
    assert address.value == ctypes.addressof(config) and config.numAttrs == 1
    attribute = config.attrs.contents
    assert attribute.id == driver.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == 6
    assert attribute.value == 1


def test_a_new_param_layout_never_finds_a_collected_ones_buffers():
    """Layouts come and go (a test's own ABI); one made where a collected one lived gets buffers
    of its own size, not the thread-local buffers its predecessor left."""
    for size in range(1, 400):
        layout = driver.ParamLayout(f"<{size}i", tuple(4 * i for i in range(size)))
        storage, pointers, _, last = layout.buffers()
        assert len(storage) == 4 * size and len(pointers) == size and len(last) == 1
        del layout, storage, pointers, last
