"""From a validated call to launches: choosing the variant, the plan memo, and ``execute``.

A :class:`Plan` is what a call of one *shape class* launches: the chosen candidate
(:mod:`sgblas.dispatch.candidates`), its variant loaded for the handle's device, and its grid;
for a split-K or skinny variant that splits K, also the split (``splits`` slices of
``k_chunk``), the reduction kernel and its grid. The shape class is everything legality and
the choice may read: transpose pair, m, n, k, whether A and B are read at all (k and alpha
nonzero), the pointers of A and B mod 16 and of C mod 128, lda and ldb whole and ldc mod 32
(what the cost model reads of them: its layout flags, :func:`sgblas.dispatch.model.layout_flags`;
a tail plan's rectangles start at offsets of A and B that follow lda and ldb).
Plans are memoised per device, math mode and workspace size, which is all of a handle a plan
depends on: the handles that share those (``gemm`` makes one per stream) share one memo, so a
repeated shape costs one dictionary lookup, also on a new handle, and setting a handle's
workspace moves it to the memo of its new size. A candidate run by name
(``sgemm(..., candidate=NAME)``: :func:`plan_named`) is memoised there too, under its name.

:func:`execute` is the only place that launches: the BLAS call, ``gemm``, the fast checks and
the documented validation all end here, with the same plan for the same shape class. A plan
is one launch, or, when it splits K, two on the handle's stream: the partial products into
the handle's workspace, then the fixed-order reduction into C; a packed variant's is three:
the copies of A and B into the workspace, then the GEMM from them. Nothing in between waits or
allocates, so a split call can be captured in a CUDA graph like any other.

The workspace belongs to the handle: calls that split K or pack use the same bytes, ordered by the
handle's stream. Two such calls on one handle may only overlap if the caller runs them on
different streams (``set_stream`` between calls, or one handle shared by threads that give
it different streams) without ordering those streams, which is the caller's race, as with
``cublasSetWorkspace``; ``sgblas.gemm`` keeps one handle per stream for that reason.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, NamedTuple

from sgblas.dispatch import candidates as _cand
from sgblas.dispatch import waves
from sgblas.dispatch import model as _model
from sgblas.dispatch.candidates import Split
from sgblas.enums import MathMode
from sgblas.kernels import pack as _pack
from sgblas.kernels import packed as _packed
from sgblas.kernels import reduce as _reduce
from sgblas.kernels import splitk as _splitk
from sgblas.kernels import spec as registry
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import KernelSpec
from sgblas.runtime import device as _device
from sgblas.runtime.driver import DriverError
from sgblas.runtime.launch import LoadedKernel, launch, zero_int32

__all__ = ["Plan", "Choice", "WorkspaceOrder", "choose", "plan_for", "plan_named", "pinned_split", "find_candidate", "execute", "memo_for", "forget_plans", "PLAN_CACHE_SIZE"]

#: ``logging.getLogger("sgblas")``: DEBUG when a handle meets a shape class for the first time,
#: with the variant chosen for it. Every later call of that class runs the same plan, so this
#: is the per-call choice too, and a call that finds its plan logs nothing: with logging off
#: a call pays no logging cost at all.
log = logging.getLogger("sgblas")

#: Shape classes a memo remembers before it starts over.
PLAN_CACHE_SIZE = 4096

_MEMOS: dict[tuple, dict] = {}


def memo_for(device: int, math_mode: Any, workspace_bytes: int) -> dict:
    """The plan memo shared by handles of ``device``, ``math_mode`` and ``workspace_bytes``."""
    return _MEMOS.setdefault((device, math_mode, workspace_bytes), {})


def forget_plans() -> None:
    """Empty every shared memo (after the registry, the rates or a device's properties changed:
    tests)."""
    for memo in list(_MEMOS.values()):
        memo.clear()


class Choice(NamedTuple):
    """The variant chosen for a problem, and for every other variant why it was not:
    ``(name, reason)`` pairs, refusals (it cannot run) before rankings (it should not).
    ``split`` is how a split-K or skinny variant runs it (None for the others); ``note`` a
    sentence on the choice ("" when there is nothing to add)."""

    spec: KernelSpec | None
    refused: tuple[tuple[str, str], ...]
    passed_over: tuple[tuple[str, str], ...]
    split: Split | None = None
    note: str = ""
    #: A tail plan (:mod:`sgblas.dispatch.waves`): ``spec`` runs the first ``tail_ctas`` CTAs of
    #: its grid, and each ``((row0, col0, rows, cols), Choice)`` the rectangle of C they leave out.
    tail: tuple[tuple[tuple[int, int, int, int], "Choice"], ...] = ()
    tail_ctas: int = 0
    #: The chosen candidate's name (:mod:`sgblas.dispatch.candidates`), its predicted time in
    #: seconds (None when not predicted), and, for ``explain``, every candidate with its
    #: predicted time, fastest first.
    candidate: str = ""
    predicted_s: float | None = None
    ranking: tuple[tuple[str, float], ...] = ()


class Plan(NamedTuple):
    """What one shape class launches: ``kernel`` over ``grid``; ``role`` as the spec's.

    When K is split (``splits > 1``), ``kernel`` writes the partials into the workspace
    (``ldw`` rows per column) and ``reduce`` over ``reduce_grid`` adds them into C; or, when
    ``serial``, its slices add into C in turn, ordered by semaphores at the workspace's start;
    ``c_vec`` says whether the reduction may access C with 16-byte vectors. For a packed variant
    ``pack`` copies A and B into the workspace first, ``copies`` holding ``(rows, cols, ldd,
    grid)`` of A's copy and of B's (B's follows A's in the workspace). A tail plan's ``grid``
    is its whole waves, and ``tail`` holds ``(plan, rows, cols, a_off, b_off, row0, col0)`` for
    each rectangle of C left: its first elements' offsets into A and B (:func:`waves.offsets`),
    and its first element's place in C (the offset depends on ldc, which the memo keys mod 4). ``after``: every
    launch of the plan goes with programmatic stream serialization, so that its CTAs are placed
    as the kernel ahead of it in the stream finishes (the device's kernels wait for that grid
    themselves: :data:`sgblas.runtime.device.GRID_WAIT_MIN_CC`). ``workspace``: some launch of
    the plan (or of a rectangle's) writes the handle's workspace.
    """

    role: str
    spec: KernelSpec
    kernel: LoadedKernel
    grid: tuple[int, int, int]
    splits: int = 1
    k_chunk: int = 0
    ldw: int = 0
    reduce: LoadedKernel | None = None
    reduce_grid: tuple[int, int, int] = (1, 1, 1)
    c_vec: int = 0
    after: bool = False
    pack: LoadedKernel | None = None
    copies: tuple = ()
    tail: tuple = ()
    workspace: bool = False
    serial: bool = False


def choose(p: GemmProblem, props: _device.DeviceProperties, workspace_bytes: int,
           quick: bool = False, rectangle: bool = False, cal: _model.Calibration | None = None) -> Choice:
    """The plan for ``p``: legality (each spec's ``can_implement``, then each candidate's:
    :mod:`sgblas.dispatch.candidates`), then the candidate of least predicted time
    (:mod:`sgblas.dispatch.model`), with the device's calibrated rates, or the default rates on
    a device without a calibration.

    ``quick`` (planning a call) skips the variants of other transpose pairs and of alignment
    classes the operands are not in without wording their refusals, and predicts no more
    candidates than the choice needs; ``explain`` lists them all, with their predicted times.
    ``rectangle``: ``p`` is a tail plan's rectangle (less than a wave: no tail plan of its own).
    ``cal``: rates to predict with in place of the device's (``perf.calibrate --holdout`` judges
    a fit by the choices it makes).
    """
    legal, refused = [], []
    # On a call's path the variants of other pairs and alignment classes are refused without a
    # sentence (a call's plan needs none); where the keys pass, the guard is all can_implement
    # has left to say.
    checks = _of_class(p) if quick else ((spec, spec.can_implement) for spec in registry.GEMM_KERNELS)
    # Many variants share their generator's guard (one function), which answers once for all.
    answers: dict = {}
    for spec, check in checks:
        reason = answers.get(check, _UNASKED)
        if reason is _UNASKED:
            reason = answers[check] = check(p)
        if reason is None:
            legal.append(spec)
        else:
            refused.append((spec.name, reason))
    # A call's path says nothing of an uncalibrated device: explain does, once.
    if cal is None:
        cal = _model.calibration_for(p.cc, props, warn=not quick)
    legal, narrower = _widest(legal)
    choice = _by_model(legal, tuple(refused), p, props, workspace_bytes, quick, rectangle, cal)
    if quick or not narrower or choice.spec is None:
        return choice
    # explain ranks the twins too, so that a benchmark times every legal candidate by name.
    ranking, passed = list(choice.ranking), []
    ranked = {name for name, _ in ranking}
    for spec, twin in narrower:
        own = _by_model([spec], (), p, props, workspace_bytes, False, rectangle, cal)
        # The twins' splits are the same, so the accuracy policy keeps the twin's of the wider one's.
        ranking += [(name, t) for name, t in own.ranking if twin.name + name[len(spec.name):] in ranked]
        passed.append((spec.name, f"{twin.name}, its twin of a wider alignment class, can run this problem and "
                                  f"is weighed in its place"))
    return choice._replace(passed_over=choice.passed_over + tuple(passed),
                           ranking=tuple(sorted(ranking, key=lambda item: item[1])))


#: :func:`_widest`'s answers by legal list: the lists of a shape's class recur (the guards
#: answer alike across most shapes), and the answer follows from the list alone.
_WIDEST: dict[tuple, tuple[tuple, tuple]] = {}


def _widest(legal: list) -> tuple[tuple, tuple]:
    """``(weighed, narrower)``: ``legal`` without the variants whose twin of a wider alignment
    class (the same name but for its ``_aN``) is legal too, and those as ``(variant, its
    widest legal twin)``. A wider class's twin reads its operands with wider vectors; where
    either was near the fastest candidate, the narrower one won next to nothing over it and was
    chosen wrongly when predicted a little faster (``docs/design.md``, "Alignment twins"), so
    the narrower one is not weighed. It still runs by name."""
    key = tuple(legal)
    found = _WIDEST.get(key)
    if found is not None:
        return found
    widest: dict[str, KernelSpec] = {}
    for spec in legal:
        stem = spec.name.removesuffix(f"_a{spec.align}")
        if stem not in widest or widest[stem].align < spec.align:
            widest[stem] = spec
    weighed, narrower = [], []
    for spec in legal:
        twin = widest[spec.name.removesuffix(f"_a{spec.align}")]
        if twin is spec:
            weighed.append(spec)
        else:
            narrower.append((spec, twin))
    if len(_WIDEST) >= PLAN_CACHE_SIZE:
        _WIDEST.clear()
    found = _WIDEST[key] = (tuple(weighed), tuple(narrower))
    return found


_UNASKED = object()
_CLASS_KERNELS: dict[tuple, tuple[tuple, tuple]] = {}


def _of_class(p: GemmProblem) -> tuple[tuple[KernelSpec, Callable[[GemmProblem], str | None]], ...]:
    """The GEMM variants of ``p``'s transpose pair (theirs, or any) whose alignment class its
    operands are in, in registry order, each with what says whether it can run ``p``: its guard
    where ``p`` passes every key it is checked on (:meth:`KernelSpec.key_refusal`), else
    :meth:`KernelSpec.can_implement`; kept per class of those keys for as long as the registry's
    tuple is the same one."""
    kernels = registry.GEMM_KERNELS
    # The math mode by whether it is FP32, all that the keys ask of it (an enum's hash costs more).
    key = (p.transa, p.transb, p.math_mode is MathMode.FP32, p.cc, p.a_ptr & 15, p.lda & 3, p.b_ptr & 15, p.ldb & 3,
           p.c_ptr & 15, p.ldc & 3)
    kept = _CLASS_KERNELS.get(key)
    if kept is None or kept[0] is not kernels:
        pair = (p.transa, p.transb)
        of_pair = [s for s in kernels if (s.pair is None or s.pair == pair) and not s.misaligned(p)]
        if len(_CLASS_KERNELS) >= PLAN_CACHE_SIZE:
            _CLASS_KERNELS.clear()
        kept = _CLASS_KERNELS[key] = (kernels, tuple((s, s.guard if s.key_refusal(p) is None else s.can_implement)
                                                      for s in of_pair))
    return kept[1]


#: The roles whose candidates are splits of K (a skinny variant's include one slice).
_SPLITTING = ("splitk", "skinny")


def _by_model(legal: list, refused: tuple, p: GemmProblem, props: _device.DeviceProperties, workspace_bytes: int,
              quick: bool, rectangle: bool, cal: _model.Calibration) -> Choice:
    """The candidate of ``legal`` (variants that can run ``p``) of least predicted time with
    ``cal``'s rates; ``refused`` goes into the choice as it is."""
    floor = _model.Floor(p, props, cal, legal) if legal else None
    # On a call's path (and below the accuracy policy's K, which weighs all candidates at once)
    # the splitting variants come second: those whose every split's lower bound cannot beat the
    # best unsplit prediction are not enumerated (the same choice, for a fraction of the work).
    deferred = quick and p.k < _cand.ACCURACY_SPLIT_K
    first, splitting = legal, []
    if deferred:
        first = []
        for spec in legal:
            (splitting if spec.role in _SPLITTING else first).append(spec)
    cands, passed = _cand.enumerate_candidates(first, p, props, workspace_bytes, rectangle)
    best, best_t = None, float("inf")
    timed: list[tuple[_cand.Candidate, float]] = []  # explain's ranking (a call's plan keeps none)
    later: list[_cand.Candidate] = []

    def predict_unsplit(cands: list[_cand.Candidate]) -> None:
        nonlocal best, best_t
        for c in cands:
            if c.tail is not None or c.split is not None and c.split.splits > 1:
                later.append(c)
                continue
            t = floor.predict(c)
            if not quick:
                timed.append((c, t))
            if t < best_t:
                best, best_t = c, t

    predict_unsplit(cands)
    if deferred:
        # Each split is predicted from its variant's shared terms as it is found (bounding and
        # ordering them cost more than the predictions they saved); a variant is skipped whole
        # when no split of it can beat the best so far.
        slices, shared = None, {}
        for spec in splitting:
            if spec.role == "splitk":
                if slices is None:
                    # A split-K candidate launches the reduction after its slices: where a launch
                    # gap and the reduction of two partials cannot beat the best, none can.
                    slices = floor.reduction_bound() < best_t
                if not slices:
                    continue
            if floor.variant_bound(spec) >= best_t:
                continue
            seconds, terms = floor.split_terms(spec)
            for split in _cand.splits_of(spec, p, props, workspace_bytes, shared):
                t = seconds(terms, split, floor.reduce_seconds)
                if t < best_t:
                    best, best_t = _cand.Candidate(spec, split), t
    if best is None and not later:  # no candidate at all: every prediction is finite
        return Choice(None, refused, tuple(passed))
    # Splits and tail plans cost more to predict; on a call's path, those whose lower bound
    # (:class:`sgblas.dispatch.model.Floor`) cannot beat the best so far are not predicted.
    subs: dict = {}
    if quick:  # the splits by least bound first, until no bound can beat the best; then the tails
        splits = sorted((floor.lower_bound(c), i) for i, c in enumerate(later) if c.tail is None)
        for bound, i in splits:
            if bound >= best_t:
                break
            t = floor.predict(later[i])
            if t < best_t:
                best, best_t = later[i], t
        later = [c for c in later if c.tail is not None]
    for c in later:
        if c.tail is None:
            t = floor.predict(c)
        else:
            t = floor.whole_waves(c)
            if quick and t + floor.rectangles(c) >= best_t:
                continue
            for rect in c.tail.rects:
                if rect not in subs:
                    sub = choose(_sub_problem(p, rect), props, workspace_bytes, quick=True, rectangle=True, cal=cal)
                    subs[rect] = (sub, sub.predicted_s if sub.spec is not None else float("inf"))
                t += subs[rect][1]
        timed.append((c, t))
        if t < best_t:
            best, best_t = c, t
    tail, tail_ctas = (), 0
    if best.tail is not None:
        tail = tuple((rect, subs[rect][0]) for rect in best.tail.rects)
        tail_ctas = best.tail.ctas
    if quick:  # a call's plan needs no sentences: explain words them
        return Choice(best.spec, refused, (), best.split, "", tail, tail_ctas, best.name, best_t)
    passed_over: dict[str, str] = {}
    for c, t in sorted(timed, key=lambda item: item[1]):
        if c.spec is not best.spec and c.spec.name not in passed_over:
            passed_over[c.spec.name] = (f"predicted {t * 1e6:.1f} us as {c.name}, against {best_t * 1e6:.1f} us "
                                        f"for {best.name}")
    ranking = tuple((c.name, t) for c, t in sorted(timed, key=lambda item: item[1]))
    note = _note(best.spec, best.split, p)
    if tail:
        note = "; ".join(filter(None, (note, _tail_note(best.spec, p, props, tail_ctas, tail))))
    if props.programmatic_launch:
        note = "; ".join(filter(None, (note, LAUNCH_NOTE)))
    return Choice(best.spec, refused, tuple(passed_over.items()) + tuple(passed), best.split, note, tail, tail_ctas,
                  best.name, best_t, ranking)


