"""Which legal variant should run: a ranking from the problem's shape, the device's own
properties (SM count and per-SM limits, read from the driver, never from constants tuned for
one GPU) and the handle's workspace.

The rule, for the GEMM variants that :meth:`~sgblas.kernels.spec.KernelSpec.can_implement`
accepts:

1. Variants whose least workspace need exceeds the handle's workspace are not chosen.
2. A skinny kernel (m or n at most 16: the product is bound by memory bandwidth) ranks first,
   when its large operand has at least :data:`SKINNY_MIN_BYTES`.
   It splits K so that its CTAs fill the GPU's resident slots (see 5; for the axpy loop,
   :data:`AXPY_CTAS_PER_SM` a SM), as far as k and the workspace allow; one split needs no
   workspace.
3. Otherwise the generated tile kernels rank before the general kernel, which is the backstop:
   it runs only what no specialised kernel may run. Among the tile kernels, a variant's *fill*
   is its CTAs (output tiles) over the CTAs the GPU holds at once (SMs x CTAs per SM, the
   smaller of the launch bound and the device's thread and block limits). The largest tile
   whose fill reaches :data:`FILL_TARGET` wins: large tiles reuse each loaded element more.
   When no tile fills the GPU, the one with the highest fill wins, the one with more CTAs on a
   tie: more resident warps hide more latency. Between thread tiles of one CTA tile, the
   8 x 8 one wins: since NN's and NT's 8 x 8 rows took the snaking order with B's tile origin
   in a view, they run every K at least as fast as the 16 x 8 ones, which serve only the
   accuracy splits of rule 4. Between alignment classes of one tile, the widest accesses win.
   Between rows that differ only in the lanes sharing a k-major column (``kq``: TN's 4-byte
   class has 4 and 8), 8 lanes win when every k-major operand's leading dimension is a multiple
   of 32 or within one of a power of two (:func:`eight_lanes_pay`), 4 lanes otherwise.
   3a. TN's 4-byte class: the 128x64 row replaces the 128x128 one when both fill the GPU, the
   k-major leading dimensions are not of rule 3's 8-lane kind, and the 128x128 tiles' whole
   waves are less than :data:`WAVE_SWAP_BELOW` full where the 128x64 tiles' are at least
   :data:`WAVE_SWAP_FROM` full (:func:`smaller_tile_pays`).
   3b. A packed variant (16-byte kernel on copies of A and B in the workspace) replaces that
   choice when it is a 4-byte row of the packed variant's tile whose tiles fill the GPU, the
   k-major leading dimensions are of that same slow kind (:func:`packing_pays`), and the
   workspace holds the copies (rule 1).
4. Split-K (a slice kernel over tiles x splits CTAs, then the fixed-order reduction) replaces
   that choice when the chosen tile's fill is below :data:`FILL_TARGET` (few output tiles)
   and K is long enough that every split keeps at least :data:`MIN_SPLIT_CHUNK` of it; and,
   for accuracy, when k >= :data:`ACCURACY_SPLIT_K` even if the tiles fill the GPU, with
   splits of at most :data:`ACCURACY_CHUNK` (each split is summed on its own and the partials
   added in order, which shortens every float32 sum: ``docs/design.md``, "Split-K"). Among
   the slice kernels, the largest tile that can split the problem runs it, with the 8 x 8
   thread tile when the split is for few tiles; when it is for accuracy, the larger thread tile
   (fewer threads, more registers each) when each slice's K is at least :data:`WIDE_THREAD_K`,
   or at least :data:`WIDE_THREAD_ONE_WAVE_K` with all CTAs in one wave
   (:func:`wide_thread_tile_pays`), the 8 x 8 one otherwise.
5. The number of splits S: the largest S whose CTAs (tiles x S) fit in one wave of the GPU's
   resident slots, when that wave is at least :data:`WAVE_TARGET` full; else the smallest S
   whose whole waves are that full (CTAs over waves x slots), else the S with the fullest
   waves; at most :data:`MAX_SPLITS`, at most what the workspace holds, and each split
   a whole number of the kernel's K granule. From :data:`ACCURACY_SPLIT_K` on, a few-tile
   problem takes as many splits as those limits allow, with slices down to
   :data:`ACCURACY_MIN_CHUNK`, even past one wave: for accuracy. The reduction's order is
   fixed (:func:`sgblas.kernels.reduce.order`), so the bits depend on S: the same shape on the
   same device and workspace size gives the same bits.

6. A tail plan (:mod:`sgblas.dispatch.waves`) replaces a tile kernel's one launch when its
   CTAs' whole waves are less than :data:`TAIL_WAVE_BELOW` full (:func:`tail_pays`): the tile
   kernel runs the CTAs of its whole waves, and the tiles its last wave would hold, at most two
   rectangles of C, run as sub-problems whose K is split (rules 4 and 5; a skinny kernel when
   a rectangle is that thin). The plan module takes it only when every rectangle is so run.
   The 4-byte slice kernels split only these rectangles: other few-tile problems of the
   4-byte class keep the tile kernels, as before those slice kernels existed.

``docs/design.md`` gives the measurements behind the thresholds.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from sgblas.dispatch import candidates as _candidates
from sgblas.dispatch import waves
from sgblas.dispatch.candidates import Split, occupancy, slots, split_of
from sgblas.dispatch.candidates import granule as _granule
from sgblas.dispatch.candidates import ctas as _ctas
from sgblas.kernels import skinny, splitk
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import KernelSpec
from sgblas.runtime.device import DeviceProperties

__all__ = ["FILL_TARGET", "WAVE_TARGET", "SKINNY_MIN_BYTES", "MIN_SPLIT_CHUNK", "MAX_SPLITS",
           "ACCURACY_SPLIT_K", "ACCURACY_CHUNK", "ACCURACY_MIN_CHUNK", "AXPY_CTAS_PER_SM",
           "WIDE_THREAD_K", "WIDE_THREAD_ONE_WAVE_K", "Ranked", "Split", "occupancy", "slots", "ctas",
           "fill", "rank", "split_of", "split_for", "pinned_split", "is_backstop", "thread_tile",
           "wide_thread_tile_pays", "eight_lanes_pay", "packing_pays", "smaller_tile_pays", "WAVE_SWAP_BELOW",
           "WAVE_SWAP_FROM", "TAIL_WAVE_BELOW", "tail_pays", "NARROW_SPLIT_NOTE", "UNTIMED_NOTE", "untimed_by_rules"]

#: The share of the GPU's resident CTA slots a tile must fill with its first wave to be
#: preferred over a smaller tile, and below which a problem has "few output tiles".
FILL_TARGET: float = 0.75
#: How full the waves of a split grid must be for the fewest such splits to be taken.
WAVE_TARGET: float = 0.9
#: The least K a split-K slice keeps: below it the partials' traffic and the second launch
#: cost more than the fuller GPU gains (docs/tuning.md, "Run E": 1024^3 gains from slices of
#: 256).
#: The rules' least slice (the candidates' is shorter: :data:`sgblas.dispatch.candidates.MIN_SPLIT_CHUNK`).
MIN_SPLIT_CHUNK: int = 256
#: Rule 3a: the 128x128 tiles' whole-wave fill below which, and the 128x64 tiles' from which,
#: TN's 4-byte class takes the 128x64 row (:func:`smaller_tile_pays`; docs/tuning.md, run S).
WAVE_SWAP_BELOW: float = 0.8
WAVE_SWAP_FROM: float = 0.94
#: Rule 6: the whole-wave fill of a tile kernel's CTAs below which a tail plan splits off the
#: tiles of its last wave (:func:`tail_pays`; docs/tuning.md, run T).
TAIL_WAVE_BELOW: float = 0.94
#: Why a 4-byte slice kernel is passed over outside a tail plan's rectangles.
NARROW_SPLIT_NOTE: str = ("the 4-byte slice kernels split only a tail plan's rectangles (rule 6); a few-tile "
                          "problem in the 4-byte class keeps the tile kernels, as it ran before they existed "
                          "(its split was not timed against them)")
#: Why the rules pass over a row that came after them: a skinny row of a narrower alignment
#: class than 16 bytes, or a CTA tile smaller than 128 x 64.
UNTIMED_NOTE: str = ("the rules take the rows they were tuned with only (the 16-byte skinny rows, CTA tiles from "
                     "128 x 64): the later rows are weighed by the cost model, which chooses on a device with a "
                     "calibration")
#: The least size of a skinny product's large operand, in bytes, for the skinny kernels: below
#: it a call is bound by launch latency rather than bandwidth, and the tile kernels run it.
SKINNY_MIN_BYTES: int = 4 * 1024 * 1024
#: The most partials one call writes.
MAX_SPLITS: int = _candidates.MAX_SPLITS
#: CTAs per SM that a skinny kernel's axpy loop splits K to fill, below the 3 its launch bound
#: lets reside (which sets its registers): a third CTA per SM makes the loop move less, for a
#: cause not yet established (16x16384x4096 NT: 52% of the copy rate at 3 per SM, 61% at 2 or
#: 1; 3x8192x8192 NT: 76% against 84%: docs/tuning.md, "Run I"). The dot loop fills its
#: launch bound's 4.
AXPY_CTAS_PER_SM: int = 2
#: From this K on, a problem whose tiles fill the GPU is still split (when the workspace
#: holds the partials), for accuracy ...
ACCURACY_SPLIT_K: int = _candidates.ACCURACY_SPLIT_K
#: ... into slices of at most this much K.
ACCURACY_CHUNK: int = _candidates.ACCURACY_CHUNK
#: From ACCURACY_SPLIT_K on, a few-tile problem takes the most splits MAX_SPLITS and the
#: workspace allow, with slices down to this long: the error of a split sum grows with the
#: square roots of the slice length and of the number of partials, so up to sqrt(k) splits
#: lower it (docs/tuning.md, "Accuracy").
ACCURACY_MIN_CHUNK: int = _candidates.ACCURACY_MIN_CHUNK
#: The K per slice from which an accuracy split's slice kernel with the larger thread tile
#: (half the threads, each with twice the accumulators) runs faster than the 8 x 8 one: its K
#: loop does fewer fragment loads per FMA, but half as many resident warps hide latency, which
#: costs most in the prologue and epilogue of a short K (docs/tuning.md, "Run G", rung 14; the
#: unsplit rows take the 8 x 8 thread tile at every K since rung 30) ...
WIDE_THREAD_K: int = 4096
#: ... or from this K per CTA when all CTAs run in one wave (no second wave starts behind
#: the slow epilogues of the first).
WIDE_THREAD_ONE_WAVE_K: int = 2048


class Ranked(NamedTuple):
    """A legal variant in rank order; ``reason`` says why it was not chosen (None for the
    first); ``split`` how it would run (for split-K and skinny variants)."""

    spec: KernelSpec
    reason: str | None
    split: Split | None = None


def is_backstop(spec: KernelSpec) -> bool:
    """The general kernels: they accept every FP32 problem and rank last."""
    return spec.name.startswith("sgemm_general_")


def thread_tile(spec: KernelSpec) -> tuple[int, int]:
    """The accumulators one thread of ``spec`` owns, rows x columns (8 x 8 for kernels that are
    not generated tile kernels)."""
    cfg = spec.config
    return (cfg.TM, cfg.TN) if hasattr(cfg, "TM") else (8, 8)


def wide_thread_tile_pays(k_per_cta: int, n_ctas: int, n_slots: int) -> bool:
    """Whether a slice kernel with a thread tile larger than 8 x 8 runs an accuracy split
    faster: each CTA's K is at least :data:`WIDE_THREAD_K`, or at least
    :data:`WIDE_THREAD_ONE_WAVE_K` and all ``n_ctas`` fit in the ``n_slots`` the GPU holds at
    once."""
    return k_per_cta >= WIDE_THREAD_K or (k_per_cta >= WIDE_THREAD_ONE_WAVE_K and n_ctas <= n_slots)


def eight_lanes_pay(p: GemmProblem) -> bool:
    """Whether a 4-byte k-major copy with 8 lanes a column (32 bytes) runs ``p`` faster than one
    with 4 (16 bytes, half the column passes): when the leading dimension of every k-major
    operand (A in T, B in N) is a multiple of 32 floats or within one of a power of two. An
    empirical rule, from run O's sweep of TN's two 4-byte rows over 21 leading dimensions under
    both toolchains (docs/tuning.md, rung 36): there the 8-lane row ran 1-5% faster, elsewhere
    the 4-lane row 1-6% faster. Where a warp's 8 columns start at one offset of their 128-byte
    lines (multiples of 32) the 4-lane copy is slowest; but 4129 and 6145, one past a multiple
    of 32 that is not a power of two, ran faster with 4 lanes, so the rule is not that offset
    alone. One below a power of two (2047, 4095, 8191) goes with one past it (rung 47)."""
    lds = [ld for ld, kmajor in ((p.lda, p.transa == "T"), (p.ldb, p.transb == "N")) if kmajor]
    return bool(lds) and all(ld % 32 == 0 or _next_to_power_of_two(ld) for ld in lds)


def _next_to_power_of_two(ld: int) -> bool:
    """Whether ``ld`` (above 1) is one more or one less than a power of two."""
    return ld > 1 and ((ld - 1) & (ld - 2) == 0 or (ld + 1) & ld == 0)


def smaller_tile_pays(large: KernelSpec, small: KernelSpec, p: GemmProblem, props: DeviceProperties) -> bool:
    """Whether ``small``, TN's 4-byte 128x64 row, runs ``p`` faster than ``large``, the 128x128
    row rule 3 chose, because of how the tiles fall into waves: the 128x128 tiles' whole waves
    are less than :data:`WAVE_SWAP_BELOW` full (a last wave mostly idle) and the 128x64 tiles'
    at least :data:`WAVE_SWAP_FROM`, at k-major leading dimensions that are not of the 8-lane
    kind (:func:`eight_lanes_pay`). Per flop the 128x64 row is slower, so only a large
    difference in the waves pays. Measured in TN's 4-byte class only (docs/tuning.md, rung 45):
    the 128x64 row won where the 128x128 waves were about three-quarters full and lost where
    they were nearly full; NN's and TT's 128x64 rows lost at 5000^3, where TN's came out even."""
    return ((p.transa, p.transb) == ("T", "N") and large.role == small.role == "gemm"
            and large.align == small.align == 4 and large.tile[:2] == (128, 128) and small.tile[:2] == (128, 64)
            and not eight_lanes_pay(p)
            and _wave_fill(ctas(large, p), slots(large, props)) < WAVE_SWAP_BELOW
            and _wave_fill(ctas(small, p), slots(small, props)) >= WAVE_SWAP_FROM)


