"""The candidate plans of a problem: every way the registry's legal variants can run it.

A *candidate* is one variant with how it runs: a tile or packed variant in one launch, a
split-K or skinny variant with a number of K slices, or a tile variant's *tail plan* (its
whole waves, then the rest of C as sub-problems: :mod:`sgblas.dispatch.waves`). Each has a
name, which is how a user runs it (``sgemm(..., candidate=NAME)``), a lab times it and
``explain`` lists it:

- ``VARIANT``: one launch of a tile, packed or general variant;
- ``VARIANT/sS``: a split-K or skinny variant with K in ``S`` slices (a skinny ``/s1`` writes
  C itself, with no workspace);
- ``VARIANT/cS``: a split-K variant with K in ``S`` slices that add into C one after another
  (a *serial* split: no partials, one launch after zeroing a semaphore per output tile);
- ``VARIANT/tail``: a tile variant over its whole waves, the rest of C chosen for as problems
  of their own.

Legality of a variant is its spec's ``can_implement``; legality of a candidate adds what its
split needs (workspace, the grid's limits, slices no shorter than :data:`MIN_SPLIT_CHUNK`)
and the accuracy policy: from :data:`ACCURACY_SPLIT_K` on, no float32 sum in the candidate may
be longer than :data:`ACCURACY_CHUNK`, or than the shortest the workspace allows, and, where
the workspace holds few partials and the output few tiles, than :data:`ACCURACY_SERIAL_CHUNK`,
which a serial split reaches with no partials (:func:`accuracy_limit`; ``docs/design.md``,
"Split-K"), so that the error stays at or below cuBLAS's. That is a constraint on the candidates, not a ranking: which legal
candidate should run is the cost model's business (:mod:`sgblas.dispatch.model`).

The split counts tried are :data:`SPLIT_COUNTS` and the counts that fill whole waves of the
device's resident slots exactly; only the counts that give distinct slices are kept.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

from sgblas.dispatch import waves
from sgblas.kernels import skinny, splitk
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.sgemm_simt import TileConfig
from sgblas.kernels.spec import KernelSpec
from sgblas.runtime.device import DeviceProperties

__all__ = ["Split", "Candidate", "SPLIT_COUNTS", "MIN_SPLIT_CHUNK", "ACCURACY_SPLIT_K", "ACCURACY_CHUNK",
           "ACCURACY_MIN_CHUNK", "MAX_SPLITS", "occupancy", "slots", "ctas", "granule", "split_of",
           "split_counts", "split_refusal", "too_long", "enumerate_candidates", "longest_sum", "meets_accuracy",
           "accuracy_limit", "ACCURACY_SLACK", "parse_name", "ACCURACY_SERIAL_CHUNK", "serial_splits_of",
           "serial_refusal", "SERIAL_SPLITS_MAX", "ACCURACY_SERIAL_WAVES", "ACCURACY_SERIAL_PARTIALS"]

#: The least K a split-K slice keeps below :data:`ACCURACY_SPLIT_K`: four K steps of a slice
#: kernel. Whether a short slice pays for its partial's traffic and the reduction is the cost
#: model's to say; small products (sides of a few hundred) need slices this short to fill the
#: device at all (issue 43).
MIN_SPLIT_CHUNK: int = 64
#: From this K on, the accuracy policy holds: every float32 sum at most :data:`ACCURACY_CHUNK`
#: long where the workspace and :data:`MAX_SPLITS` allow a candidate that short, else at most
#: :data:`ACCURACY_SLACK` times the shortest they allow. At 8192, a third of 60 long-K products
#: had a larger error than cuBLAS's on an H100 once the 4 x 4 tiles filled the device with fewer
#: slices; slices of 157-224 stayed under it and of 269 and more did not (``docs/design.md``,
#: "Accuracy") ...
ACCURACY_SPLIT_K: int = 16384
ACCURACY_CHUNK: int = 256
ACCURACY_SLACK: float = 1.25
#: ... and slices may be as short as this (more partials, each sum shorter: the error of a split
#: sum grows with the square roots of the slice length and of the number of partials).
ACCURACY_MIN_CHUNK: int = 128
#: The most partials one call writes.
MAX_SPLITS: int = 128
#: From :data:`ACCURACY_SPLIT_K` on, no candidate's sum is longer than this where the partials
#: the workspace holds cannot make them shorter: a serial split (``VARIANT/cS``) reaches it with
#: no partials at all. cuBLAS PEDANTIC splits K serially itself where its partials do not fit;
#: the shortest slice it took over the 24 long-K products measured was 993 (1536 x 1536 x 32768,
#: ``docs/history/shape-classes.md``), so slices of at most 960 keep sgblas's sums no longer
#: than its there.
ACCURACY_SERIAL_CHUNK: int = 960
#: ... where the output has fewer 128 x 128 tiles than this many times the device's SMs (where
#: cuBLAS splits K at all: it split 1792 x 1792 x 16384, 196 such tiles on 132 SMs, 4 ways,
#: serially, and left 2048 x 2048 x 16384, 256, and larger outputs whole, as sgblas's unsplit and
#: tail plans do) and the workspace holds fewer than :data:`ACCURACY_SERIAL_PARTIALS` partials
#: of C (where the partials bind hard: cuBLAS split 1536 x 1536 x 16384 and x 32768, 3 partials
#: of sgblas's 32 MiB, serially too, into 7 and 33 slices). Elsewhere a serial split is weighed
#: on its speed alone: where the workspace holds more partials, the parallel splits' sums were
#: shorter than cuBLAS's (0.5-0.7 of its error) on the shapes measured, and the serial chain of
#: many slices costs time (512 x 512 x 65536: 82 slices took 22% longer than 32 partials on an H100).
ACCURACY_SERIAL_WAVES: float = 2.0
ACCURACY_SERIAL_PARTIALS: int = 4
#: The most slices of a serial split (the grid's y extent).
SERIAL_SPLITS_MAX: int = 65535
#: The split counts tried for every splitting variant, besides those that fill whole waves.
SPLIT_COUNTS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
#: Whole waves of resident slots for which an exactly filling split count is tried.
_WAVES_TRIED = 4


class Split(NamedTuple):
    """How a splitting variant runs a problem: ``splits`` CTAs along K per output tile, each
    over ``k_chunk`` of K; ``splits == 1`` writes C directly (no workspace, one launch).
    ``serial``: the slices add into C in turn (one int32 semaphore per output tile in the
    workspace) instead of writing partials that a reduction adds."""

    splits: int
    k_chunk: int
    serial: bool = False


class Candidate(NamedTuple):
    """One way to run a problem: ``spec`` with ``split`` (split-K and skinny variants) or as a
    tail plan (``tail``: the prefix of its grid and the rectangles of C left)."""

    spec: KernelSpec
    split: Split | None = None
    tail: waves.Tail | None = None

    @property
    def name(self) -> str:
        if self.tail is not None:
            return f"{self.spec.name}/tail"
        if self.split is not None:
            return f"{self.spec.name}/{'c' if self.split.serial else 's'}{self.split.splits}"
        return self.spec.name


@functools.cache
@functools.cache
def occupancy(spec: KernelSpec, props: DeviceProperties) -> int:
    """CTAs of ``spec`` one SM holds at once."""
    threads = spec.block[0] * spec.block[1] * spec.block[2]
    return max(1, min(spec.blocks_per_sm, props.max_threads_per_sm // threads, props.max_blocks_per_sm))


@functools.cache
def slots(spec: KernelSpec, props: DeviceProperties) -> int:
    """CTAs of ``spec`` the whole GPU holds at once."""
    return props.sm_count * occupancy(spec, props)


def ctas(spec: KernelSpec, m: int, n: int) -> int:
    """Output tiles of ``spec`` for an ``m`` x ``n`` C (one CTA each, per split)."""
    if spec.role == "skinny":
        return spec.grid(m, n, 0)[0]
    bm, bn, _ = spec.tile
    return -(-m // bm) * -(-n // bn)


@functools.cache
def granule(spec: KernelSpec) -> int:
    """The K a split is a whole number of (a slice kernel's BK; a skinny kernel's shared piece)."""
    return skinny.k_granule(spec.config) if spec.role == "skinny" else spec.tile[2]


def split_of(spec: KernelSpec, k: int, splits: int, serial: bool = False) -> Split:
    """``splits`` slices of K rounded up to ``spec``'s granule; then as many splits as that
    needs, so none is empty."""
    g = granule(spec)
    chunk = -(-k // max(1, splits))
    chunk = -(-chunk // g) * g
    return Split(-(-k // chunk), chunk, serial)


def split_counts(spec: KernelSpec, m: int, n: int, props: DeviceProperties) -> list[int]:
    """The split counts tried for ``spec``: :data:`SPLIT_COUNTS` and, for each of the first
    whole waves of its resident slots, the count whose CTAs fill it exactly."""
    return sorted({*SPLIT_COUNTS, *_filling(spec, m, n, props)})


def _filling(spec: KernelSpec, m: int, n: int, props: DeviceProperties) -> tuple[int, ...]:
    """The counts of :func:`split_counts` that fill whole waves, ascending (some may also be
    in :data:`SPLIT_COUNTS`)."""
    tiles, n_slots = ctas(spec, m, n), slots(spec, props)
    counts: tuple[int, ...] = ()
    for w in range(1, _WAVES_TRIED + 1):
        s = w * n_slots // tiles
        if 1 <= s <= MAX_SPLITS:
            counts += (s,)
    return counts


def longest_sum(c: Candidate, k: int) -> int:
    """The longest float32 sum ``c`` adds along K: its slice (the reduction adds the partials
    in short chains: :func:`sgblas.kernels.reduce.order`), else all of K."""
    return c.split.k_chunk if c.split is not None else k


def accuracy_limit(cands: Sequence[Candidate], p: GemmProblem, props: DeviceProperties,
                   workspace_bytes: int) -> int | None:
    """The longest float32 sum the accuracy policy lets a candidate of ``cands`` (all of
    ``p``'s) add: None below :data:`ACCURACY_SPLIT_K`; from it on :data:`ACCURACY_CHUNK` when
    some candidate other than a serial split keeps to it, else :data:`ACCURACY_SLACK` times the
    shortest any of those has (the most accurate the workspace allows, and those nearly as
    accurate), and no more than :data:`ACCURACY_SERIAL_CHUNK` when there is a serial split, the
    output has fewer 128 x 128 tiles than :data:`ACCURACY_SERIAL_WAVES` times the SMs and the
    workspace holds fewer than :data:`ACCURACY_SERIAL_PARTIALS` partials."""
    k = p.k
    if k < ACCURACY_SPLIT_K or not cands:
        return None
    shortest, serial = k, False
    for c in cands:
        if c.split is not None and c.split.serial:
            serial = True
        else:
            shortest = min(shortest, longest_sum(c, k))
    if shortest <= ACCURACY_CHUNK:
        return ACCURACY_CHUNK
    limit = int(ACCURACY_SLACK * shortest)
    if serial and -(-p.m // 128) * -(-p.n // 128) < ACCURACY_SERIAL_WAVES * props.sm_count \
            and workspace_bytes < ACCURACY_SERIAL_PARTIALS * splitk.partial_bytes(p.m, p.n):
        return min(limit, ACCURACY_SERIAL_CHUNK)
    return limit


def meets_accuracy(c: Candidate, k: int, limit: int | None = ACCURACY_CHUNK) -> bool:
    """Whether ``c`` keeps the accuracy policy with ``limit`` (:func:`accuracy_limit`; by
    default :data:`ACCURACY_CHUNK`): below :data:`ACCURACY_SPLIT_K` every candidate does."""
    return k < ACCURACY_SPLIT_K or limit is None or longest_sum(c, k) <= limit


def _limits(spec: KernelSpec, p: GemmProblem, workspace_bytes: int) -> tuple[int, int, int]:
    """``(least splits, least slice, most splits)`` of ``spec`` (split-K or skinny) for ``p``."""
    per = splitk.partial_bytes(p.m, p.n)
    by_workspace = workspace_bytes // per if per else MAX_SPLITS
    if spec.role == "skinny":
        return 1, granule(spec), min(MAX_SPLITS, by_workspace, 65535)
    shortest = ACCURACY_MIN_CHUNK if p.k >= ACCURACY_SPLIT_K else MIN_SPLIT_CHUNK
    return splitk.MIN_PARTIALS, shortest, min(MAX_SPLITS, by_workspace, 65535)


def serial_refusal(spec: KernelSpec, split: Split, p: GemmProblem, workspace_bytes: int) -> str | None:
    """None when ``spec`` may run ``p`` with the serial ``split``, else the sentence saying why
    not: a split-K variant, two slices or more (at most :data:`SERIAL_SPLITS_MAX`), none shorter
    than :data:`ACCURACY_MIN_CHUNK` (a slice's own loop is what a serial split cannot share),
    and a workspace that holds a semaphore per output tile."""
    if spec.role != "splitk":
        return f"{spec.name} cannot add its slices into C in turn: only the split-K slice kernels can"
    if split.splits < 2:
        return f"a serial split needs at least 2 slices, not {split.splits}"
    if split.splits > SERIAL_SPLITS_MAX:
        return f"{split.splits} slices are more than {SERIAL_SPLITS_MAX}, the most a serial split's grid holds"
    if split.k_chunk < ACCURACY_MIN_CHUNK:
        return f"slices of {split.k_chunk} of k={p.k} are shorter than {ACCURACY_MIN_CHUNK}, the least serial slice"
    need = splitk.semaphore_bytes(spec, p.m, p.n)
    if need > workspace_bytes:
        return f"its semaphores need {need} bytes of workspace and the handle has {workspace_bytes}"
    return None


def serial_splits_of(spec: KernelSpec, p: GemmProblem, props: DeviceProperties, workspace_bytes: int) -> list[Split]:
    """The serial splits weighed for split-K variant ``spec`` from :data:`ACCURACY_SPLIT_K` on:
    the fewest slices of at most :data:`ACCURACY_SERIAL_CHUNK` and the counts above it whose CTAs
    end the first two whole waves of the device's resident slots after it (a serial split exists
    for the accuracy policy, so longer slices are never weighed; one wave more or less is the cost
    model's to weigh). Empty below that K or when :func:`serial_refusal` refuses them."""
    if spec.role != "splitk" or p.k < ACCURACY_SPLIT_K:
        return []
    least = split_of(spec, p.k, -(-p.k // ACCURACY_SERIAL_CHUNK), True)
    while least.k_chunk > ACCURACY_SERIAL_CHUNK:  # the granule rounded the slices up past it
        least = split_of(spec, p.k, least.splits + 1, True)
    if serial_refusal(spec, least, p, workspace_bytes) is not None:
        return []
    tiles, n_slots = ctas(spec, p.m, p.n), slots(spec, props)
    found, wave = [least], -(-tiles * least.splits // n_slots)
    for w in (wave, wave + 1):
        split = split_of(spec, p.k, -(-w * n_slots // tiles), True)
        if split.splits > found[-1].splits and serial_refusal(spec, split, p, workspace_bytes) is None:
            found.append(split)
    return found


def split_refusal(spec: KernelSpec, split: Split, p: GemmProblem, workspace_bytes: int) -> str | None:
    """None when ``spec`` may run ``p`` with ``split``, else the sentence saying why not."""
    if split.serial:
        return serial_refusal(spec, split, p, workspace_bytes)
    lo, shortest, most = _limits(spec, p, workspace_bytes)
    if split.splits < lo:
        return f"{spec.name} writes at least {lo} partials; {split.splits} slice is not a split"
    if split.splits > 1 and split.k_chunk < shortest:
        return (f"slices of {split.k_chunk} of k={p.k} are shorter than {shortest}, the least slice "
                f"{'from' if p.k >= ACCURACY_SPLIT_K else 'below'} k={ACCURACY_SPLIT_K}")
    if split.splits > 1 and split.splits > most:
        if split.splits > MAX_SPLITS:
            return f"{split.splits} slices are more than {MAX_SPLITS}, the most partials one call writes"
        return (f"{split.splits} partials need {splitk.workspace_bytes(p.m, p.n, split.splits)} bytes of workspace "
                f"and the handle has {workspace_bytes}")
    return None


def splits_of(spec: KernelSpec, p: GemmProblem, props: DeviceProperties, workspace_bytes: int,
            shared: dict[tuple, list[Split]]) -> list[Split]:
    """The distinct splits ``spec`` (split-K or skinny) may run ``p`` with: those of
    :func:`split_counts` that :func:`split_refusal` accepts (its checks, inlined: this runs for
    every split count of every splitting variant when a shape is first planned). They follow
    from the variant's limits, granule and counts alone, which many of a problem's splitting
    variants share: ``shared`` keeps each list found for ``p`` by those (not to be changed)."""
    lo, shortest, most = _limits(spec, p, workspace_bytes)
    g, k = granule(spec), p.k
    if lo > 1 and k <= shortest:
        return []  # two slices of at least the shortest need more K
    if k <= g:  # every count gives one slice of one granule
        return [Split(1, g)] if lo <= 1 else []
    filling = _filling(spec, p.m, p.n, props)
    key = (lo, shortest, most, g, filling)
    found = shared.get(key)
    if found is not None:
        return found
    found = shared[key] = []
    last = 0
    # Repeated counts give the same split, which is skipped: no set is needed.
    for s in sorted((*SPLIT_COUNTS, *filling)):
        chunk = -(-k // s)
        chunk = -(-chunk // g) * g
        splits = -(-k // chunk)
        if splits > 1 and (chunk < shortest or splits > most):
            break  # the counts ascend: every later one has slices as short, or more of them
        # As the counts ascend, the slices shorten and grow in number: a split seen before is the last one.
        if splits != last and splits >= lo:
            last = splits
            found.append(Split(splits, chunk))
        if chunk == g:
            break  # slices of one granule: every later count gives them again
    return found


def enumerate_candidates(legal: Sequence[KernelSpec], p: GemmProblem, props: DeviceProperties,
                         workspace_bytes: int, rectangle: bool = False) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """``(candidates, passed)``: every candidate of the variants in ``legal`` (each of which
    :meth:`KernelSpec.can_implement` accepted for ``p``) that the handle's workspace, the
    grid's limits and the accuracy policy allow; and for each variant with none, ``(name,
    reason)``. ``rectangle``: ``p`` is a tail plan's rectangle (less than a wave: no tail plan
    of its own).

    When no candidate keeps the accuracy policy (a workspace too small for the partials), the
    others stay: the call still runs, and ``explain`` says why its sums are long.
    """
    out: list[Candidate] = []
    passed: list[tuple[str, str]] = []
    shared: dict[tuple, list[Split]] = {}
    m, n, k = p.m, p.n, p.k
    for spec in legal:
        role = spec.role
        if role == "splitk" or role == "skinny":
            splits = splits_of(spec, p, props, workspace_bytes, shared)
            for split in splits:
                out.append(Candidate(spec, split))
            serial = serial_splits_of(spec, p, props, workspace_bytes)
            for split in serial:
                out.append(Candidate(spec, split))
            if not splits and not serial:
                passed.append((spec.name, _no_split(spec, p, workspace_bytes)))
            continue
        need = spec.workspace(m, n, k)
        if need > workspace_bytes:
            passed.append((spec.name, f"it needs {need} bytes of workspace and the handle has {workspace_bytes}"))
            continue
        whole, raster = _one_launch(spec, props)
        out.append(whole)
        if raster is not None and not rectangle:
            bm, bn, group_m, n_slots = raster
            tail = waves.tail_of(m, n, bm, bn, group_m, n_slots)
            # The cut falls back to a column of its group; the rest must still be less than a wave.
            if tail is not None and ctas(spec, m, n) - tail.ctas < n_slots:
                out.append(Candidate(spec, None, tail))
    limit = accuracy_limit(out, p, props, workspace_bytes)
    if limit is not None:
        kept = [c for c in out if longest_sum(c, p.k) <= limit]
        for c in out:
            if longest_sum(c, p.k) > limit and all(c.spec is not d.spec for d in kept) \
                    and all(c.spec.name != name for name, _ in passed):
                passed.append((c.spec.name, too_long(c, p.k, limit)))
        out = kept
    return out, passed


@functools.cache
def _one_launch(spec: KernelSpec, props: DeviceProperties) -> tuple[Candidate, tuple[int, int, int, int] | None]:
    """``spec`` in one launch, the same candidate for every problem; and, where its grid is the
    SIMT generator's grouped raster (groups of ``group_m`` tile rows), which tail plans cut,
    ``(BM, BN, group_m, resident slots)`` (None for the others)."""
    if spec.role == "gemm" and isinstance(spec.config, TileConfig):
        return Candidate(spec), (spec.tile[0], spec.tile[1], spec.config.group_m, slots(spec, props))
    return Candidate(spec), None


def too_long(c: Candidate, k: int, limit: int = ACCURACY_CHUNK) -> str:
    """Why ``c`` breaks the accuracy policy's ``limit`` (:func:`accuracy_limit`)."""
    why = ("" if limit <= ACCURACY_CHUNK else
           ", the longest slice of a serial split where the workspace holds few partials"
           if limit == ACCURACY_SERIAL_CHUNK else
           f", {ACCURACY_SLACK} times the shortest that the workspace and the {MAX_SPLITS}-partial limit allow")
    return (f"it would add {longest_sum(c, k)} products in one float32 sum, and from k={ACCURACY_SPLIT_K} on "
            f"no sum may be longer than {limit}{why} (error no worse than cuBLAS's)")


def _no_split(spec: KernelSpec, p: GemmProblem, workspace_bytes: int) -> str:
    if spec.role == "splitk" and p.k // MIN_SPLIT_CHUNK < splitk.MIN_PARTIALS and p.k < ACCURACY_SPLIT_K:
        return (f"k={p.k} is too short to split: each of {splitk.MIN_PARTIALS} slices would keep less than "
                f"{MIN_SPLIT_CHUNK} of it")
    need = splitk.workspace_bytes(p.m, p.n, splitk.MIN_PARTIALS)
    return f"it needs {need} bytes of workspace for two partials and the handle has {workspace_bytes}"


def parse_name(name: str) -> tuple[str, int | None, bool, bool]:
    """``(variant name, splits or None, tail, serial)`` of a candidate name; raises ValueError
    with a sentence when the name is not of the form ``VARIANT``, ``VARIANT/sS``, ``VARIANT/cS``
    or ``VARIANT/tail``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"candidate={name!r} is not a candidate name (VARIANT, VARIANT/sS, VARIANT/cS or "
                         f"VARIANT/tail)")
    variant, sep, suffix = name.partition("/")
    if not sep:
        return variant, None, False, False
    if suffix == "tail":
        return variant, None, True, False
    if suffix[:1] in ("s", "c") and suffix[1:].isdigit() and int(suffix[1:]) >= 1:
        return variant, int(suffix[1:]), False, suffix[0] == "c"
    raise ValueError(f"candidate={name!r}: {suffix!r} is neither 'sS' nor 'cS' (a split count, S >= 1; c: the "
                     f"slices add into C in turn) nor 'tail'")
