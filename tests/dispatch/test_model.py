"""The cost model and the choice by predicted time (no GPU, no kernel run).

The rates here are made up (the defaults, one variant made faster): these tests check the
model's arithmetic and the dispatcher's argmin, pruning and naming, not the H200's figures,
which ``python -m perf.calibrate`` measures and ``python -m perf.regret`` judges.
"""

from __future__ import annotations

import json
import logging
import random

import pytest

from sgblas.dispatch import candidates as cand
from sgblas.dispatch import model, plan
from sgblas.kernels.spec import GEMM_KERNELS, REGISTRY, by_name
from sgblas.runtime.device import DeviceProperties

from helpers import ALIGNED, WORKSPACE, problem

H200 = DeviceProperties(132, 2048, 32, 65536, 233472, True, 1_980_000, 2_619_000, 6144)
CC = (9, 0)


def _rates(faster: str | None = None, factor: float = 3.0, slow_ld: float | None = None) -> dict[str, list[float]]:
    rates = {s.name: list(model.default_rates(s, CC, H200))[:len(model.RATE_FIELDS)] for s in REGISTRY}
    if slow_ld is not None:  # fits put some variants' factor below 1 (faster at those layouts)
        for r in rates.values():
            r[model.RATE_FIELDS.index("slow_ld")] = slow_ld
    if faster is not None:
        rates[faster][0] *= factor  # flops
        rates[faster][3] *= factor  # bandwidth
    return rates


@pytest.fixture
def calibrated(monkeypatch, tmp_path):
    """Install a calibration file for the H200's key; returns a function that writes one."""

    def install(rates: dict[str, list[float]], launch_s: float = 3e-6, fill: float = 0.0) -> None:
        path = tmp_path / "calibration.json"
        path.write_text(json.dumps({"format": 1, "devices": {
            "sm_90/132/6144b": {"launch_s": launch_s, "fill": fill, "rates": rates, "source": {"note": "synthetic"}}}}))
        monkeypatch.setattr(model, "load_calibrations", lambda: model.__dict__["_read"](str(path)))
        model._calibration.cache_clear()

    monkeypatch.setitem(model.__dict__, "_read", model.load_calibrations.__wrapped__)
    yield install
    model._calibration.cache_clear()


def _random_problems(count: int, seed: int):
    rng = random.Random(seed)
    for _ in range(count):
        m, n, k = (max(1, int(10 ** rng.uniform(0, 4.2))) for _ in range(3))
        ta, tb = rng.choice("NT"), rng.choice("NT")
        offset, pad = rng.choice([(0, 0), (4, 0), (0, 1), (0, 32)])
        yield problem(ta=ta, tb=tb, m=m, n=n, k=k, a=ALIGNED + offset, c=ALIGNED + 2**33 + offset,
                      lda=(m if ta == "N" else k) + pad, ldb=(k if tb == "N" else n) + pad, ldc=m + pad)


@pytest.fixture
def uncalibrated(monkeypatch):
    """No calibration for any device, whatever ``calibration.json`` holds."""
    monkeypatch.setattr(model, "load_calibrations", lambda: {})
    model._calibration.cache_clear()
    yield
    model._calibration.cache_clear()


def test_an_uncalibrated_device_is_chosen_for_by_default_rates_and_explain_says_so_once(uncalibrated, caplog):
    model._WARNED.discard("sm_90/132/6144b")
    p = problem(m=1000, n=1000, k=1000)
    with caplog.at_level(logging.WARNING, logger="sgblas"):
        quick = plan.choose(p, H200, WORKSPACE, quick=True)
        assert not caplog.records  # a call's path says nothing
        full = plan.choose(p, H200, WORKSPACE)
        plan.choose(p, H200, WORKSPACE)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "sgblas has no cost-model calibration for sm_90/132/6144b"]
    cal = model.calibration_for(CC, H200, warn=False)
    assert not cal.calibrated and cal.rates == {s.name: model.default_rates(s, CC, H200) for s in REGISTRY}
    assert (quick.spec, quick.split, quick.candidate) == (full.spec, full.split, full.candidate)
    assert full.ranking[0] == (full.candidate, full.predicted_s) and full.predicted_s > 0
    assert quick.predicted_s == pytest.approx(full.predicted_s)