def tail_pays(spec: KernelSpec, p: GemmProblem, props: DeviceProperties) -> waves.Tail | None:
    """The tail plan of ``p`` on ``spec``, a tile kernel that rule 3 chose, when its last wave
    would leave the GPU idle enough to pay for it; else None.

    ``spec``'s CTAs take ``w`` whole waves of the slots the GPU holds; when they fill less than
    :data:`TAIL_WAVE_BELOW` of them, the last wave runs as long as a full one with most slots
    idle, and splitting its tiles' K fills them (docs/tuning.md, run T, rung 46, measured the
    gain against the share of slots left idle). Only the 1-launch tile kernels: a packed
    variant's workspace holds its copies, and a split's CTAs fill their waves already."""
    if spec.role != "gemm" or is_backstop(spec) or spec.config is None:
        return None
    n_slots = slots(spec, props)
    if _wave_fill(ctas(spec, p), n_slots) >= TAIL_WAVE_BELOW:
        return None
    tail = waves.tail_of(p.m, p.n, spec.tile[0], spec.tile[1], spec.config.group_m, n_slots)
    # The cut falls back to a column of its group; the rest must still be less than a wave.
    return tail if tail is not None and ctas(spec, p) - tail.ctas < n_slots else None


def packing_pays(packed: KernelSpec, best: KernelSpec | None, p: GemmProblem, props: DeviceProperties) -> str | None:
    """None when ``packed`` (a packed variant that ``p``'s workspace holds) should run ``p``
    instead of ``best``, the tile kernel the rules above chose; else the sentence saying why not.

    It pays where the 4-byte class is slow and its copies cost little: ``best`` is a 4-byte row
    (no wider class can run the caller's arrays) of the packed variant's CTA tile, whose output
    tiles fill at least :data:`FILL_TARGET` of the GPU (few tiles would leave the copies' cost
    unshared), and every k-major leading dimension is a multiple of 32 or within one of a power
    of two (:func:`eight_lanes_pay`: there TN's 4-byte rows ran slowest, rung 36). At other leading
    dimensions the 4-byte rows ran as fast as the copies and the 16-byte kernel together, or
    faster, from 2000^3 to 8192^3 (docs/tuning.md, rung 43)."""
    if best is None:
        return "no tile kernel runs this problem"
    if best.align != 4 or best.tile != packed.tile:
        return (f"{best.name} reads the caller's arrays with {best.align}-byte accesses"
                if best.align != 4 else
                f"{best.name}'s {best.tile[0]}x{best.tile[1]} tile fills the GPU or its waves better than the "
                f"packed {packed.tile[0]}x{packed.tile[1]} one, for which the copies would not pay")
    if fill(best, p, props) < FILL_TARGET:
        return (f"the {ctas(best, p)} output tiles fill {fill(best, p, props):.0%} of the {props.sm_count} SMs' "
                f"resident slots, too few to pay for copying A and B")
    if not eight_lanes_pay(p):
        return (f"{best.name} runs the k-major leading dimensions lda={p.lda}, ldb={p.ldb} at speed (they are not "
                f"all multiples of 32 or within one of a power of two): copying A and B would cost as much as it saves")
    return None


