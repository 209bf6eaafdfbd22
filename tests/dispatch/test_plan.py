"""Which variant a problem gets, and the sentences for every variant it does not get.

Choice is legality (each spec's ``can_implement``, then each candidate's) then the candidate
of least predicted time (:mod:`sgblas.dispatch.model`). These tests use the properties of an
H200 (132 SMs) and of a small notional GPU, neither of which has a calibration (the default
rates predict), and test properties of the choice, not which kernel it names: they derive their
expectations from the registry and the candidates, so a new manifest row or calibration
changes no test here.
"""

from __future__ import annotations

import contextlib
import threading

import pytest

from sgblas.dispatch import candidates as cand
from sgblas.dispatch.plan import _widest, choose
from sgblas.enums import MathMode
from sgblas.kernels.spec import GEMM_KERNELS, REGISTRY, SCALE_KERNEL, by_name
from sgblas.runtime.driver import DriverError
from sgblas.runtime.device import DeviceProperties

from helpers import ALIGNED, H200_PROPS, WORKSPACE, plan_handle, problem

H200 = (9, 0)
TURING = (7, 5)
SMALL_PROPS = DeviceProperties(16, 2048, 32, 65536, 102400)


def test_every_problem_gets_a_legal_variant_and_every_other_variant_a_sentence():
    for ta in "NT":
        for tb in "NT":
            for p in (problem(ta=ta, tb=tb), problem(ta=ta, tb=tb, m=1001, n=999, k=77, lda=1003),
                      problem(ta=ta, tb=tb, m=5, n=3, k=2, a=ALIGNED + 4), problem(cc=TURING, ta=ta, tb=tb)):
                choice = choose(p, H200_PROPS, WORKSPACE)
                assert choice.spec is not None and choice.spec.can_implement(p) is None
                assert choice.spec.pair == (ta, tb)
                named = {name for name, _ in choice.refused + choice.passed_over}
                assert named == {s.name for s in GEMM_KERNELS} - {choice.spec.name}
                assert all(isinstance(r, str) and len(r) > 20 for _, r in choice.refused + choice.passed_over)


@pytest.mark.parametrize("props", [H200_PROPS, SMALL_PROPS], ids=["h200", "small"])
def test_the_quick_choice_of_a_call_is_the_full_choice_of_explain(props):
    """Calls plan with ``quick=True`` (other pairs skipped unworded); explain words every
    refusal. Both must pick the same variant and split: pair x alignment x shape class x
    workspace."""
    shapes = ((4096, 4096, 4096), (1001, 999, 77), (5, 3, 2), (128, 8192, 8192), (3, 8192, 8192),
              (8192, 7, 4096), (1000, 1000, 100000), (1, 1, 1), (5000, 5000, 300))
    for ta in "NT":
        for tb in "NT":
            for m, n, k in shapes:
                for offset, pad in ((0, 0), (4, 1), (8, 2)):
                    for workspace in (0, WORKSPACE):
                        p = problem(ta=ta, tb=tb, m=m, n=n, k=k, a=ALIGNED + offset, c=ALIGNED + 2**33 + offset,
                                    lda=(m if ta == "N" else k) + pad)
                        full, quick = choose(p, props, workspace), choose(p, props, workspace, quick=True)
                        assert (quick.spec, quick.split, quick.candidate) == (full.spec, full.split, full.candidate), \
                            (p, workspace)
                        assert quick.predicted_s == pytest.approx(full.predicted_s)
                        assert [(r, c.spec, c.split) for r, c in quick.tail] == \
                            [(r, c.spec, c.split) for r, c in full.tail]