def _sub_problem(p: GemmProblem, rect: tuple[int, int, int, int]) -> GemmProblem:
    """The sub-problem of ``p`` that computes C's rectangle ``rect``, K whole."""
    row0, col0, rows, cols = rect
    a, b, c = waves.offsets(p.transa, p.transb, p.lda, p.ldb, p.ldc, row0, col0)
    return p._replace(m=rows, n=cols, a_ptr=p.a_ptr + 4 * a, b_ptr=p.b_ptr + 4 * b, c_ptr=p.c_ptr + 4 * c)


def _tail_note(spec: KernelSpec, p: GemmProblem, props: _device.DeviceProperties, tail_ctas: int,
               tail: tuple) -> str:
    total, n_slots = _cand.ctas(spec, p.m, p.n), _cand.slots(spec, props)
    parts = ", ".join(f"{rows}x{cols} at ({row0}, {col0}) by {sub.spec.name}"
                      + (f" with K split {sub.split.splits} ways" if sub.split and sub.split.splits > 1 else "")
                      for (row0, col0, rows, cols), sub in tail)
    return (f"its {total} CTAs would take {-(-total // n_slots)} waves of {n_slots} with the last one "
            f"{total % n_slots / n_slots:.0%} full, so it runs the first {tail_ctas} and the rest of C as "
            f"{parts}, one after another on the handle's stream")