def _lanes(spec: KernelSpec) -> int | None:
    """The lanes a k-major column of a tile kernel's register-staged copy (None for kernels
    without a tile config)."""
    return getattr(spec.config, "KQB", None)


def _lanes_order(spec: KernelSpec, eight: bool) -> int:
    """0 for a tile kernel whose k-major copies have the lanes a column that
    :func:`eight_lanes_pay` wants (``eight``: 8, else fewer), 1 for the others. It decides only
    between rows that tie on every earlier key: TN's two 4-byte rows."""
    lanes = _lanes(spec)
    return 0 if lanes is None or (lanes == 8) == eight else 1


def _eight_by_eight_first(spec: KernelSpec) -> int:
    """0 for the 8 x 8 thread tile, 1 for the larger ones."""
    return 0 if thread_tile(spec) == (8, 8) else 1


def _slice_thread_order(spec: KernelSpec, split: Split, p: GemmProblem, props: DeviceProperties,
                        few_tiles: bool) -> int:
    """0 for the thread tile the rule wants for a slice kernel, 1 for the others: the 8 x 8 one
    when K is split because the output tiles leave the GPU idle; for an accuracy split of
    tiles that fill it, from each slice's K (:func:`wide_thread_tile_pays`)."""
    order = _eight_by_eight_first(spec)
    if few_tiles or not wide_thread_tile_pays(split.k_chunk, ctas(spec, p) * split.splits, slots(spec, props)):
        return order
    return 1 - order


