"""The driver helpers that need no GPU to check: ``made_current``'s push and pop."""

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