#: What ``explain`` adds on a device whose plans launch behind the work ahead (``Plan.after``).
LAUNCH_NOTE = ("each kernel is launched with programmatic stream serialization, its CTAs placed as the "
               "work ahead of it on the stream finishes")


def _note(spec: KernelSpec, split: Split | None, p: GemmProblem) -> str:
    if spec.role == "packed":
        return _packed.describe(spec, p)
    if split is None:
        return ""
    if split.splits == 1:
        return "K is not split: one launch"
    if split.serial:
        return (f"K split {split.splits} ways ({split.k_chunk} each), the slices of each output tile adding into C "
                f"one after another (a semaphore per tile in the handle's workspace); no partials, no reduction")
    return (f"K split {split.splits} ways ({split.k_chunk} each): partial products in the handle's "
            f"workspace ({split.splits * _reduce.padded_rows(p.m) * p.n * 4} bytes), then "
            f"{_reduce.NAME} adds them in its fixed order")


def plan_for(handle: Any, ta: str, tb: str, m: int, n: int, k: int, reads_ab: bool,
             a_ptr: int, lda: int, b_ptr: int, ldb: int, c_ptr: int, ldc: int,
             pin: KernelSpec | None = None) -> Plan | None:
    """The memoised plan of this shape class on ``handle`` (None when no variant accepts it).

    ``pin`` makes ``handle`` run that variant for this shape class from now on, whatever the
    cost model would choose (the caller has checked its legality): how the sanitizer driver and
    the tests reach every variant through the same call path as any other call. A pinned
    split-K or skinny variant runs :func:`pinned_split`'s split.
    """
    key = (ta, tb, m, n, k, reads_ab, a_ptr & 15, b_ptr & 15, c_ptr & 127, lda, ldb, ldc & 31)
    plans = handle._plans
    plan = plans.get(key)
    if pin is not None:
        if plans is _MEMOS.get((handle.device, handle.math_mode, handle.workspace_bytes)):
            plans = handle._plans = dict(plans)  # a pin binds this handle only
        split = None
        if pin.role == "packed" and pin.workspace(m, n, k) > handle.workspace_bytes:
            return None  # its copies would not fit
        if pin.role in ("splitk", "skinny"):
            problem = GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
            split = pinned_split(pin, problem, handle.properties, handle.workspace_bytes)
            if split is None:
                return None
        plan = plans[key] = make_plan(handle, pin, split, m, n, k, c_ptr, ldc)
    if plan is None:
        if reads_ab:
            problem = GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
            choice = choose(problem, handle.properties, handle.workspace_bytes, quick=True)
            if choice.spec is None:
                return None
            plan = make_plan(handle, choice.spec, choice.split, m, n, k, c_ptr, ldc)
            if choice.tail:
                plan = _with_tail(handle, plan, choice.tail_ctas, choice.tail, ta, tb, k, lda, ldb, c_ptr, ldc)
        else:
            spec = registry.SCALE_KERNEL
            plan = Plan(spec.role, spec, handle._kernels[spec.name], spec.grid(m, n, k),
                        after=handle.properties.programmatic_launch)
        _remember(plans, key, plan)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("new shape class on device %d: %s%s m=%d n=%d k=%d (pointers mod 16: %d %d, C's mod 128: "
                      "%d, lda %d, ldb %d, ldc mod 32 %d) runs %s%s", handle.device, ta, tb, m, n, k, a_ptr & 15,
                      b_ptr & 15, c_ptr & 127, lda, ldb, ldc & 31, plan.spec.name,
                      f" split {plan.splits} ways" if plan.splits > 1 else "")
    return plan