def test_a_tail_plans_note_names_its_rectangles(calibrated):
    """Where the least predicted candidate is a tail plan, explain says what its whole waves
    run and how each rectangle runs, and a call's plan runs the same rectangles."""
    calibrated(_rates())
    seen = 0
    for pair in ("NN", "NT", "TN", "TT"):
        for side in (5000, 2100, 3000):
            p = problem(ta=pair[0], tb=pair[1], m=side, n=side, k=side)
            c = plan.choose(p, H200, WORKSPACE)
            if not c.candidate.endswith("/tail"):
                continue
            seen += 1
            assert c.tail_ctas > 0 and c.tail and f"runs the first {c.tail_ctas}" in c.note, c.note
            for (row0, col0, rows, cols), sub in c.tail:
                assert f"{rows}x{cols} at ({row0}, {col0}) by {sub.spec.name}" in c.note, c.note
            quick = plan.choose(p, H200, WORKSPACE, quick=True)
            assert [(r, s.spec, s.split) for r, s in quick.tail] == [(r, s.spec, s.split) for r, s in c.tail]
    assert seen, "no tail plan was the least predicted candidate"


def test_the_choice_is_the_candidate_of_least_predicted_time(calibrated):
    faster = "sgemm_simt_nn_128x64x16_2s_a16"
    calibrated(_rates(faster))
    c = plan.choose(problem(m=4096, n=4096, k=4096), H200, WORKSPACE)
    assert c.spec.name == faster and c.candidate.startswith(faster)
    assert c.ranking[0] == (c.candidate, c.predicted_s)
    assert [t for _, t in c.ranking] == sorted(t for _, t in c.ranking)
    assert all("predicted" in why or "wider alignment class" in why
               for name, why in c.passed_over if name.startswith("sgemm_simt_nn"))


@pytest.mark.parametrize("pair", ["NN", "TT"])
def test_a_narrower_alignment_twin_is_ranked_but_not_weighed_where_its_wider_twin_is_legal(calibrated, pair):
    """A variant whose twin of a wider alignment class is legal is not chosen, even where it is
    predicted fastest: explain ranks it and says why, and it still runs by name."""
    narrow = f"sgemm_simt_{pair.lower()}_128x128x16_2s_a4"
    wide = narrow.replace("_a4", "_a16")
    calibrated(_rates(narrow, factor=10.0))
    p = problem(ta=pair[0], tb=pair[1], m=4096, n=4096, k=4096)
    assert by_name(narrow).can_implement(p) is None and by_name(wide).can_implement(p) is None
    c = plan.choose(p, H200, WORKSPACE)
    quick = plan.choose(p, H200, WORKSPACE, quick=True)
    assert c.ranking[0][0] == narrow and c.spec.name != narrow and quick.candidate == c.candidate
    assert "can run this problem and is weighed in its place" in dict(c.passed_over)[narrow]
    assert plan.find_candidate(p, H200, WORKSPACE, narrow).spec.name == narrow
    odd = problem(ta=pair[0], tb=pair[1], m=4095, n=4096, k=4096, lda=4097 if pair[0] == "N" else 4096)
    assert by_name(wide).can_implement(odd) is not None  # no wider twin: the narrow one is weighed
    assert plan.choose(odd, H200, WORKSPACE).spec.name == narrow


