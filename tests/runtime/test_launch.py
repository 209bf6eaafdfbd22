"""``sgblas.runtime.launch.launch``: which driver call a launch takes, without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sgblas.runtime import driver, launch


@pytest.mark.parametrize("after", [False, True])
def test_a_launch_behind_the_kernel_ahead_goes_through_cuLaunchKernelEx(monkeypatch, after):
    calls = []
    monkeypatch.setattr(driver, "launch", lambda *a: calls.append(("cuLaunchKernel", a)))
    monkeypatch.setattr(driver, "launch_programmatic", lambda *a: calls.append(("cuLaunchKernelEx", a)))
    abi = SimpleNamespace(pack=lambda *args: ("packed",) + args)
    kernel = launch.LoadedKernel("k", abi, (256, 1, 1), 7, "function", None)
    launch.launch(kernel, (3, 2, 1), "stream", (1, 2.0), after)
    want = "cuLaunchKernelEx" if after else "cuLaunchKernel"
    assert calls == [(want, ("function", (3, 2, 1), (256, 1, 1), "stream", ("packed", 1, 2.0)))]


def test_the_simulator_runs_a_launch_behind_the_kernel_ahead_as_any_other(monkeypatch):
    ran = []
    abi = SimpleNamespace(simulate=lambda *a: ran.append(a))
    kernel = launch.LoadedKernel("k", abi, (32, 1, 1), 0, None, "dispatcher")
    monkeypatch.setattr(driver, "launch_programmatic", lambda *a: pytest.fail("no driver under the simulator"))
    launch.launch(kernel, (1, 1, 1), 0, (5,), True)
    assert ran == [("dispatcher", (1, 1, 1), (32, 1, 1), 0, (5,))]