def pinned_split(spec: KernelSpec, p: GemmProblem, props: _device.DeviceProperties,
                 workspace_bytes: int) -> Split | None:
    """The split a split-K or skinny variant runs ``p`` with when it is pinned (chosen by the
    caller, not by :func:`choose`): the least predicted of that variant's own candidates; for a
    split-K variant with none (K too short for two slices of the least slice), two slices, the
    second empty when k fits in one granule (its CTAs store zeros); None when the workspace does
    not hold two partials."""
    cal = _model.calibration_for(p.cc, props, warn=False)
    choice = _by_model([spec], (), p, props, workspace_bytes, True, True, cal)
    if choice.spec is not None:
        return choice.split
    if spec.role != "splitk" or workspace_bytes < _splitk.workspace_bytes(p.m, p.n, _splitk.MIN_PARTIALS):
        return None
    return Split(_splitk.MIN_PARTIALS, _cand.split_of(spec, p.k, _splitk.MIN_PARTIALS).k_chunk)


def find_candidate(p: GemmProblem, props: _device.DeviceProperties, workspace_bytes: int,
                   name: str) -> _cand.Candidate | str:
    """The candidate called ``name`` for ``p``, or the sentence saying why it cannot run ``p``:
    the name's form, the variant's legality, the split's (a whole number of slices of the
    variant's K granule, no shorter than the least slice, within the workspace) and the
    accuracy policy, as :func:`sgblas.dispatch.candidates.enumerate_candidates` applies them."""
    try:
        variant, splits, tail, serial = _cand.parse_name(name)
        spec = registry.by_name(variant)
    except (ValueError, KeyError) as exc:
        return str(exc.args[0]) if isinstance(exc, KeyError) else str(exc)
    if spec not in registry.GEMM_KERNELS:
        return f"candidate={name!r}: {variant} is a support kernel that plans launch, not a GEMM variant"
    reason = spec.can_implement(p)
    if reason is not None:
        return f"candidate={name!r} cannot run this problem: {reason}"
    splitting = spec.role in ("splitk", "skinny")
    if splitting and splits is None:
        return f"candidate={name!r}: {variant} splits K; name the number of slices, as {variant}/s2"
    if not splitting and splits is not None:
        return f"candidate={name!r}: {variant} does not split K (its candidates are {variant} and {variant}/tail)"
    if serial and spec.role != "splitk":
        return f"candidate={name!r}: {variant} cannot add its slices into C in turn; name {variant}/s{splits}"
    if tail and (spec.role != "gemm" or spec.backstop or spec.config is None):
        return f"candidate={name!r}: {variant} has no tail plan (a tile kernel of one launch has)"
    cands, passed = _cand.enumerate_candidates([spec], p, props, workspace_bytes)
    if splits is not None:
        wanted = _cand.split_of(spec, p.k, splits, serial)
        if wanted.splits != splits:
            return (f"candidate={name!r}: k={p.k} in {splits} slices of whole {_cand.granule(spec)}s leaves "
                    f"{wanted.splits} slices of {wanted.k_chunk}; name {_cand.Candidate(spec, wanted).name}")
        found = _cand.Candidate(spec, wanted)
        why = _cand.split_refusal(spec, wanted, p, workspace_bytes)
        if why is not None:
            return f"candidate={name!r}: {why}"
    else:
        found = next((c for c in cands if c.name == name), None)
        if found is None:
            if tail:
                return (f"candidate={name!r}: the {_cand.ctas(spec, p.m, p.n)} CTAs of {variant} leave no last "
                        f"wave to split off on {props.sm_count} SMs")
            return f"candidate={name!r}: " + dict(passed).get(spec.name, "it is not a candidate for this problem")
    if p.k >= _cand.ACCURACY_SPLIT_K:
        legal = [s for s in registry.GEMM_KERNELS if (s.pair is None or s.pair == (p.transa, p.transb))
                 and s.can_implement(p) is None]
        limit = _cand.accuracy_limit(_cand.enumerate_candidates(legal, p, props, workspace_bytes)[0], p, props,
                                     workspace_bytes)
        if not _cand.meets_accuracy(found, p.k, limit):
            return f"candidate={name!r}: " + _cand.too_long(found, p.k, limit)
    return found