@pytest.mark.parametrize("slow_ld, fill", [(None, 0.0), (0.5, 0.0), (None, 2.0)])
def test_quick_and_full_choices_agree_and_the_bounds_hold(calibrated, slow_ld, fill):
    """Pruning by lower bounds on a call's path must not change the choice, whichever way a
    slow leading dimension's factor goes, in either form of the model."""
    calibrated(_rates(slow_ld=slow_ld), fill=fill)
    cal = model.calibration_for(CC, H200)
    assert cal.calibrated
    for p in _random_problems(120, seed=7):
        full, quick = plan.choose(p, H200, WORKSPACE), plan.choose(p, H200, WORKSPACE, quick=True)
        assert (quick.candidate, quick.split) == (full.candidate, full.split), p
        assert quick.predicted_s == pytest.approx(full.predicted_s)
        legal = [s for s in GEMM_KERNELS if s.pair == (p.transa, p.transb) and s.can_implement(p) is None]
        found, _ = cand.enumerate_candidates(legal, p, H200, WORKSPACE)
        floor = model.Floor(p, H200, cal, legal)
        timed = dict(full.ranking)
        for c in found:
            assert floor.lower_bound(c) <= timed[c.name] * (1 + 1e-12), (p, c.name)
            if c.split is not None:  # a splitting variant is skipped whole by its bound
                assert floor.variant_bound(c.spec) <= timed[c.name] * (1 + 1e-12), (p, c.name)


def test_every_launch_costs_its_gap_and_more_k_costs_more(calibrated):
    calibrated(_rates(), launch_s=5e-6)
    cal = model.calibration_for(CC, H200)
    tile = next(s for s in GEMM_KERNELS if s.role == "gemm" and s.pair == ("N", "N") and s.align == 16)
    split = next(s for s in GEMM_KERNELS if s.role == "splitk" and s.pair == ("N", "N"))
    for k in (16, 256, 4096):
        p, longer = problem(m=512, n=512, k=k), problem(m=512, n=512, k=2 * k)
        one = model.predict(cand.Candidate(tile), p, H200, cal)
        assert 5e-6 < one < model.predict(cand.Candidate(tile), longer, H200, cal)
    s2 = model.predict(cand.Candidate(split, cand.Split(2, 2048)), problem(m=512, n=512, k=4096), H200, cal)
    assert s2 > 2 * 5e-6


def test_a_soft_fill_slows_a_partial_round_and_leaves_a_full_one():
    """With a ``fill`` exponent, r CTAs of an SM that holds ``occ`` run at ``g(r) / g(occ)`` of
    its rate, ``g(r) = (1 + (r * lone) ** -q) ** (-1 / q)``: rising with r, below 1 short of a
    full SM where the hard minimum ``min(1, r * lone)`` has reached it, and a full SM is the same
    in both forms."""
    hard = model.Rates(flops=1e12, lone=0.4, cta_s=0.0, bandwidth=1e15, slow_ld=1.0, c_bandwidth=1e15,
                       c_unaligned=1.0, start_s=0.0, cta_bandwidth=1e15)
    soft = hard._replace(fill=2.0)
    occ, cta_flops = 6, 1e9

    def seconds(r, per_sm):
        return model.launch_seconds(r, 1, occ, per_sm, cta_flops, 0.0, 0.0, 0)

    shares = []
    for per_sm in range(1, occ):
        if per_sm * 0.4 >= 1.0:
            assert seconds(soft, per_sm) > seconds(hard, per_sm) == pytest.approx(per_sm * cta_flops / 1e12)
        g = (1 + (per_sm * 0.4) ** -2) ** -0.5 / (1 + (occ * 0.4) ** -2) ** -0.5
        assert seconds(soft, per_sm) == pytest.approx(per_sm * cta_flops / (1e12 * g))
        shares.append(per_sm * cta_flops / 1e12 / seconds(soft, per_sm))
    assert shares == sorted(shares) and shares[-1] < 1.0
    assert seconds(soft, occ) == seconds(hard, occ) == pytest.approx(occ * cta_flops / 1e12)
    assert seconds(soft, 2 * occ) == seconds(hard, 2 * occ)


