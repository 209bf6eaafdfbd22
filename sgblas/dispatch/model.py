"""The cost model: a candidate's predicted time on a device, from its variant's rates.

A candidate (:mod:`sgblas.dispatch.candidates`) is one to four launches on the handle's
stream. Each launch of a variant is predicted from nine rates of that variant
(:class:`Rates`) and the device's SM count and occupancy:

- **compute**: the busiest SM's CTAs, ``ceil(ctas / SMs)``, run in rounds of the variant's
  occupancy; a full round at ``flops`` (one SM full of its CTAs), a last partial round of
  ``r`` CTAs at ``min(1, r * lone)`` of it, or, where the calibration entry gives a ``fill``
  exponent q, at ``g(r) / g(occupancy)`` with ``g(r) = (1 + (r * lone) ** -q) ** (-1 / q)``
  (a soft minimum: a few CTAs short of a full SM still lose some of its rate); each round adds
  ``cta_s`` (prologue, epilogue); a tile kernel's CTA multiplies whole K steps of its tile;
- **memory**: the A and B tile bytes all CTAs load, at ``bandwidth``, and the busiest SM's
  rounds of CTAs each streaming their own bytes at ``cta_bandwidth`` (a CTA's loads are
  latency-bound: one CTA with a long K, or a few, cannot draw the GPU's bandwidth); the two
  times add in quadrature, since neither is a wall: loads queue as the CTAs streaming at once
  approach the bandwidth they share;
- **C**: the bytes of C (or of the partials) written, at ``c_bandwidth``, times
  ``c_unaligned`` when C's columns do not start on 128-byte lines; the last round's stores
  overlap nothing, so ``1 / rounds`` of that time is added;
- a launch takes ``start_s`` plus the largest of the three, with compute and memory times
  ``slow_ld`` when a k-major operand's leading dimension is of the kind where the copies of
  that layout run slowly (a multiple of 32 floats, or within one of a power of two);
- each launch also costs the device's ``launch_s``: the gap between back-to-back kernels.

A split-K candidate adds the reduction's launch (the partials read, C read and written; each
CTA streams its whole share of the partials, however few of its threads the output fills); a
serial split (slices adding into C in turn) adds none, but a chain of S hand-offs per output
tile (:func:`serial_step`) and a memset's launch gap; a
packed one the two copies; a tail plan the rectangles' own choices. Nine rates per variant. The rates come from
``calibration.json``, fitted by ``python -m perf.calibrate`` to times measured on one kind of
device and keyed by compute capability, SM count and memory bus width (``sm_90/132/6016b`` on an H200). On a device without an
entry, the rates are the defaults of :func:`default_rates`, scaled by its SM clock and memory
bandwidth; sgblas says so once (logging, WARNING), and the dispatcher chooses by those defaults'
predictions (``docs/design.md``, "The cost model").
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any, Callable, NamedTuple

from sgblas.dispatch.candidates import ACCURACY_SPLIT_K, Candidate, Split, ctas, occupancy
from sgblas.kernels import pack as _pack
from sgblas.kernels import packed as _packed
from sgblas.kernels import reduce as _reduce
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import KernelSpec
from sgblas.runtime.device import DeviceProperties

__all__ = ["Rates", "Calibration", "RATE_FIELDS", "CALIBRATION_FILE", "device_key", "calibration_for",
           "default_rates", "layout_flags", "SLOW_LD", "C_UNALIGNED", "predict", "launch_seconds",
           "load_calibrations", "Floor", "DEFAULT_LAUNCH_S", "no_rectangles", "entry_fill", "serial_step",
           "SERIAL_HANDOFF_S"]

log = logging.getLogger("sgblas")

#: The launch gap of a device without a calibration (seconds): back-to-back kernels on one
#: stream start about this far apart on recent GPUs.
DEFAULT_LAUNCH_S: float = 3e-6

#: The calibration file shipped with the package: ``{"format": 1, "devices": {KEY: entry}}``.
CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


class Rates(NamedTuple):
    """A variant's nine fitted parameters (see the module's docstring), and its calibration
    entry's ``fill`` exponent, which is not fitted per variant."""

    flops: float        #: FLOP/s of one SM full of the variant's CTAs, in the steady state
    lone: float         #: the share of ``flops`` one CTA reaches alone on an SM
    cta_s: float        #: seconds each round of CTAs adds
    bandwidth: float    #: bytes/s of A and B tiles loaded, the whole GPU
    slow_ld: float      #: time factor at a slow k-major leading dimension
    c_bandwidth: float  #: bytes/s of C or partials written, the whole GPU
    c_unaligned: float  #: factor on C's time when C's columns are not on 128-byte lines
    start_s: float      #: seconds a launch takes beyond the stream's launch gap
    cta_bandwidth: float  #: bytes/s one CTA streams of its A and B tiles, at most
    fill: float = 0.0   #: the entry's soft-minimum exponent of a partial round's share (0: the hard minimum)