def plan_named(handle: Any, name: str, ta: str, tb: str, m: int, n: int, k: int,
               a_ptr: int, lda: int, b_ptr: int, ldb: int, c_ptr: int, ldc: int) -> Plan | str:
    """The plan of the candidate called ``name`` for this shape class (A and B read), memoised
    beside the chosen plans; or the sentence saying why that candidate cannot run it."""
    key = (ta, tb, m, n, k, True, a_ptr & 15, b_ptr & 15, c_ptr & 127, lda, ldb, ldc & 31, name)
    plans = handle._plans
    plan = plans.get(key)
    if plan is not None:
        return plan
    p = GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
    found = find_candidate(p, handle.properties, handle.workspace_bytes, name)
    if isinstance(found, str):
        return found
    plan = make_plan(handle, found.spec, found.split, m, n, k, c_ptr, ldc)
    if found.tail is not None:
        subs = [(rect, choose(_sub_problem(p, rect), handle.properties, handle.workspace_bytes, quick=True,
                              rectangle=True)) for rect in found.tail.rects]
        if any(sub.spec is None for _, sub in subs):
            return f"candidate={name!r}: no variant runs a rectangle of its tail"
        plan = _with_tail(handle, plan, found.tail.ctas, subs, ta, tb, k, lda, ldb, c_ptr, ldc)
    _remember(plans, key, plan)
    return plan