def test_bandwidth_and_streaming_add_in_quadrature():
    """Equal bandwidth and per-CTA streaming times make sqrt(2) of either, not the larger."""
    r = model.Rates(flops=1e15, lone=1.0, cta_s=0.0, bandwidth=1e12, slow_ld=1.0, c_bandwidth=1e15,
                    c_unaligned=1.0, start_s=0.0, cta_bandwidth=1e10)
    # 100 CTAs on 100 SMs, one round: 1e6 bytes at 1e12 B/s, and 1e4 bytes per CTA at 1e10 B/s
    t = model.launch_seconds(r, 100, 1, 100, 0.0, 1e6, 0.0, 0)
    assert t == pytest.approx(2 ** 0.5 * 1e-6)


def test_a_tile_multiplies_whole_k_steps_and_the_reduction_whole_ctas(calibrated):
    rates = _rates()
    tile = next(s for s in GEMM_KERNELS if s.role == "gemm" and s.pair == ("N", "N") and s.align == 16)
    bk = tile.tile[2]
    rates[tile.name][3] = rates[tile.name][5] = rates[tile.name][8] = 1e18  # bytes free: compute rules
    calibrated(rates)
    cal = model.calibration_for(CC, H200)
    at = {k: model.predict(cand.Candidate(tile), problem(m=4096, n=4096, k=k), H200, cal) for k in (1, bk, bk + 1)}
    assert at[1] == pytest.approx(at[bk]) and at[bk + 1] > 1.5 * at[bk]
    # One reduction CTA (256 threads of 4 rows) for 8 rows as for 1024: its threads sum their
    # partials one after another, so the few rows cost as much per partial.
    few, full = (model._reduce_seconds(cal, H200, m, 1, 64, 0) for m in (8, 1024))
    assert few == pytest.approx(full, rel=0.05)
    assert model._reduce_seconds(cal, H200, 8, 1, 128, 0) > few


@pytest.mark.parametrize("ta,tb,lda,ldb,c,ldc,flags", [
    ("N", "N", 1000, 1000, 0, 1000, model.C_UNALIGNED),     # ldc not a multiple of 32
    ("N", "N", 1000, 4096, 0, 4096, model.SLOW_LD),         # B k-major at a power of two
    ("N", "T", 4096, 4096, 0, 4096, 0),                     # no k-major operand
    ("T", "N", 4095, 1001, 64, 4096, model.SLOW_LD | model.C_UNALIGNED),
    ("T", "T", 1001, 4096, 0, 1024, 0),
])
def test_layout_flags(ta, tb, lda, ldb, c, ldc, flags):
    p = problem(ta=ta, tb=tb, m=1000, n=1000, k=1000, lda=lda, ldb=ldb, ldc=ldc, c=ALIGNED + c)
    assert model.layout_flags(p) == flags


def test_a_calibration_is_keyed_by_compute_capability_and_sm_count(calibrated):
    rates = _rates()
    rates["no_longer_in_the_registry"] = [1.0] * len(model.RATE_FIELDS)
    calibrated(rates)
    assert model.calibration_for(CC, H200).calibrated
    assert not model.calibration_for(CC, H200._replace(sm_count=114), warn=False).calibrated
    assert not model.calibration_for((8, 0), H200, warn=False).calibrated
    assert "no_longer_in_the_registry" not in model.calibration_for(CC, H200).rates


def test_an_unknown_calibration_format_is_refused(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"format": 2, "devices": {}}))
    with pytest.raises(ValueError, match="format 2"):
        model.load_calibrations.__wrapped__(str(path))
    assert model.load_calibrations.__wrapped__(str(tmp_path / "absent.json")) == {}


def test_by_the_model_every_other_variant_gets_a_sentence(calibrated):
    calibrated(_rates())
    for p in _random_problems(40, seed=11):
        c = plan.choose(p, H200, WORKSPACE)
        named = [name for name, _ in c.refused + c.passed_over]
        assert sorted(named) == sorted(s.name for s in GEMM_KERNELS if s is not c.spec), p
        assert all(isinstance(r, str) and len(r) > 20 for _, r in c.refused + c.passed_over)