@pytest.mark.parametrize("props", [H200_PROPS, SMALL_PROPS], ids=["h200", "small"])
def test_the_choice_is_the_least_predicted_candidate_and_keeps_the_accuracy_policy(props):
    """explain's ranking is every candidate with its predicted time, fastest first; the choice
    is its first but for a variant whose twin of a wider alignment class is legal (not weighed).
    From k = 16384 on, no float32 sum of the choice is longer than the accuracy chunk when the
    workspace holds a split that keeps it. The choice is the same each time."""
    shapes = ((4096, 4096, 4096), (300, 200, 20000), (2048, 2048, 16384), (256, 256, 8192), (3, 8192, 20000),
              (8192, 5, 4096), (1000, 1000, 100000), (5000, 5000, 300), (5, 3, 2))
    for ta in "NT":
        for tb in "NT":
            for m, n, k in shapes:
                for workspace in (0, WORKSPACE):
                    p = problem(ta=ta, tb=tb, m=m, n=n, k=k)
                    c = choose(p, props, workspace)
                    legal = [s for s in GEMM_KERNELS if s.can_implement(p) is None]
                    narrower = {spec.name for spec, _ in _widest(legal)[1]}
                    weighed = [(name, t) for name, t in c.ranking if cand.parse_name(name)[0] not in narrower]
                    assert weighed[0] == (c.candidate, c.predicted_s) and c.predicted_s > 0, (p, workspace)
                    times = [t for _, t in c.ranking]
                    assert times == sorted(times)
                    found, _ = cand.enumerate_candidates(legal, p, props, workspace)
                    assert {name for name, _ in c.ranking} == {f.name for f in found}
                    chosen = next(f for f in found if f.name == c.candidate)
                    assert (chosen.spec, chosen.split) == (c.spec, c.split)
                    if k >= cand.ACCURACY_SPLIT_K and any(cand.meets_accuracy(f, k) for f in found):
                        assert cand.meets_accuracy(chosen, k), (p, workspace, c.candidate)
                    again = choose(p, props, workspace)
                    assert (again.candidate, again.predicted_s) == (c.candidate, c.predicted_s)