#: The fitted rates, in the order a calibration entry lists them.
RATE_FIELDS: tuple[str, ...] = Rates._fields[:-1]

#: Layout flags of a problem (:func:`layout_flags`).
SLOW_LD = 1
C_UNALIGNED = 2


class Calibration(NamedTuple):
    """The rates of one kind of device: ``launch_s``, and each variant's :class:`Rates` by name.
    ``calibrated``: fitted to measurements (False: the defaults of :func:`default_rates`)."""

    key: str
    launch_s: float
    rates: dict[str, Rates]
    calibrated: bool
    source: dict[str, Any]


def device_key(cc: tuple[int, int], props: DeviceProperties) -> str:
    """The calibration key of a device: compute capability, SM count and memory bus width
    (``sm_90/132/6016b`` for an H200, whose driver reports a 6016-bit bus; an H100 SXM, also sm_90 with 132 SMs, is ``sm_90/132/5120b``:
    its memory is slower, so its rates are its own)."""
    return f"sm_{cc[0]}{cc[1]}/{props.sm_count}/{props.memory_bus_bits}b"


@functools.cache
def load_calibrations(path: str = str(CALIBRATION_FILE)) -> dict[str, dict]:
    """The calibration file's entries by device key ({} when there is none)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    if data.get("format") != 1:
        raise ValueError(f"{path} has format {data.get('format')!r}; this sgblas reads format 1")
    return dict(data["devices"])


#: FP32 FMA lanes per SM by compute capability: what the defaults scale the clock by.
_FMA_LANES = {(7, 0): 64, (7, 5): 64, (8, 0): 64}


def _peak_sm_flops(cc: tuple[int, int], props: DeviceProperties) -> float:
    clock = (props.clock_khz or 1_500_000) * 1e3
    return 2.0 * _FMA_LANES.get(tuple(cc), 128) * clock


def _dram_bandwidth(props: DeviceProperties) -> float:
    if props.memory_clock_khz and props.memory_bus_bits:
        return 2.0 * props.memory_clock_khz * 1e3 * props.memory_bus_bits / 8
    return 1e12


def default_rates(spec: KernelSpec, cc: tuple[int, int], props: DeviceProperties) -> Rates:
    """Rates for ``spec`` on a device with no calibration: shares of the device's FMA peak and
    memory bandwidth by kind of kernel. These are a prior, not a measurement: the calibrated
    rates replace them, and the fit starts from them."""
    peak, dram = _peak_sm_flops(cc, props), _dram_bandwidth(props)
    occ = occupancy(spec, props)
    if spec.role in ("reduce", "pack", "scale"):
        return Rates(peak, 1.0, 0.0, 0.8 * dram, 1.0, 0.8 * dram, 1.3, 2e-6, 0.05 * dram)
    if spec.backstop:
        share = 0.35
    elif spec.role == "skinny":
        share = 0.5
    else:
        share = 0.78 if spec.tile[0] * spec.tile[1] >= 128 * 128 else 0.7
        share *= 0.95 if spec.align == 4 else 1.0
    return Rates(share * peak, min(1.0, 1.5 / occ), 1e-6, (0.8 if spec.role == "skinny" else 3.0) * dram,
                 1.0, 0.8 * dram, 1.3, 2e-6, 0.02 * dram)


def entry_fill(entry: dict | None) -> float:
    """A calibration entry's ``fill`` exponent: the form of the model its rates were fitted in
    (0, also with no entry or no key: the hard minimum)."""
    return float((entry or {}).get("fill", 0.0))


@functools.cache
def _calibration(key: str, cc: tuple[int, int], props: DeviceProperties) -> Calibration:
    entry = load_calibrations().get(key)
    from sgblas.kernels import spec as registry

    defaults = {s.name: default_rates(s, cc, props) for s in registry.REGISTRY}
    if entry is None:
        return Calibration(key, DEFAULT_LAUNCH_S, defaults, False, {})
    rates = dict(defaults)
    for name, values in entry["rates"].items():
        if name in rates:  # a row since removed from the registry is ignored
            rates[name] = _rates(key, name, values)
    source = dict(entry.get("source", {}))
    moved = _transferred(key, entry, rates)
    if moved:
        source["transferred"] = moved
    fill = entry_fill(entry)
    if fill:  # the entry's form of the model, for every variant it times (defaults included)
        rates = {name: r._replace(fill=fill) for name, r in rates.items()}
    return Calibration(key, float(entry["launch_s"]), rates, True, source)


def _rates(key: str, name: str, values: list) -> Rates:
    if len(values) != len(RATE_FIELDS):
        raise ValueError(f"the calibration of {key} gives {name} {len(values)} rates; this sgblas reads "
                         f"{len(RATE_FIELDS)} ({', '.join(RATE_FIELDS)})")
    return Rates(*values)


def _transferred(key: str, entry: dict, rates: dict[str, Rates]) -> dict[str, str]:
    """Fill in ``rates`` for the registry's variants that ``entry`` has no rates for, from the
    entries of devices with the same compute capability and SM count that have them, as they
    are. A row added and calibrated on one such device (an H100 SXM) so starts on the other (an
    H200) from its measured behaviour, not from the defaults, until that device's own sweep
    refits it. The two have the same SMs, clocks and L2; scaling each rate by its median ratio
    between the entries moved the small tiles' rates, whose fitted bandwidth is their own
    limit and not the memory's, far from what they run at (``docs/design.md``, "Where it
    stands"). Returns ``{variant: the key it came from}``."""
    family = key.rsplit("/", 1)[0] + "/"
    moved: dict[str, str] = {}
    for other, theirs in sorted(load_calibrations().items()):
        if other == key or not other.startswith(family):
            continue
        for n in theirs["rates"]:
            if n in rates and n not in entry["rates"] and n not in moved:
                rates[n] = _rates(other, n, theirs["rates"][n])
                moved[n] = other
    return moved