def test_a_variant_missing_from_an_entry_takes_a_sibling_devices_rates(monkeypatch, tmp_path):
    """A row calibrated on one device of a compute capability and SM count (an H100) but not yet
    on another (an H200): the other's rates for it are the first's as they are; other families
    are not consulted, and the entry's own rates stay as they are. The entry's form of the model
    (its ``fill``) holds for all of them, the sibling's own form aside."""
    names = [s.name for s in REGISTRY]
    own, missing = names[:3], names[3]
    base = [4e11, 0.5, 1e-6, 3e12, 1.1, 2e12, 1.3, 2e-6, 1e11]
    sibling = {n: [v * (1 + i) for v in base] for i, n in enumerate(own + [missing])}
    ratios = [2.0, 1.0, 0.5, 3.0, 1.0, 1.5, 1.0, 0.25, 1.0]
    entry = {n: [v * f for v, f in zip(sibling[n], ratios)] for n in own}
    stranger = {missing: [1.0] * 9, **{n: [1.0] * 9 for n in own}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"format": 1, "devices": {
        "sm_90/132/6144b": {"launch_s": 3e-6, "fill": 2.0, "rates": entry},
        "sm_90/132/5120b": {"launch_s": 3e-6, "rates": sibling},
        "sm_90/114/5120b": {"launch_s": 3e-6, "rates": stranger}}}))
    monkeypatch.setattr(model, "load_calibrations", lambda: json.loads(path.read_text())["devices"])
    model._calibration.cache_clear()
    try:
        cal = model.calibration_for(CC, H200)
        assert cal.source["transferred"] == {missing: "sm_90/132/5120b"}
        assert list(cal.rates[missing]) == pytest.approx(sibling[missing] + [2.0])
        assert list(cal.rates[own[0]]) == pytest.approx(entry[own[0]] + [2.0])
        assert all(n not in cal.source["transferred"] for n in names[4:])
        assert cal.rates[names[4]] == model.default_rates(by_name(names[4]), CC, H200)._replace(fill=2.0)
    finally:
        model._calibration.cache_clear()


@pytest.mark.parametrize("m, n, k", [(1536, 1536, 16384), (297, 1185, 89209), (512, 512, 65536), (3000, 300, 40000)])
def test_serial_splits_are_bounded_predicted_and_chosen_alike(calibrated, m, n, k):
    """Long K: serial splits are candidates; each one's lower bounds hold, it reads no
    reduction's rates, its chain link costs more than the hand-off, and the call's quick choice
    is the full one."""
    calibrated(_rates(), launch_s=5e-6)
    cal = model.calibration_for(CC, H200)
    p = problem(m=m, n=n, k=k)
    legal = [s for s in GEMM_KERNELS if s.pair == ("N", "N") and s.can_implement(p) is None]
    found, _ = cand.enumerate_candidates(legal, p, H200, WORKSPACE)
    serial = [c for c in found if c.split is not None and c.split.serial]
    assert serial and all(c.name.split("/")[1].startswith("c") for c in serial)
    floor = model.Floor(p, H200, cal, legal)
    full, quick = plan.choose(p, H200, WORKSPACE), plan.choose(p, H200, WORKSPACE, quick=True)
    assert (quick.candidate, quick.split) == (full.candidate, full.split)
    timed = dict(full.ranking)
    for c in serial:
        assert floor.lower_bound(c) <= timed[c.name] * (1 + 1e-12), c.name
        assert floor.variant_bound(c.spec) <= timed[c.name] * (1 + 1e-12), c.name
        assert calibrate_dependencies(c) == (c.spec.name,)  # no reduction's rates
        r = cal.rates[c.spec.name]
        bm, bn, _ = c.spec.tile
        assert model.serial_step(r, 2.0 * bm * bn) > model.SERIAL_HANDOFF_S


def calibrate_dependencies(c):
    from perf.calibrate import dependencies

    return dependencies(c)