def test_general_kernels_accept_every_fp32_problem_and_run_what_nothing_else_can():
    general = [s for s in GEMM_KERNELS if s.backstop]
    assert sorted(s.pair for s in general) == [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")]
    assert all(s.name.startswith("sgemm_general_") for s in general)
    for spec in general:
        assert spec.can_implement(problem(ta=spec.pair[0], tb=spec.pair[1], m=1, n=1, k=1, a=4, b=8, c=12)) is None
    # Below sm_80 (the other variants' least compute capability) the general kernels run all.
    for ta in "NT":
        for tb in "NT":
            choice = choose(problem(cc=TURING, ta=ta, tb=tb, m=300, n=200, k=100), H200_PROPS, WORKSPACE)
            assert choice.spec.backstop and choice.spec.pair == (ta, tb), choice.spec.name
            assert [name for name, _ in choice.ranking] == [choice.spec.name]


def test_alignment_and_architecture_refusals_name_the_value():
    reasons = dict(choose(problem(lda=4097), H200_PROPS, WORKSPACE).refused)
    assert "lda=4097" in reasons["sgemm_simt_nn_128x128x16_2s_a16"]
    reasons = dict(choose(problem(b=ALIGNED + 4), H200_PROPS, WORKSPACE).refused)
    assert "B's address" in reasons["sgemm_simt_nn_128x64x16_2s_a16"]
    reasons = dict(choose(problem(cc=TURING), H200_PROPS, WORKSPACE).refused)
    assert "sm_75" in reasons["sgemm_simt_nn_128x128x16_2s_a16"]


def test_tf32_is_refused_by_every_variant():
    choice = choose(problem(mode=MathMode.TF32), H200_PROPS, WORKSPACE)
    assert choice.spec is None and len(choice.refused) == len(GEMM_KERNELS)
    assert all("TF32" in reason for _, reason in choice.refused)


def test_a_variant_needing_more_workspace_than_the_handle_has_is_passed_over(monkeypatch):
    import dataclasses

    from sgblas.kernels import spec as registry

    name = "sgemm_simt_nn_128x128x16_2s_a16"
    greedy = dataclasses.replace(by_name(name), workspace=lambda m, n, k: 1 << 30)
    monkeypatch.setattr(registry, "GEMM_KERNELS", [greedy if s.name == name else s for s in GEMM_KERNELS])
    choice = choose(problem(), H200_PROPS, WORKSPACE)
    assert choice.spec is not greedy and all(not c.startswith(name) for c, _ in choice.ranking)
    assert dict(choice.passed_over)[name] == f"it needs {1 << 30} bytes of workspace and the handle has {WORKSPACE}"


def test_registry_names_are_unique_and_say_algorithm_pair_tile_stages_alignment():
    assert len({s.name for s in REGISTRY}) == len(REGISTRY)
    assert SCALE_KERNEL in REGISTRY and SCALE_KERNEL.role == "scale"
    for spec in GEMM_KERNELS:
        pair = f"{spec.pair[0]}{spec.pair[1]}".lower()
        bm, bn, bk = spec.tile
        assert f"_{pair}_" in spec.name and f"{bm}x{bn}x{bk}" in spec.name
        c_align = getattr(spec.config, "c_align", 0)  # a narrower class of C follows: a16c4
        assert spec.name.endswith(f"_{spec.stages}s_a{spec.align}" + (f"c{c_align}" if c_align else ""))
        assert "fast" not in spec.name


@pytest.mark.parametrize("spec", [s for s in REGISTRY], ids=lambda s: s.name)
def test_every_spec_is_complete(spec):
    threads = spec.block[0] * spec.block[1] * spec.block[2]
    assert spec.launch_bounds is None or spec.launch_bounds[0] == threads
    assert spec.role in ("gemm", "scale") or spec.role
    grid = spec.grid(300, 200, 100)
    assert len(grid) == 3 and all(isinstance(g, int) and g >= 1 for g in grid)
    assert spec.align in (4, 8, 16) and spec.min_cc >= (5, 0)


def test_the_alignment_classes_a_problem_allows():
    """The widest class of the tile kernels that can run a problem follows its pointers and
    leading dimensions; the choice is within what they allow."""
    for lda, a, expected in ((4096, ALIGNED, 16), (4098, ALIGNED, 8), (4097, ALIGNED, 4), (4096, ALIGNED + 8, 8)):
        p = problem(lda=lda, a=a)
        widest = max(s.align for s in GEMM_KERNELS if s.role == "gemm" and s.can_implement(p) is None)
        assert widest == expected, (lda, hex(a))
        choice = choose(p, H200_PROPS, WORKSPACE)
        assert choice.spec.can_implement(p) is None and choice.spec.align <= expected, (lda, hex(a), choice.spec.name)


def test_a_new_shape_class_is_logged_once_at_debug_with_its_variant(caplog):
    import logging

    import numpy as np
    from numba import cuda

    import sgblas

    a = cuda.to_device(np.ones(12, np.float32))
    c = cuda.to_device(np.zeros(6, np.float32))
    with sgblas.Handle() as h, caplog.at_level(logging.DEBUG, logger="sgblas"):
        for _ in range(3):
            assert sgblas.sgemm(h, "N", "N", 3, 2, 2, 1.0, a, 3, a, 2, 0.0, c, 3) == sgblas.Status.SUCCESS
    lines = [r.getMessage() for r in caplog.records if "new shape class" in r.getMessage()]
    assert len(lines) == 1 and "NN m=3 n=2 k=2" in lines[0] and " runs sgemm_" in lines[0], lines


def test_the_memo_keeps_leading_dimensions_the_cost_model_reads_apart():
    """lda and ldb beyond their alignment change the cost model's layout flags (4096 is of the
    slow kind, 4100 is not), so two problems of one alignment class with other leading
    dimensions get their own plans, each the choice for its own problem."""
    import sgblas
    from sgblas.dispatch import model
    from sgblas.dispatch.plan import plan_for

    with sgblas.Handle() as h:
        def plan(ld):
            return plan_for(h, "T", "N", 4096, 4096, 4096, True, ALIGNED + 4, ld, ALIGNED + 2**32 + 4, ld,
                            ALIGNED + 2**33 + 4, 4096)

        def choice(ld):
            p = problem(cc=h.cc, ta="T", tb="N", lda=ld, ldb=ld, ldc=4096, a=ALIGNED + 4, b=ALIGNED + 2**32 + 4,
                        c=ALIGNED + 2**33 + 4)
            assert bool(model.layout_flags(p) & model.SLOW_LD) == (ld == 4096)
            return choose(p, h.properties, h.workspace_bytes, quick=True)

        slow, fast = plan(4096), plan(4100)
        assert slow is not fast and plan(4096) is slow and plan(4100) is fast
        for ld, got in ((4096, slow), (4100, fast)):
            assert got.spec is choice(ld).spec


@pytest.mark.parametrize("programmatic", [False, True])
def test_every_launch_of_a_plan_goes_behind_the_kernel_ahead_where_the_device_allows(programmatic, monkeypatch):
    """On sm_90 with a CUDA 12.3+ driver every kernel of a plan (one launch, or the partials'
    kernel and the reduction) is launched with programmatic stream serialization; elsewhere
    plainly. The kernels' sm_90 builds wait for the grid ahead themselves."""
    from sgblas.dispatch import plan as plans
    from sgblas.kernels import reduce

    props = H200_PROPS._replace(programmatic_launch=programmatic)
    kernels = {s.name: f"loaded {s.name}" for s in REGISTRY}
    h = plan_handle(properties=props, _kernels=kernels, _stream=(None, 0, None), _context=0,
                    workspace_ptr=ALIGNED + 2**34)
    launched = []
    monkeypatch.setattr(plans, "launch", lambda kernel, grid, stream, args, after=False:
                        launched.append(("after" if after else "plain", kernel)))
    how = "after" if programmatic else "plain"
    split = next(s for s in GEMM_KERNELS if s.role == "splitk")
    tile = next(s for s in GEMM_KERNELS if s.role == "gemm")
    for spec, cut, want in ((split, cand.Split(4, 1024), [split.name, reduce.NAME]),
                            (split, cand.Split(1, 4096), [split.name]), (tile, None, [tile.name])):
        launched.clear()
        plan = plans.make_plan(h, spec, cut, 128, 8192, 4096, ALIGNED, 128)
        assert plan.after is programmatic
        plans.execute(h, plan, 128, 8192, 4096, 1.0, ALIGNED, 1, 128, ALIGNED, 1, 4096, 0.0, ALIGNED, 1, 128)
        assert launched == [(how, f"loaded {name}") for name in want]
    # explain says so where it happens, after what it says of the split.
    from sgblas.dispatch.plan import LAUNCH_NOTE

    for shape in ((128, 8192, 8192), (4096, 4096, 4096)):
        note = choose(problem(m=shape[0], n=shape[1], k=shape[2]), props, WORKSPACE).note
        assert (LAUNCH_NOTE in note) is programmatic and note.endswith(LAUNCH_NOTE) is programmatic, note


def test_a_plan_that_uses_the_workspace_waits_for_the_last_one_on_another_stream(monkeypatch):
    """Two calls through one handle on two streams must not use the workspace at once: a split
    plan on a new stream waits (an event) for the last workspace plan's stream; on the same
    stream, or for a plan that uses no workspace, nothing is added; nor while a stream is being
    captured (a capture cannot wait on work outside it). Its launches are enqueued under the
    handle's lock, so another thread's cannot fall between the partials and their reduction."""
    from sgblas.dispatch import plan as plans
    from sgblas.runtime import device

    kernels = {s.name: f"loaded {s.name}" for s in REGISTRY}
    h = plan_handle(properties=H200_PROPS, _kernels=kernels, _stream=(None, 0x10, "s10"), _context=0xC0,
                    workspace_ptr=ALIGNED + 2**34)
    lock = h._ws_order.lock
    log = []
    capturing = set()
    monkeypatch.setattr(plans, "launch", lambda kernel, grid, stream, args, after=False:
                        log.append(("launch", stream, kernel, lock.locked())))
    monkeypatch.setattr(device, "event_record", lambda ev, stream: log.append(("record", ev, stream)))
    monkeypatch.setattr(device, "stream_wait_event", lambda stream, ev: log.append(("wait", stream, ev)))
    monkeypatch.setattr(device, "stream_capturing", lambda stream: stream in capturing)
    monkeypatch.setattr(device, "current_context_handle", lambda: 0xC0)
    monkeypatch.setattr(device, "made_current", lambda ctx: contextlib.nullcontext(log.append(("current", ctx))))
    monkeypatch.setattr(device, "event_create", lambda: log.append(("create",)) or 0xE0)
    split = next(s for s in GEMM_KERNELS if s.role == "splitk")
    tile = next(s for s in GEMM_KERNELS if s.role == "gemm")
    split_plan = plans.make_plan(h, split, cand.Split(4, 1024), 128, 8192, 4096, ALIGNED, 128)
    tile_plan = plans.make_plan(h, tile, None, 128, 8192, 4096, ALIGNED, 128)
    assert split_plan.workspace and not tile_plan.workspace

    def call(plan, raw):
        h._stream = (None, raw, f"s{raw:x}")
        log.clear()
        plans.execute(h, plan, 128, 8192, 4096, 1.0, ALIGNED, 1, 128, ALIGNED, 1, 4096, 0.0, ALIGNED, 1, 128)
        return [entry[0] for entry in log]

    assert call(split_plan, 0x10) == ["launch", "launch"]  # the first: nothing to wait for
    assert all(entry[3] for entry in log)  # both launched under the lock
    assert call(split_plan, 0x10) == ["launch", "launch"]  # same stream: its order suffices
    assert call(tile_plan, 0x20) == ["launch"] and not log[0][3]  # no workspace: no lock, no wait
    # another stream: the event (made once, in the handle's context) orders it behind the last
    assert call(split_plan, 0x20) == ["current", "create", "record", "wait", "launch", "launch"]
    assert log[2:4] == [("record", 0xE0, 0x10), ("wait", 0x20, 0xE0)]
    assert call(split_plan, 0x10) == ["record", "wait", "launch", "launch"]
    capturing.add(0x10)
    assert call(split_plan, 0x10) == ["launch", "launch"]  # into a capture: no wait on outside work
    assert h._ws_order.last == 0x10 and not lock.locked()
    capturing.clear()

    def destroyed(ev, stream):
        raise DriverError("cuEventRecord", 400)

    monkeypatch.setattr(device, "event_record", destroyed)  # the last stream is gone: no wait, no failure
    assert call(split_plan, 0x30) == ["launch", "launch"] and h._ws_order.last == 0x30
    monkeypatch.setattr(device, "event_record", lambda ev, stream: log.append(("record", ev, stream)))

    # The per-thread default stream (2) is another stream in each thread: a call on it is marked
    # after its launches (no other thread could record on it), and a later call elsewhere, or on
    # another thread's default stream, waits for that mark.
    def in_thread(fn):
        out = []
        worker = threading.Thread(target=lambda: out.append(fn()))
        worker.start()
        worker.join()
        return out[0]

    assert call(split_plan, 2)[-3:] == ["launch", "launch", "record"]  # after 0x30: a record there first
    assert log[-1] == ("record", 0xE0, 2)
    assert in_thread(lambda: call(split_plan, 2)) == ["wait", "launch", "launch", "record"]
    assert call(split_plan, 0x30) == ["wait", "launch", "launch"]  # no record on another thread's stream