_WARNED: set[str] = set()


def calibration_for(cc: tuple[int, int], props: DeviceProperties, warn: bool = True) -> Calibration:
    """The rates of the device with compute capability ``cc`` and properties ``props``: its
    calibration, or the defaults; ``warn``: say once per kind of device (logging, WARNING)
    that its predictions use the defaults."""
    key = device_key(cc, props)
    cal = _calibration(key, tuple(cc), props)
    if warn and not cal.calibrated and key not in _WARNED and tuple(cc) != (0, 0):
        _WARNED.add(key)
        log.warning("sgblas has no cost-model calibration for %s: kernels are chosen by times predicted from "
                    "default rates scaled by the device's clock and memory bandwidth ('python -m perf.calibrate' "
                    "measures this device)", key)
    return cal


def _slow_ld(ld: int) -> bool:
    return ld % 32 == 0 or (ld > 1 and ((ld - 1) & (ld - 2) == 0 or (ld + 1) & ld == 0))


def layout_flags(p: GemmProblem) -> int:
    """:data:`SLOW_LD` when a k-major operand's (A in T, B in N) leading dimension is a
    multiple of 32 or within one of a power of two; :data:`C_UNALIGNED` when C's columns do
    not all start on 128-byte lines."""
    flags = 0
    if (p.transa == "T" and _slow_ld(p.lda)) or (p.transb == "N" and _slow_ld(p.ldb)):
        flags |= SLOW_LD
    if p.c_ptr % 128 or p.ldc % 32:
        flags |= C_UNALIGNED
    return flags