def _remember(plans: dict, key: tuple, plan: Plan) -> None:
    """Memoise ``plan`` under ``key``; a full memo starts over."""
    if len(plans) >= PLAN_CACHE_SIZE:
        plans.clear()
    plans[key] = plan


def _with_tail(handle: Any, plan: Plan, ctas: int, subs: Any, ta: str, tb: str, k: int, lda: int, ldb: int,
               c_ptr: int, ldc: int) -> Plan:
    """``plan`` over its first ``ctas`` CTAs, then each ``(rectangle, Choice)`` of ``subs``."""
    tail = tuple(_tail_part(handle, sub, rect, ta, tb, k, lda, ldb, c_ptr, ldc) for rect, sub in subs)
    return plan._replace(grid=(ctas, 1, 1), tail=tail, workspace=plan.workspace or any(t[0].workspace for t in tail))


def make_plan(handle: Any, spec: KernelSpec, split: Split | None, m: int, n: int, k: int,
              c_ptr: int, ldc: int) -> Plan:
    """The plan that runs ``spec`` with ``split`` (None: one launch of a GEMM variant)."""
    kernel = handle._kernels[spec.name]
    after = handle.properties.programmatic_launch
    if spec.role == "packed":
        copies = tuple((rows, cols, ldd, _pack.grid(rows, cols))
                       for rows, cols, ldd in _packed.copies(spec.pair, m, n, k))
        return Plan(spec.role, spec, kernel, spec.grid(m, n, k), after=after,
                    pack=handle._kernels[_pack.NAME], copies=copies, workspace=True)
    if split is None:
        return Plan(spec.role, spec, kernel, spec.grid(m, n, k), after=after)
    grid = _split_grid(spec, m, n, split.splits)
    if split.splits == 1:
        return Plan(spec.role, spec, kernel, grid, 1, split.k_chunk, after=after)
    if split.serial:
        return Plan(spec.role, spec, kernel, grid, split.splits, split.k_chunk, after=after, workspace=True,
                    serial=True)
    red = registry.by_name(_reduce.NAME)
    c_vec = int(c_ptr % 16 == 0 and ldc % 4 == 0)
    return Plan(spec.role, spec, kernel, grid, split.splits, split.k_chunk, _reduce.padded_rows(m),
                handle._kernels[red.name], red.grid(m, n, k), c_vec, after, workspace=True)