def ctas(spec: KernelSpec, p: GemmProblem) -> int:
    """Output tiles of ``spec`` for ``p`` (one CTA each, per split)."""
    return _ctas(spec, p.m, p.n)


def fill(spec: KernelSpec, p: GemmProblem, props: DeviceProperties) -> float:
    """CTAs of ``spec`` for ``p`` over the CTAs the GPU holds at once."""
    return ctas(spec, p) / slots(spec, props)


def _wave_fill(n_ctas: int, n_slots: int) -> float:
    """CTAs over the slots of the whole waves they take."""
    return n_ctas / (-(-n_ctas // n_slots) * n_slots)


def split_for(spec: KernelSpec, p: GemmProblem, props: DeviceProperties, workspace_bytes: int,
              accuracy: bool = False) -> tuple[Split | None, str]:
    """How ``spec`` (a split-K or skinny variant) would split ``p``: ``(Split, note)``, or
    ``(None, reason)`` when a split-K variant has no split worth making.

    ``accuracy``: split into slices of at most :data:`ACCURACY_CHUNK` for a shorter float32 sum
    rather than to fill the GPU.
    """
    granule = _granule(spec)
    per = splitk.partial_bytes(p.m, p.n)
    by_workspace = workspace_bytes // per if per else MAX_SPLITS
    if spec.role == "skinny":
        cap = min(MAX_SPLITS, max(1, p.k // granule), by_workspace, 65535)
        lo = 1
    else:
        shortest = ACCURACY_MIN_CHUNK if p.k >= ACCURACY_SPLIT_K else MIN_SPLIT_CHUNK
        cap = min(MAX_SPLITS, p.k // shortest, by_workspace, 65535)
        lo = splitk.MIN_PARTIALS
        if p.k // MIN_SPLIT_CHUNK < lo:
            return None, (f"k={p.k} is too short to split: each of {lo} slices would keep less than "
                          f"{MIN_SPLIT_CHUNK} of it")
        if by_workspace < lo:
            need = splitk.workspace_bytes(p.m, p.n, lo)
            return None, f"it needs {need} bytes of workspace and the handle has {workspace_bytes}"
    if cap < lo:
        cap = lo
    tiles, resident = ctas(spec, p), slots(spec, props)
    n_slots = resident
    if spec.role == "skinny" and spec.config.mode == "axpy":
        n_slots = min(resident, props.sm_count * AXPY_CTAS_PER_SM)
    if accuracy:
        want = max(lo, -(-p.k // ACCURACY_CHUNK))
        if want > cap:
            return None, (f"k={p.k} would need {want} slices of at most {ACCURACY_CHUNK} for accuracy, "
                          f"and the workspace of {workspace_bytes} bytes holds {by_workspace} partials")
        s = split_of(spec, p.k, want)
        return s, f"{s.splits} slices of K for a shorter float32 sum (k >= {ACCURACY_SPLIT_K})"
    # One wave if that fills the slots well (fewest partials for the fill), else the fewest
    # splits whose whole waves are full enough, else the fullest waves (a slice kernel takes
    # the most splits among equally full ones: more CTAs resident at once hide more latency).
    one_wave = [s for s in range(lo, cap + 1) if tiles * s <= n_slots]
    best = max(one_wave, key=lambda s: (tiles * s, -s)) if one_wave else lo
    if _wave_fill(tiles * best, n_slots) < WAVE_TARGET:
        best_fill = -1.0
        tie = 1e-9 if spec.role == "skinny" else -1e-9
        for s in range(lo, cap + 1):
            f = _wave_fill(tiles * s, n_slots)
            if f >= WAVE_TARGET:
                best = s
                break
            if f > best_fill + tie:
                best, best_fill = s, max(f, best_fill)
    if spec.role != "skinny" and p.k >= ACCURACY_SPLIT_K:
        best = max(best, cap)
    s = split_of(spec, p.k, best)
    f = _wave_fill(tiles * s.splits, n_slots)
    per_sm = f" ({n_slots // props.sm_count} a SM for the axpy loop)" if n_slots < resident else ""
    return s, (f"{tiles} tiles x {s.splits} slices of K = {tiles * s.splits} CTAs fill {f:.0%} of the "
               f"{props.sm_count} SMs' resident slots{per_sm} in whole waves")


def pinned_split(spec: KernelSpec, p: GemmProblem, props: DeviceProperties, workspace_bytes: int) -> Split | None:
    """The split a split-K or skinny variant runs ``p`` with when it is pinned (chosen by the
    caller, not by :func:`rank`): the heuristic's, or for a split-K variant whose split the
    heuristic would not make, two slices (the second empty when k fits in one granule, which
    stores zeros); None when the workspace does not hold two partials."""
    split, _ = split_for(spec, p, props, workspace_bytes)
    if split is not None or spec.role != "splitk":
        return split
    if workspace_bytes < splitk.workspace_bytes(p.m, p.n, splitk.MIN_PARTIALS):
        return None
    granule = _granule(spec)
    chunk = -(-(-(-p.k // splitk.MIN_PARTIALS)) // granule) * granule
    return Split(splitk.MIN_PARTIALS, chunk)


def untimed_by_rules(spec: KernelSpec) -> bool:
    """Whether ``spec`` came after the rules were last tuned (:data:`UNTIMED_NOTE`)."""
    return (spec.role == "skinny" and spec.align != 16) or (
        spec.role in ("gemm", "splitk") and spec.config is not None and spec.tile[0] * spec.tile[1] < 128 * 64)


def rank(legal: Sequence[KernelSpec], p: GemmProblem, props: DeviceProperties,
         workspace_bytes: int, rectangle: bool = False) -> list[Ranked]:
    """``legal`` (GEMM variants that can run ``p``) in the order the heuristic prefers them,
    each with the reason it was passed over. ``rectangle``: ``p`` is a tail plan's rectangle
    (rule 6), which the 4-byte slice kernels may split; other problems leave them out
    (:data:`NARROW_SPLIT_NOTE`)."""
    fits, short = [], []
    for spec in legal:
        need = spec.workspace(p.m, p.n, p.k)
        (fits if need <= workspace_bytes else short).append((spec, need))
    # Both sides small: the kernel with the larger other side has more CTAs.
    # The rows that came after these rules were last tuned: only the cost model weighs them
    # (UNTIMED_NOTE).
    untimed = [s for s, _ in fits if untimed_by_rules(s)]
    fits = [(s, need) for s, need in fits if not untimed_by_rules(s)]
    skinnies = sorted((s for s, _ in fits if s.role == "skinny" and s.align == 16),
                      key=lambda s: -(p.n if s.config.small == "m" else p.m))
    large = 4 * max(p.m, p.n) * p.k
    small_reasons = {}
    if skinnies and large < SKINNY_MIN_BYTES:
        small_reasons = {s.name: (f"the large operand has only {large} bytes (below {SKINNY_MIN_BYTES}): "
                                  f"launch latency, not bandwidth, bounds this product") for s in skinnies}
        skinnies = []
    splits, narrow = [], []
    for s, _ in fits:
        if s.role == "splitk":
            (splits if rectangle or s.align > 4 else narrow).append(s)
    general = [s for s, _ in fits if is_backstop(s)]
    tiled = [s for s, _ in fits if s.role == "gemm" and not is_backstop(s)]
    small_skinny = [s for s, _ in fits if s.role == "skinny" and s.align == 16]
    packed = [s for s, _ in fits if s.role == "packed"]

    # The tile kernels, by how well their output tiles fill the GPU; then, between rows of one
    # CTA tile, the 8 x 8 thread tile, the widest accesses and the lanes a k-major column.
    eight = eight_lanes_pay(p)

    def within(s: KernelSpec) -> tuple[int, int, int]:
        return (_eight_by_eight_first(s), -s.align, _lanes_order(s, eight))

    filled = [s for s in tiled if fill(s, p, props) >= FILL_TARGET]
    if filled:
        order = sorted(filled, key=lambda s: (-(s.tile[0] * s.tile[1]), *within(s)))
        order += sorted((s for s in tiled if s not in filled), key=lambda s: (-fill(s, p, props), *within(s)))
        # Rule 3a: a smaller tile whose waves are much fuller.
        swap = [s for s in filled if smaller_tile_pays(order[0], s, p, props)]
        if swap:
            order.remove(swap[0])
            order.insert(0, swap[0])
    else:
        order = sorted(tiled, key=lambda s: (-fill(s, p, props), -ctas(s, p), *within(s)))
    best_tile = order[0] if order else None
    # A packed variant replaces the tile kernel when the caller's arrays confine it to the
    # 4-byte class at leading dimensions where that class runs slowly (rule 3b).
    packed_reasons: dict[str, str] = {}
    for spec in packed:
        why = packing_pays(spec, order[0] if order else None, p, props) if spec is packed[0] else \
            f"{packed[0].name} packs this problem already"
        if why is None:
            order.insert(0, spec)
            best_tile = spec
        else:
            packed_reasons[spec.name] = why

    out: list[Ranked] = []
    chosen: tuple[KernelSpec, Split, str] | None = None
    if skinnies:
        spec = skinnies[0]
        split, note = split_for(spec, p, props, workspace_bytes)
        chosen = (spec, split, note)
        out.append(Ranked(spec, None, split))
        for other in skinnies[1:]:
            out.append(Ranked(other, f"{spec.name} also streams this skinny product", None))
        why = (f"{spec.name} streams the large operand once: {'m' if spec.config.small == 'm' else 'n'}="
               f"{p.m if spec.config.small == 'm' else p.n} is at most {skinny.MP}, so the product is bound "
               f"by memory bandwidth")
        for spec2 in splits + narrow + order + packed + general + untimed:
            out.append(Ranked(spec2, why, None))
        return out + _short(short, workspace_bytes)

    # Split-K: few output tiles and a long K, or a very long K for accuracy.
    split_reasons: dict[str, str] = {}
    few_tiles = best_tile is None or fill(best_tile, p, props) < FILL_TARGET
    offers: list[tuple[KernelSpec, Split | None, str]] = []
    for spec in splits:
        if few_tiles:
            split, note = split_for(spec, p, props, workspace_bytes)
            # A split as full as the tiles is still taken: its waves hold more CTAs at once,
            # which hide more latency (docs/tuning.md, "Run E": 1536^3 TN).
            if split is not None and best_tile is not None and \
                    _wave_fill(ctas(spec, p) * split.splits, slots(spec, props)) < fill(best_tile, p, props) - 1e-9:
                split, note = None, (f"splitting K fills the GPU less than {best_tile.name}'s "
                                     f"{ctas(best_tile, p)} CTAs do")
        elif p.k >= ACCURACY_SPLIT_K:
            split, note = split_for(spec, p, props, workspace_bytes, accuracy=True)
        else:
            split, note = None, (f"{best_tile.name}'s {ctas(best_tile, p)} output tiles already fill "
                                 f"{fill(best_tile, p, props):.0%} of the {props.sm_count} SMs' resident slots, "
                                 f"and k={p.k} is below {ACCURACY_SPLIT_K}, where K is split for accuracy")
        offers.append((spec, split, note))
    # The largest tile that splits the problem; between thread tiles, the one the rule wants
    # for each slice's K; then the widest accesses.
    offers.sort(key=lambda o: (o[1] is None, -(o[0].tile[0] * o[0].tile[1]),
                               _slice_thread_order(o[0], o[1], p, props, few_tiles)
                               if o[1] is not None else 0, -o[0].align))
    for spec, split, note in offers:
        if split is not None and chosen is None:
            chosen = (spec, split, note)
        else:
            split_reasons[spec.name] = note if split is None else _split_taken(spec, split, chosen[0])

    if chosen is not None:
        spec, split, note = chosen
        out.append(Ranked(spec, None, split))
        for other in order:
            out.append(Ranked(other, f"{spec.name} splits K instead: {note}; its own {ctas(other, p)} CTAs "
                                     f"fill {fill(other, p, props):.0%}" if few_tiles else
                              f"{spec.name} splits K instead: {note}"))
    else:
        for spec in order:
            if spec is best_tile:
                out.append(Ranked(spec, None))
            else:
                out.append(Ranked(spec, _why_not(spec, best_tile, p, props)))
    for spec in splits:
        if spec is not (chosen[0] if chosen else None):
            out.append(Ranked(spec, split_reasons.get(spec.name, "another variant was chosen")))
    for spec in narrow:
        out.append(Ranked(spec, NARROW_SPLIT_NOTE))
    for spec in small_skinny:
        out.append(Ranked(spec, small_reasons[spec.name]))
    for spec in untimed:
        out.append(Ranked(spec, UNTIMED_NOTE))
    for spec in packed:
        if spec.name in packed_reasons:
            out.append(Ranked(spec, packed_reasons[spec.name]))
    first = out[0].spec if out else None
    for spec in general:
        if first is None:
            out.append(Ranked(spec, None))
            first = spec
        else:
            out.append(Ranked(spec, f"the general kernel is the backstop; {first.name} can run this problem"))
    return out + _short(short, workspace_bytes)


def _other_thread_tile(spec: KernelSpec, best: KernelSpec) -> bool:
    """Whether ``spec`` and ``best`` share a CTA tile and differ in the thread tile."""
    return spec.tile[:2] == best.tile[:2] and thread_tile(spec) != thread_tile(best)


def _split_taken(spec: KernelSpec, split: Split, taken: KernelSpec) -> str:
    if _other_thread_tile(spec, taken):
        tm, tn = thread_tile(taken)
        return (f"{taken.name} splits K already: its {tm} x {tn} thread tile runs slices of "
                f"{split.k_chunk} of K in {split.splits} slices faster")
    return f"{taken.name} splits K already"


def _short(short: list, workspace_bytes: int) -> list[Ranked]:
    return [Ranked(spec, f"it needs {need} bytes of workspace and the handle has {workspace_bytes}")
            for spec, need in short]


def _why_not(spec: KernelSpec, best: KernelSpec, p: GemmProblem, props: DeviceProperties) -> str:
    mine, theirs = fill(spec, p, props), fill(best, p, props)
    if _other_thread_tile(spec, best):
        tm, tn = thread_tile(best)
        return (f"{best.name}'s {tm} x {tn} thread tile runs this CTA tile at least as fast at every K "
                f"when K is not split (the larger thread tile serves accuracy splits of a long K)")
    if best.role == "packed":
        return (f"{best.name} multiplies 16-byte aligned copies of A and B in the handle's workspace: the "
                f"{spec.align}-byte class runs TN slowly at k-major leading dimensions that are all multiples of "
                f"32 or within one of a power of two (lda={p.lda}, ldb={p.ldb})")
    if smaller_tile_pays(spec, best, p, props):
        return (f"its {ctas(spec, p)} CTAs fill {_wave_fill(ctas(spec, p), slots(spec, props)):.0%} of their whole "
                f"waves on {props.sm_count} SMs, {best.name}'s {ctas(best, p)} fill "
                f"{_wave_fill(ctas(best, p), slots(best, props)):.0%} of theirs (TN's 4-byte class)")
    lanes = _lanes(best)
    if spec.tile == best.tile and spec.align == best.align and lanes != _lanes(spec):
        which = "are" if lanes == 8 else "are not all"
        return (f"{best.name} copies each k-major column with {lanes} lanes, faster when the k-major "
                f"leading dimensions (lda={p.lda}, ldb={p.ldb}) {which} multiples of 32 or within one of a power of two")
    if theirs >= FILL_TARGET and mine >= FILL_TARGET:
        return (f"{best.name}'s larger {best.tile[0]}x{best.tile[1]} tile also fills the GPU "
                f"({ctas(best, p)} CTAs for {props.sm_count} SMs)")
    return (f"its {ctas(spec, p)} CTAs fill {mine:.0%} of the {props.sm_count} SMs' resident slots, "
            f"{best.name}'s {ctas(best, p)} fill {theirs:.0%}")
