"""The public API as a user and a type checker see it, and the precision promise in the code.

* Every name in ``sgblas.__all__`` exists, has a docstring and appears in ``docs/api.md``.
* Public functions, and the public methods and properties of public classes, annotate every
  parameter and their return, and the annotations resolve.
* The package ships its ``py.typed`` marker (PEP 561).
* ``docs/api.md`` promises strict FP32: no tensor core, no TF32, no flush-to-zero. The PTX of one
  variant of every kernel generator in the registry is compiled for sm_90 (no GPU needed) and
  searched for the instructions that would break it. ``tests/test_precision_gpu.py`` checks the
  same promise on a GPU, against the environment's TF32 switches.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path

import pytest

from helpers import PTX_NEEDS
from helpers import assert_waits_for_the_grid_first
from helpers import ptx as ptx_of
import sgblas

REPO = Path(__file__).resolve().parents[1]
API_MD = (REPO / "docs" / "api.md").read_text()


def _public_names() -> list[str]:
    return [name for name in sgblas.__all__ if name != "__version__"]


def test_every_public_name_exists_is_documented_and_is_in_the_reference():
    assert len(set(sgblas.__all__)) == len(sgblas.__all__), "a name is listed twice in __all__"
    assert isinstance(sgblas.__version__, str) and re.fullmatch(r"\d+\.\d+\.\d+\S*", sgblas.__version__)
    for name in _public_names():
        assert hasattr(sgblas, name), f"sgblas.__all__ lists {name}, which sgblas does not define"
        obj = getattr(sgblas, name)
        assert inspect.getdoc(obj), f"sgblas.{name} has no docstring"
        assert re.search(rf"\b{re.escape(name)}\b", API_MD), f"docs/api.md does not mention {name}"


def _annotation_gaps(fn: typing.Callable, skip_first: bool) -> list[str]:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    gaps = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        gaps.append("return")
    typing.get_type_hints(fn)  # every annotation names something that exists
    return gaps


def _members(cls: type) -> typing.Iterator[tuple[str, typing.Callable]]:
    """The functions a class defines itself that users call: public methods and properties,
    and ``__init__``."""
    for attr, member in vars(cls).items():
        if attr.startswith("_") and attr != "__init__":
            continue
        if isinstance(member, property):
            member = member.fget
        elif isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member):
            yield attr, member


def test_public_functions_and_methods_are_fully_annotated():
    gaps = {}
    for name in _public_names():
        obj = getattr(sgblas, name)
        if inspect.isclass(obj):
            for attr, fn in _members(obj):
                missing = _annotation_gaps(fn, skip_first=not isinstance(vars(obj)[attr], staticmethod))
                if missing:
                    gaps[f"{name}.{attr}"] = missing
        elif inspect.isfunction(obj):
            missing = _annotation_gaps(obj, skip_first=False)
            if missing:
                gaps[name] = missing
    assert not gaps, f"parameters or returns without annotations: {gaps}"


def test_is_available_is_false_under_the_simulator_and_never_raises():
    from sgblas.runtime.device import BACKEND

    available = sgblas.is_available()
    assert isinstance(available, bool)
    if BACKEND.simulated:
        assert available is False  # the simulator is not a CUDA device


@pytest.mark.parametrize("answers, expected", [
    ({"device_count": 0}, False),                        # a driver without a device
    ({"cc": "below"}, False),                            # older than every kernel
    ({"cc": "lowest"}, True),
    ({"cc": (9, 0)}, True),
    ({"raises": "device_count"}, False),                 # the driver fails: never raises
    ({"raises": "current_device"}, False),
    ({"raises": "compute_capability"}, False),
])
def test_is_available_asks_the_driver_about_the_current_device_only(monkeypatch, answers, expected):
    from types import SimpleNamespace

    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import device, loader

    lowest = min(spec.min_cc for spec in REGISTRY)
    cc = {"below": (lowest[0], lowest[1] - 1) if lowest[1] else (lowest[0] - 1, 9), "lowest": lowest}.get(
        answers.get("cc"), answers.get("cc", (9, 0)))
    asked = []

    def answer(name, value):
        def query(*args):
            asked.append(name)
            if answers.get("raises") == name:
                raise RuntimeError(f"{name} failed")
            return value
        return query

    monkeypatch.setattr(device, "BACKEND", SimpleNamespace(simulated=False))
    monkeypatch.setattr(device, "device_count", answer("device_count", answers.get("device_count", 2)))
    monkeypatch.setattr(device, "current_device", answer("current_device", 1))
    monkeypatch.setattr(device, "compute_capability", answer("compute_capability", cc))
    for setup in ("loaded_kernels", "load_device", "make_resident"):
        monkeypatch.setattr(loader, setup, lambda *a, **k: pytest.fail("is_available loaded kernels"))
    assert sgblas.is_available() is expected
    assert set(asked) <= {"device_count", "current_device", "compute_capability"}


def test_warmup_error_is_gone_with_the_warm_up_at_import():
    assert not hasattr(sgblas, "warmup_error") and "warmup_error" not in API_MD


def test_the_package_ships_its_py_typed_marker():
    assert (Path(sgblas.__file__).parent / "py.typed").is_file()
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10: read the one table by eye
        table = re.search(r"^\[tool\.setuptools\.package-data\]\n((?:[^\[\n].*\n?)*)", text, re.MULTILINE)
        assert table and re.search(r'^sgblas\s*=\s*\[[^\]]*"py\.typed"', table.group(1), re.MULTILINE), (
            "pyproject.toml does not list py.typed in [tool.setuptools.package-data] sgblas")
        return
    package_data = tomllib.loads(text)["tool"]["setuptools"].get("package-data", {})
    assert "py.typed" in package_data.get("sgblas", []), (
        "pyproject.toml does not list py.typed in [tool.setuptools.package-data] sgblas")


# ---------------------------------------------------------------------------------------------
# the precision promise, statically
# ---------------------------------------------------------------------------------------------

#: Tensor-core matrix instructions of every generation (mma.sync, wmma, wgmma, tcgen05.mma),
#: TF32 conversions and operands, and flush-to-zero modifiers (what fastmath adds).
FORBIDDEN = re.compile(r"\b(?:wg|w)?mma\b|\bmma_async\b|\btcgen05\.|\.tf32\b|\.ftz\b")

@pytest.fixture(scope="module")
def sm90_ptx() -> dict[str, tuple[str, str]]:
    """``name -> (role, PTX for sm_90)`` of one variant of each kernel generator, from the
    session's background compile (``tests/helpers.py``: the simulator cannot compile)."""
    from sgblas.kernels.spec import by_name

    return {name: (by_name(name).role, ptx_of(name, cc)) for name, cc in PTX_NEEDS["test_public_api"]()}


@pytest.mark.ptx
def test_every_generator_is_represented(sm90_ptx):
    roles = {role for role, _ in sm90_ptx.values()}
    assert {"gemm", "scale"} <= roles, json.dumps(sorted(sm90_ptx))


@pytest.mark.ptx
def test_every_generator_waits_for_the_grid_ahead_first_on_sm90(sm90_ptx):
    """What lets the plan launch every kernel with programmatic stream serialization on sm_90."""
    for name, (_, ptx) in sm90_ptx.items():
        assert_waits_for_the_grid_first(ptx, (9, 0), name)


@pytest.mark.ptx
def test_no_tensor_core_tf32_or_flush_to_zero_instruction_in_any_generator(sm90_ptx):
    for name, (role, ptx) in sm90_ptx.items():
        found = sorted({m.group(0) for m in FORBIDDEN.finditer(ptx)})
        assert not found, f"the sm_90 PTX of {name} contains {found}, which breaks strict FP32"
        if role not in ("scale", "reduce", "pack"):  # the kernels that form products
            # The product itself: FP32 fused multiply-adds, rounded to nearest.
            assert "fma.rn.f32" in ptx, f"the sm_90 PTX of {name} has no fma.rn.f32"