def _tail_part(handle: Any, sub: Choice, rect: tuple[int, int, int, int], ta: str, tb: str, k: int,
               lda: int, ldb: int, c_ptr: int, ldc: int) -> tuple:
    row0, col0, rows, cols = rect
    a_off, b_off, c_off = waves.offsets(ta, tb, lda, ldb, ldc, row0, col0)
    # lda and ldb are keys of the memo, ldc only mod 4: C's offset is taken at each call.
    return (make_plan(handle, sub.spec, sub.split, rows, cols, k, c_ptr + 4 * c_off, ldc), rows, cols,
            a_off, b_off, row0, col0)


def _split_grid(spec: KernelSpec, m: int, n: int, splits: int) -> tuple[int, int, int]:
    x, _, z = spec.grid(m, n, 0)
    return (x, splits, z)


def execute(handle: Any, plan: Plan, m: int, n: int, k: int, alpha: float, a_ptr: int, a_extent: int,
            lda: int, b_ptr: int, b_extent: int, ldb: int, beta: float, c_ptr: int, c_extent: int,
            ldc: int) -> None:
    """Enqueue ``plan`` on the handle's stream, in the handle's context; raises what the
    launch raises (the API turns it into a status).

    Context policy: a kernel launched on a stream runs in the stream's context, which
    :meth:`Handle.set_stream` checked is the handle's; on a default stream it runs in the
    calling thread's current context, so the handle's is pushed for the launch when another is
    current, and popped after.

    A plan that writes the handle's workspace enqueues all its launches under the handle's lock
    (another thread's launches on the same stream cannot fall between its partials and their
    reduction), and when the last such plan went to another stream, this stream first waits for
    that one's work (an event), so that two calls through one handle on two streams never use
    the workspace at once. Not while either stream is being captured into a graph: a capture
    cannot wait on work outside it, and a graph's replays are ordered by whoever launches them.
    """
    handle_stream = handle._stream
    raw_stream = handle_stream[1]
    pushed = False
    if raw_stream <= 2 and handle._context and _device.current_context_handle() != handle._context:
        _device.push_context(handle._context)
        pushed = True
    try:
        if not plan.workspace:
            _enqueue(handle, handle_stream[2], plan, m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                     beta, c_ptr, c_extent, ldc)
            return
        order = handle._ws_order
        with order.lock:
            # The per-thread default stream is a different stream in each thread: keyed by thread.
            key = (raw_stream, threading.get_ident()) if raw_stream == _PER_THREAD_STREAM else raw_stream
            if order.last is not None and order.last != key and handle._context:
                _wait_for_stream(handle, order, raw_stream)
            _enqueue(handle, handle_stream[2], plan, m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                     beta, c_ptr, c_extent, ldc)
            if key != raw_stream and handle._context:
                # No other thread can name this thread's stream, so its work is marked now.
                _mark(handle, order, raw_stream)
            order.last = key
    finally:
        if pushed:
            _device.pop_context()


#: ``CU_STREAM_PER_THREAD``: the calling thread's default stream, whichever thread that is.
_PER_THREAD_STREAM = 2


class WorkspaceOrder:
    """How a handle orders the calls that use its workspace (:func:`execute`): the lock their
    launches are enqueued under, the stream of the last one (None: none yet; the per-thread
    default stream as ``(2, thread)``), and the event that orders a later one on another stream
    behind it (0 until first needed)."""

    __slots__ = ("lock", "last", "event")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: Any = None
        self.event = 0


