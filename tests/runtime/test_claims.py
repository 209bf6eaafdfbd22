"""Sharing compiles between processes (``sgblas.runtime.claims``): one claimant per entry, dead
and silent claimants taken over, CPU slots shared by every process of a host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from sgblas.runtime import claims

NAME = "sgemm_x.sm_90.0123456789abcdef01234567.cubin"


def _claim_in_child(directory, name: str, then: str = "", start_at: float | None = None) -> subprocess.Popen:
    """A process that claims ``name`` (at ``start_at`` on the clock, if given), prints what it
    got as JSON, then runs ``then``."""
    code = textwrap.dedent(f"""
        import json, os, sys, time
        from sgblas.runtime import claims
        start_at = {start_at!r}
        if start_at is not None:
            while time.time() < start_at:
                pass
        got = claims.try_claim({str(directory)!r}, {name!r})
        print(json.dumps({{"won": isinstance(got, claims.Claim), "pid": os.getpid(),
                           "holder": None if isinstance(got, claims.Claim) else got.pid}}), flush=True)
        {then}
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_processes_racing_for_one_entry_leave_one_claimant(tmp_path):
    start = time.time() + 1.5  # every child is running by then
    children = [_claim_in_child(tmp_path, NAME, "time.sleep(2)", start_at=start) for _ in range(6)]
    results = [json.loads(child.stdout.readline()) for child in children]
    for child in children:
        child.wait(timeout=30)
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1, results
    assert all(r["holder"] == winners[0]["pid"] for r in results if not r["won"]), results


def test_a_claimant_killed_mid_compile_is_taken_over(tmp_path):
    child = _claim_in_child(tmp_path, NAME, "time.sleep(600)")
    assert json.loads(child.stdout.readline())["won"]
    holder = claims.try_claim(tmp_path, NAME)
    assert isinstance(holder, claims.Holder) and holder.pid == child.pid and holder.stale is None
    child.kill()
    child.wait(timeout=30)
    found = claims.holder(claims.claim_path(tmp_path, NAME))
    assert found.stale == f"process {child.pid} on this host has exited"
    claim = claims.try_claim(tmp_path, NAME)
    assert isinstance(claim, claims.Claim) and claim.record["pid"] == os.getpid()
    claim.release()
    assert not claims.claim_path(tmp_path, NAME).exists()


def _plant(directory, host: str, age_s: float) -> None:
    path = claims.claim_path(directory, NAME)
    path.write_text(json.dumps({"pid": 1, "host": host, "started": time.time() - age_s}))
    os.utime(path, (time.time() - age_s, time.time() - age_s))


def test_a_claim_from_another_host_is_trusted_while_its_heartbeat_is_fresh(tmp_path):
    _plant(tmp_path, "another-host.example", age_s=5)
    holder = claims.try_claim(tmp_path, NAME)
    assert isinstance(holder, claims.Holder) and holder.host == "another-host.example" and holder.stale is None
    assert "pid 1 on host another-host.example" in str(holder)


def test_a_stale_claim_from_another_host_is_taken_over(tmp_path):
    _plant(tmp_path, "another-host.example", age_s=claims.STALE_AFTER_S + 30)
    found = claims.holder(claims.claim_path(tmp_path, NAME))
    assert found.stale is not None and "heartbeat" in found.stale
    claim = claims.try_claim(tmp_path, NAME)
    assert isinstance(claim, claims.Claim)
    assert json.loads(claims.claim_path(tmp_path, NAME).read_text())["pid"] == os.getpid()
    assert [p.name for p in tmp_path.iterdir()] == [claims.claim_path(tmp_path, NAME).name]  # nothing left over


def test_a_heartbeat_keeps_a_claim_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.05)
    claim = claims.try_claim(tmp_path, NAME)
    old = time.time() - 1000
    os.utime(claim.path, (old, old))
    beat = claims.Heartbeat()
    beat.add(claim)
    time.sleep(0.3)
    beat.stop()
    assert time.time() - claim.path.stat().st_mtime < 5


def test_releasing_a_claim_someone_took_over_leaves_theirs(tmp_path):
    claim = claims.try_claim(tmp_path, NAME)
    claims.claim_path(tmp_path, NAME).write_text(json.dumps({"pid": 2, "host": "x", "started": 0}))
    claim.release()
    assert claims.claim_path(tmp_path, NAME).exists()


@pytest.mark.skipif(claims.fcntl is None, reason="no flock here")
def test_cpu_slots_are_shared_by_every_holder_on_a_host(tmp_path):
    first, second = claims.CpuSlots(tmp_path, 2), claims.CpuSlots(tmp_path, 2)
    assert sorted([first.acquire(), first.acquire()]) == [0, 1]
    assert first.acquire() is None and second.acquire() is None
    first.release(1)
    assert second.acquire() == 1
    first.release_all()
    second.release_all()
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from sgblas.runtime import claims
        slots = claims.CpuSlots({str(tmp_path)!r}, 2)
        print(slots.acquire(), slots.acquire(), slots.acquire())
    """)], capture_output=True, text=True, timeout=60)
    assert child.stdout.split() == ["0", "1", "None"], child.stdout + child.stderr


def test_fill_cache_waits_for_a_live_claimant_and_takes_over_when_it_dies(tmp_path, monkeypatch, caplog):
    """A variant another process claimed is left to it, with a message, until the claimant
    exits without writing the entry: then this process compiles it (a real compile, in a
    worker, of the smallest variant)."""
    import logging

    from sgblas.kernels.spec import by_name
    from sgblas.runtime import build
    from sgblas.runtime import cache as kernel_cache

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(cache))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")  # the workers compile for real
    spec, cc = by_name("scale_c_32x8"), (8, 0)
    name = kernel_cache.entry_file_name(spec.name, cc, build.cubin_key(build.variant_key(spec, cc)))
    child = _claim_in_child(cache, name, "time.sleep(3)")
    assert json.loads(child.stdout.readline())["won"]
    caplog.set_level(logging.INFO, logger="sgblas")
    t0 = time.monotonic()
    filled = build.fill_cache([spec], cc, announce=logging.INFO)
    child.wait(timeout=30)
    assert filled[spec.name][1] == "compiled in a worker" and filled[spec.name][0].path.parent == cache
    assert time.monotonic() - t0 > 2  # it waited for the claimant first
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"sgblas is waiting for scale_c_32x8: pid {child.pid} on host" in said