def launch_seconds(r: Rates, sm_count: int, occ: int, n_ctas: int, cta_flops: float, ab_bytes: float,
                   c_bytes: float, flags: int, cta_bytes: float | None = None) -> float:
    """One launch of a kernel with rates ``r``: ``n_ctas`` CTAs of ``cta_flops`` each,
    ``ab_bytes`` of A and B loaded (``cta_bytes`` by each CTA's loop: their mean when None) and
    ``c_bytes`` of output written, on ``sm_count`` SMs holding ``occ`` of its CTAs each (the
    stream's launch gap not included)."""
    flops, lone, cta_s, bandwidth, slow_ld, c_bandwidth, c_unaligned, start_s, cta_bandwidth, fill = r
    per_sm = -(-n_ctas // sm_count)
    full = per_sm // occ
    rem = per_sm - full * occ
    compute = full * occ * cta_flops / flops
    rounds = full
    if rem:
        if fill:
            share = ((1.0 + (rem * lone) ** -fill) / (1.0 + (occ * lone) ** -fill)) ** (-1.0 / fill)
        else:
            share = rem * lone
        compute += rem * cta_flops / (flops * (share if share < 1.0 else 1.0))
        rounds += 1
    compute += rounds * cta_s
    memory = ab_bytes / bandwidth
    streamed = rounds * (ab_bytes / n_ctas if cta_bytes is None else cta_bytes) / cta_bandwidth
    # Neither limit is a wall: as the CTAs streaming at once approach the bandwidth they share,
    # each one's loads queue, so the two times add in quadrature rather than the larger ruling.
    memory = (memory * memory + streamed * streamed) ** 0.5
    if flags & SLOW_LD:
        compute *= slow_ld
        memory *= slow_ld
    c = c_bytes / c_bandwidth
    if flags & C_UNALIGNED:
        c *= c_unaligned
    body = compute if compute > memory else memory
    if c > body:
        body = c
    return start_s + body + c / rounds


def _tile_launch(launch_s: float, r: Rates, sm_count: int, occ: int, tile: tuple[int, int, int], tiles: int,
                 kc: int, splits: int, flags: int, out_bytes: float) -> float:
    """A tile kernel's launch (gap included): ``tiles`` output tiles of ``tile``, each in
    ``splits`` slices of ``kc`` of K."""
    bm, bn, bk = tile
    n_ctas = tiles * splits
    # A CTA's loop runs whole K steps: with k below a step it multiplies its padding too.
    return launch_s + launch_seconds(r, sm_count, occ, n_ctas, 2.0 * bm * bn * (-(-kc // bk) * bk),
                                     4.0 * n_ctas * (bm + bn) * kc, out_bytes, flags)


@functools.cache
def _reduce_spec() -> KernelSpec:
    # Looked up at the first prediction, not at import: the registry appends the reduction's
    # row after this module may have been imported.
    from sgblas.kernels import spec as registry

    return registry.by_name(_reduce.NAME)


def _reduce_launch(cal: Calibration, props: DeviceProperties, m: int, n: int) -> tuple:
    """What :func:`launch_seconds` takes for the reduction of an ``m`` x ``n`` C, per partial:
    ``(rates, SMs, occupancy, CTAs, bytes of one partial, bytes of C read and written, bytes of
    one partial a CTA's loop walks)``."""
    red = _reduce_spec()
    n_ctas = _reduce.grid(m, n)[0]
    # Each thread sums its 4 rows' partials one load round after another, so a CTA's loop takes
    # as long as its whole share of groups would, however few of its threads the output fills.
    per_cta = 16.0 * _reduce.THREADS * -(-_reduce.groups(m, n) // (_reduce.THREADS * n_ctas))
    return (cal.rates[red.name], props.sm_count, occupancy(red, props), n_ctas, 4.0 * _reduce.padded_rows(m) * n,
            8.0 * m * n, per_cta)


def _reduce_time(launch_s: float, launch: tuple, splits: int, flags: int) -> float:
    r, sm_count, occ, n_ctas, partial_bytes, c_bytes, per_cta = launch
    return launch_s + launch_seconds(r, sm_count, occ, n_ctas, 0.0, splits * partial_bytes, c_bytes, flags,
                                     splits * per_cta)


def _reduce_seconds(cal: Calibration, props: DeviceProperties, m: int, n: int, splits: int, flags: int) -> float:
    return _reduce_time(cal.launch_s, _reduce_launch(cal, props, m, n), splits, flags)


@functools.cache
def _skinny_shape(spec: KernelSpec) -> tuple[int, bool]:
    """A skinny variant's ``QC`` and whether its small side is m (its config's properties,
    computed once)."""
    return spec.config.QC, spec.config.small == "m"


@functools.cache
def _pack_spec() -> KernelSpec:
    from sgblas.kernels import spec as registry

    return registry.by_name(_pack.NAME)


def _full_launch(cal: Calibration, props: DeviceProperties, spec: KernelSpec, m: int, n: int, k: int,
                flags: int) -> float:
    """Tile variant ``spec``'s launch (gap included) over a whole ``m`` x ``n`` x ``k`` problem."""
    return _tile_launch(cal.launch_s, cal.rates[spec.name], props.sm_count, occupancy(spec, props), spec.tile,
                        ctas(spec, m, n), k, 1, flags, 4.0 * m * n)


def _whole_waves(cal: Calibration, props: DeviceProperties, spec: KernelSpec, ctas: int, k: int,
                 flags: int) -> float:
    """A tail plan's whole waves (gap included): the first ``ctas`` CTAs of ``spec``'s grid."""
    bm, bn, _ = spec.tile
    return cal.launch_s + launch_seconds(cal.rates[spec.name], props.sm_count, occupancy(spec, props), ctas,
                                         2.0 * bm * bn * k, 4.0 * ctas * (bm + bn) * k, 4.0 * ctas * bm * bn, flags)


def _split_launch(spec: KernelSpec, p: GemmProblem, props: DeviceProperties, cal: Calibration,
                  flags: int) -> tuple[Callable[[tuple, Split, Callable[[int], float]], float], tuple]:
    """How :func:`predict` times a split of split-K or skinny variant ``spec`` for ``p``: a
    function of ``(terms, split, the reduction's time by partials)``, and the terms, which all
    the variant's splits share (a variant has many: they are taken once)."""
    m, n, k = p.m, p.n, p.k
    launch_s, r, sm_count, occ = cal.launch_s, cal.rates[spec.name], props.sm_count, occupancy(spec, props)
    if spec.role == "skinny":
        tiles = spec.grid(m, n, 0)[0]
        qc, small_m = _skinny_shape(spec)
        small, large = (m, n) if small_m else (n, m)
        return _skinny_seconds, (launch_s, r, sm_count, occ, tiles, qc, 4 * -(-small // 4), small,
                                 4.0 * k * (large + tiles * small), 4.0 * m * n, flags & ~SLOW_LD)
    bm, bn, bk = spec.tile
    return _splitk_seconds, (launch_s, r, sm_count, occ, 2.0 * bm * bn, bk, ctas(spec, m, n), 4.0 * (bm + bn),
                             4.0 * _reduce.padded_rows(m) * n, flags & ~C_UNALIGNED)


def _skinny_seconds(terms: tuple, split: Split, reduce_seconds: Callable[[int], float]) -> float:
    # A CTA works on its whole slice of the large dimension (QC) and on the row blocks of 4
    # that hold the small one, whatever of them the problem fills: its loop's time follows
    # its slice of K, not the useful work (1 x 1 x 2522 in one CTA is as slow as 1 x 512).
    launch_s, r, sm_count, occ, tiles, qc, rows, small, ab_bytes, c_bytes, flags = terms
    s, kc, _ = split
    t = launch_s + launch_seconds(r, sm_count, occ, tiles * s, 2.0 * qc * rows * kc, ab_bytes,
                                  c_bytes * s if s > 1 else c_bytes, flags, 4.0 * kc * (qc + small))
    return t + (reduce_seconds(s) if s > 1 else 0.0)


#: The hand-off between two slices of a serial split, besides moving C's tile: the release's
#: fence and atomic, and the next slice's poll seeing it (``docs/design.md``, "Serial splits").
SERIAL_HANDOFF_S: float = 0.5e-6


def serial_step(r: Rates, tile_flops: float) -> float:
    """One link of a serial split's chain: the hand-off and a CTA reading and writing its C tile
    (``tile_flops`` = 2 x BM x BN, so 4x that in bytes) at its own streaming rate. A tile's
    slices add into C one after another, so its S links are a critical path that its slices'
    work does not hide: a serial split is predicted as its slice launch (C read and written
    once from memory: the tile stays in L2 between its slices) plus S links and the memset's
    launch gap, and no reduction."""
    return SERIAL_HANDOFF_S + 4.0 * tile_flops / r.cta_bandwidth


def _splitk_seconds(terms: tuple, split: Split, reduce_seconds: Callable[[int], float]) -> float:
    # _tile_launch's sum from terms taken once per variant: a shape's planning times many splits.
    launch_s, r, sm_count, occ, tile_flops, bk, tiles, tile_loads, partial_bytes, flags = terms
    s, kc, serial = split
    n_ctas = tiles * s
    if serial:
        return (2.0 * launch_s + launch_seconds(r, sm_count, occ, n_ctas, tile_flops * (-(-kc // bk) * bk),
                                                tile_loads * n_ctas * kc, 2.0 * partial_bytes, flags)
                + s * serial_step(r, tile_flops))
    return (launch_s + launch_seconds(r, sm_count, occ, n_ctas, tile_flops * (-(-kc // bk) * bk),
                                      tile_loads * n_ctas * kc, partial_bytes * s, flags)
            + reduce_seconds(s))


#: The roles whose candidates are not one launch of a tile kernel over the whole problem.
_NOT_ONE_TILE_LAUNCH = ("splitk", "skinny", "packed")


def predict(c: Candidate, p: GemmProblem, props: DeviceProperties, cal: Calibration,
            rectangle_seconds: Callable[[tuple[int, int, int, int]], float] | None = None,
            flags: int | None = None, reduce_seconds: Callable[[int], float] | None = None) -> float:
    """Predicted seconds of candidate ``c`` for ``p`` (launch gaps included).

    A tail plan's rectangles are timed by ``rectangle_seconds`` (their own choice's predicted
    time, which the dispatcher supplies); without it a tail plan's prediction counts only its
    whole waves and the rectangles' launch gaps: a lower bound. ``flags``: ``p``'s
    :func:`layout_flags`, when the caller has them; ``reduce_seconds``: the reduction's time
    for a number of partials of ``p``, when the caller keeps them (:meth:`Floor.reduce_seconds`).
    """
    spec, split, tail = c
    m, n, k = p.m, p.n, p.k
    if flags is None:
        flags = layout_flags(p)
    role = spec.role
    if tail is None and role not in _NOT_ONE_TILE_LAUNCH:  # most candidates are
        return _full_launch(cal, props, spec, m, n, k, flags)
    if reduce_seconds is None:
        def reduce_seconds(s: int) -> float:
            return _reduce_seconds(cal, props, m, n, s, flags)
    if role == "splitk" or role == "skinny":
        seconds, terms = _split_launch(spec, p, props, cal, flags)
        return seconds(terms, split, reduce_seconds)
    if role == "packed":
        pk = _pack_spec()
        t = 0.0
        for rows, cols, _ in _packed.copies(spec.pair, m, n, k):
            t += cal.launch_s + launch_seconds(cal.rates[pk.name], props.sm_count, occupancy(pk, props),
                                               pk.grid(rows, cols, 0)[0], 0.0, 4.0 * rows * cols,
                                               4.0 * rows * cols, 0)
        return t + _full_launch(cal, props, spec, m, n, k, flags & ~SLOW_LD)
    t = _whole_waves(cal, props, spec, tail.ctas, k, flags)
    for rect in tail.rects:
        t += rectangle_seconds(rect) if rectangle_seconds is not None else cal.launch_s
    return t


class Floor:
    """Lower bounds of the candidates of one problem, cheaper than their predictions: what the
    dispatcher prunes with when planning a call (a candidate whose bound is no better than the
    best prediction so far cannot be chosen); and their predictions, with what the problem's
    candidates share taken once."""

    def __init__(self, p: GemmProblem, props: DeviceProperties, cal: Calibration, specs: list[KernelSpec]) -> None:
        """``specs``: the variants that may run ``p`` (a tail plan's rectangles choose among them)."""
        self.p, self.props, self.cal = p, props, cal
        self.flags = layout_flags(p)
        self.slow = bool(self.flags & SLOW_LD)
        self.specs = specs
        self._fastest: float | None = None
        self.reduce: dict[int, float] = {}
        self._reduce_launch: tuple | None = None
        # By variant, what the bounds and times of its candidates share: a splitting variant
        # has many.
        self._launch_bounds: dict[KernelSpec, float] = {}
        self._tile_bounds: dict[KernelSpec, tuple] = {}
        self._split_times: dict[KernelSpec, tuple] = {}
        self._ldw = _reduce.padded_rows(p.m)
        # What one launch of a tile kernel reads of the problem and the device.
        self._launch_terms = (cal.launch_s, props.sm_count, p.m, p.n, p.k, 4.0 * p.m * p.n)

    @property
    def fastest(self) -> float:
        """The largest FLOP rate of the variants, each divided by the slow layout's factor
        where that is below 1 and applies: what a tail plan's rectangles are bounded by (taken
        when one is first bounded: most problems have no tail plan)."""
        if self._fastest is None:
            rates = self.cal.rates
            self._fastest = max(rates[s.name].flops / self._slow_below_one(s, rates[s.name]) for s in self.specs)
        return self._fastest

    def _slow_below_one(self, spec: KernelSpec, r: Rates) -> float:
        """The slow layout's factor where this problem has that layout, ``spec``'s prediction
        applies it (a skinny variant's does not) and a fit put it below 1; else 1: what a lower
        bound may multiply by (a fit may find a variant faster at those leading dimensions)."""
        return r.slow_ld if self.slow and r.slow_ld < 1.0 and spec.role != "skinny" else 1.0

    def _work(self, m: int, n: int, k: int, flops: float) -> float:
        return 2.0 * m * n * k / (self.props.sm_count * flops)

    def lower_bound(self, c: Candidate) -> float:
        """At most :func:`predict`'s time of ``c``: its work at its variant's full rate on every
        SM, its launch gaps and start, and for a split its reduction (exact); for a tail plan, its whole
        waves (exact) and each rectangle's work at the fastest variant's rate."""
        spec, split, tail = c
        if tail is not None:
            return predict(c, self.p, self.props, self.cal, no_rectangles, self.flags) + self.rectangles(c)
        role = spec.role
        s = split.splits if split is not None else 1
        if s > 1 and role == "splitk":
            if split.serial:
                bm, bn, _ = spec.tile
                return (self._tile_bound(spec, split.k_chunk, 8.0 * self._ldw * self.p.n, False) + self.cal.launch_s
                        + s * serial_step(self.cal.rates[spec.name], 2.0 * bm * bn))
            out = 4.0 * s * self._ldw * self.p.n
            return self._tile_bound(spec, split.k_chunk, out, False) + self.reduce_seconds(s)
        p = self.p
        if role in ("gemm", "packed"):
            return self._tile_bound(spec, p.k, 4.0 * p.m * p.n, bool(self.flags & C_UNALIGNED))
        t = self._launch_bound(spec)
        return t + self.reduce_seconds(s) if s > 1 else t

    def _tile_bound(self, spec: KernelSpec, k_chunk: int, out_bytes: float, unaligned: bool) -> float:
        """At most a tile kernel's launch of :func:`predict` (for a packed variant, the launch
        after its copies): its gap and start, then the largest of the work at the full rate
        (plus a round's ``cta_s``), one CTA streaming its K (or slice) at ``cta_bandwidth`` (the
        busiest SM runs at least one round) and the output's bytes at ``c_bandwidth``. The
        layout factors enter only where they are below 1."""
        terms = self._tile_bounds.get(spec)
        if terms is None:
            p, cal = self.p, self.cal
            r = cal.rates[spec.name]
            bm, bn, _ = spec.tile
            slow = self._slow_below_one(spec, r) if self.slow else 1.0
            compute = (r.cta_s + self._work(p.m, p.n, p.k, r.flops)) * slow
            terms = self._tile_bounds[spec] = (r, cal.launch_s + r.start_s, compute, 4.0 * (bm + bn), slow)
        r, start, compute, loads, slow = terms
        streamed = loads * k_chunk / r.cta_bandwidth * slow
        out = out_bytes / r.c_bandwidth * (r.c_unaligned if unaligned and r.c_unaligned < 1.0 else 1.0)
        body = compute if compute > streamed else streamed
        return start + (body if body > out else out)

    def variant_bound(self, spec: KernelSpec) -> float:
        """At most :meth:`lower_bound` of every candidate of ``spec``, whatever its split: a
        split-K variant writes at least two partials, and the reduction's time grows with them;
        from :data:`~sgblas.dispatch.candidates.ACCURACY_SPLIT_K` on, where it may split serially
        instead, it launches at least a memset besides."""
        t = self._launch_bound(spec)
        if spec.role != "splitk":
            return t
        return t + (self.reduce_seconds(2) if self.p.k < ACCURACY_SPLIT_K else self.cal.launch_s)

    def reduction_bound(self) -> float:
        """At most :meth:`variant_bound` of every split-K variant: a launch gap and the
        reduction of two partials."""
        return self.cal.launch_s + self.reduce_seconds(2)

    def _launch_bound(self, spec: KernelSpec) -> float:
        """At most the time of ``spec``'s launch for the whole problem: the launch gap, its start,
        one round's ``cta_s`` and the work at the variant's full rate on every SM, times
        :meth:`_slow_below_one`."""
        t = self._launch_bounds.get(spec)
        if t is None:
            p, cal = self.p, self.cal
            r = cal.rates[spec.name]
            compute = r.cta_s + self._work(p.m, p.n, p.k, r.flops)
            if self.slow:  # most problems have no slow layout: no call
                compute *= self._slow_below_one(spec, r)
            t = self._launch_bounds[spec] = cal.launch_s + r.start_s + compute
        return t

    def reduce_seconds(self, splits: int) -> float:
        """The reduction's predicted time for ``splits`` partials of this problem (each count
        computed once: a problem's splitting variants share them)."""
        t = self.reduce.get(splits)
        if t is None:
            if self._reduce_launch is None:
                self._reduce_launch = _reduce_launch(self.cal, self.props, self.p.m, self.p.n)
            t = self.reduce[splits] = _reduce_time(self.cal.launch_s, self._reduce_launch, splits, self.flags)
        return t

    def predict(self, c: Candidate,
                rectangle_seconds: Callable[[tuple[int, int, int, int]], float] | None = None) -> float:
        """:func:`predict` of ``c`` for this problem, with the reductions' times kept. A split,
        or one launch of a tile kernel (most candidates), is timed here as :func:`predict` times
        it, from what the problem's (and the variant's) candidates share."""
        spec, split, tail = c
        if split is not None:  # a split-K or skinny variant's
            seconds, terms = self.split_terms(spec)
            return seconds(terms, split, self.reduce_seconds)
        if tail is None and spec.role not in _NOT_ONE_TILE_LAUNCH:
            # _full_launch inlined, from terms taken once: a call's planning predicts most of its
            # candidates here, where an extra call and the lookups show in a plan-cache miss.
            launch_s, sm_count, m, n, k, c_bytes = self._launch_terms
            occ, bm, bn, bk = _tile_shape(spec, self.props)
            tiles = -(-m // bm) * -(-n // bn)
            return launch_s + launch_seconds(self.cal.rates[spec.name], sm_count, occ, tiles,
                                             2.0 * bm * bn * (-(-k // bk) * bk), 4.0 * tiles * (bm + bn) * k, c_bytes,
                                             self.flags)
        return predict(c, self.p, self.props, self.cal, rectangle_seconds, self.flags, self.reduce_seconds)

    def split_terms(self, spec: KernelSpec) -> tuple:
        """``(function, terms)`` that time split-K or skinny variant ``spec``'s splits of this
        problem: ``function(terms, split, self.reduce_seconds)`` is :meth:`predict` of its
        candidate with ``split``."""
        kept = self._split_times.get(spec)
        if kept is None:
            kept = self._split_times[spec] = _split_launch(spec, self.p, self.props, self.cal, self.flags)
        return kept

    def whole_waves(self, c: Candidate) -> float:
        """:func:`predict` of tail plan ``c``'s whole waves alone (``rectangle_seconds``
        :func:`no_rectangles`)."""
        return _whole_waves(self.cal, self.props, c.spec, c.tail.ctas, self.p.k, self.flags)

    def rectangles(self, c: Candidate) -> float:
        """At most the time of a tail plan's rectangles: each one's launch gap and its work at
        the fastest variant's rate on every SM."""
        k, launch_s, fastest = self.p.k, self.cal.launch_s, self.fastest
        t = 0.0
        for _, _, rows, cols in c.tail.rects:
            t += launch_s + self._work(rows, cols, k, fastest)
        return t


@functools.cache
def _tile_shape(spec: KernelSpec, props: DeviceProperties) -> tuple[int, int, int, int]:
    """``(occupancy, BM, BN, BK)`` of tile variant ``spec`` on ``props``'s device."""
    return (occupancy(spec, props),) + tuple(spec.tile)


def no_rectangles(rect: tuple[int, int, int, int]) -> float:
    """``predict``'s ``rectangle_seconds`` for a tail plan's whole waves alone."""
    return 0.0