def _event(handle: Any, order: WorkspaceOrder) -> int:
    if not order.event:
        with _device.made_current(handle._context):
            order.event = _device.event_create()
    return order.event


def _mark(handle: Any, order: WorkspaceOrder, raw_stream: int) -> None:
    """Record the handle's event on ``raw_stream`` (this thread's own stream) after a call."""
    try:
        if not _device.stream_capturing(raw_stream):
            _device.event_record(_event(handle, order), raw_stream)
    except DriverError:
        pass


def _wait_for_stream(handle: Any, order: WorkspaceOrder, raw_stream: int) -> None:
    """Make ``raw_stream`` wait for the work enqueued so far on ``order.last`` (an event recorded
    there, or, for another thread's default stream, recorded after that call), unless either is
    being captured. A stream the caller has destroyed since (the driver refuses it) is not waited
    for: its work still runs to its end, and a call must not fail for it."""
    last = order.last
    try:
        if _device.stream_capturing(raw_stream):
            return
        if isinstance(last, tuple):  # another thread's default stream: marked after its call
            if not order.event:
                return
        else:
            if _device.stream_capturing(last):
                return
            _device.event_record(_event(handle, order), last)
    except DriverError:
        return
    _device.stream_wait_event(raw_stream, order.event)


def _enqueue(handle: Any, stream: Any, plan: Plan, m: int, n: int, k: int, alpha: float, a_ptr: int, a_extent: int,
             lda: int, b_ptr: int, b_extent: int, ldb: int, beta: float, c_ptr: int, c_extent: int,
             ldc: int) -> None:
    """The launches of ``plan`` on ``stream`` (the handle's launch argument), a tail plan's
    rectangles after its whole waves."""
    role, _, kernel, grid, splits, k_chunk, ldw, reduce, reduce_grid, c_vec, after, pack, copies, tail, _, serial = plan
    if role == "gemm":
        launch(kernel, grid, stream, (m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                                      beta, c_ptr, c_extent, ldc), after)
        # A tail plan: the rectangles of C the whole waves leave, each the sub-problem over
        # its part of the same arrays (disjoint parts of C; the split ones share the
        # workspace, one after another on the stream).
        for sub, rows, cols, a_off, b_off, row0, col0 in tail:
            c_off = row0 + col0 * ldc
            _enqueue(handle, stream, sub, rows, cols, k, alpha, a_ptr + 4 * a_off, a_extent - a_off, lda,
                     b_ptr + 4 * b_off, b_extent - b_off, ldb, beta, c_ptr + 4 * c_off, c_extent - c_off, ldc)
    elif role == "packed":
        # A's and B's copies into the workspace, then the GEMM from them: the same stream orders
        # the three, and the copies of the next call on this handle come after this GEMM.
        (ra, ca, la, ga), (rb, cb, lb, gb) = copies
        wa = handle.workspace_ptr
        wb = wa + 4 * la * ca
        launch(pack, ga, stream, (ra, ca, a_ptr, a_extent, lda, wa, la * ca, la), after)
        launch(pack, gb, stream, (rb, cb, b_ptr, b_extent, ldb, wb, lb * cb, lb), after)
        launch(kernel, grid, stream, (m, n, k, alpha, wa, la * ca, la, wb, lb * cb, lb,
                                      beta, c_ptr, c_extent, ldc), after)
    elif role == "scale":  # k == 0 or alpha == 0, A and B untouched
        launch(kernel, grid, stream, (m, n, beta, c_ptr, c_extent, ldc), after)
    elif splits == 1:  # a skinny kernel writing C itself
        launch(kernel, grid, stream, (m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                                      beta, c_ptr, c_extent, ldc, k_chunk, 0, 0), after)
    elif serial:
        # The slices add into C in turn, ordered by one semaphore per output tile at the start
        # of the workspace, zeroed first (another plan may have left partials there).
        sem, tiles = handle.workspace_ptr, grid[0]
        zero_int32(sem, tiles, handle._stream[1], handle._context)
        launch(kernel, grid, stream, (m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                                      beta, c_ptr, c_extent, ldc, k_chunk, sem, tiles), after)
    else:
        # Partials into the workspace (beta = 0: nothing read there), then C = their sum in
        # the reduction's fixed order + beta * C. The workspace is read from the handle at each call.
        ws_ptr = handle.workspace_ptr
        ws_extent = splits * ldw * n
        launch(kernel, grid, stream, (m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                                      0.0, ws_ptr, ws_extent, ldw, k_chunk, 0, 0), after)
        launch(reduce, reduce_grid, stream, (m, n, splits, ws_ptr, ws_extent, ldw, beta,
                                             c_ptr, c_extent, ldc, c_vec), after)
