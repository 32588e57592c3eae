"""The one shared, mergeable binning of store compare, and the drift metrics computed on it.

No first pass over the data is needed, because the bins are fixed by the number format
alone:

* **float16** values are counted by their exact 16-bit pattern (65,536 bins). Every value
  of a bin is the same number, so KS and Wasserstein on these counts are exact.
* **float32** (and float64, narrowed to float32) values are counted by the top 16 bits of
  their 32-bit pattern: sign, exponent and the 7 leading mantissa bits. A bin is the
  interval of all floats sharing those bits, so the binning preserves order and a bin's
  width is at most ``FLOAT32_RELATIVE_RESOLUTION`` (``2**-7``) times the magnitude of
  its values. Values stand for their bin's midpoint, so each moves by at most half a
  width: ``wasserstein`` is within ``2**-7 * max|x|`` of the exact distance, and
  ``ks_statistic`` within the largest share of either store's values in one bin.
* **integers** (the derived per-sample counts) are counted per value, exactly.

A field stored as float16 in one store and float32 in the other is compared on the
float32 bins (every float16 is a float32, so its counts move into the float32 bin of
its value exactly), and so is a field stored as float16 in some shards of one store and
float32 in others (its histogram reports the wider dtype). Counts add, so partials merge
exactly in any grouping.

Metrics, from the two count vectors over the shared bins in value order:

* ``ks_statistic``: ``max |F_a - F_b|`` of the two empirical CDFs;
* ``wasserstein``: ``sum |F_a - F_b| * (x[k+1] - x[k])`` (the 1-D earth mover's
  distance, as ``scipy.stats.wasserstein_distance``);
* ``js_distance``: the Jensen-Shannon distance in base 2 (0..1),
  ``scipy.spatial.distance.jensenshannon(p, q, base=2)``, of the two stores' shares in
  ``JS_BINS`` groups of consecutive shared bins cut at the quantiles of both stores
  pooled (each store weighted 1/2). On the raw 65,536 bins the distance of two samples
  of one continuous distribution would approach 1 from sampling noise alone;
* ``psi``: the population stability index ``sum (p - q) ln(p / q)`` over
  ``PSI_BINS`` groups of consecutive shared bins cut at store A's deciles, with shares
  below ``PSI_EPSILON`` raised to it (an empty group would make it infinite).

Identical count vectors give exactly 0 for every metric.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from vinlens.store.diagnostics.kernels import Moments, float16_counts

__all__ = [
    "DISPLAY_BINS",
    "FLOAT32_RELATIVE_RESOLUTION",
    "JS_BINS",
    "PENDING_VALUES",
    "PSI_BINS",
    "PSI_EPSILON",
    "DriftMetrics",
    "FieldHistogram",
    "HistogramSummary",
    "drift_metrics",
]

#: Bin width of float32 values relative to their magnitude (7 mantissa bits kept).
FLOAT32_RELATIVE_RESOLUTION = 2.0**-7
#: Groups of the population stability index (store A's deciles).
PSI_BINS = 10
#: Smallest share of a PSI group (empty groups are raised to it).
PSI_EPSILON = 1e-4
#: Groups of the Jensen-Shannon distance (pooled quantiles of both stores).
JS_BINS = 64
#: Equal-width bins of the display histogram carried by each field's record.
DISPLAY_BINS = 64

FLOAT16 = "float16"
FLOAT32 = "float32"
INTEGER = "integer"

_PATTERNS = np.arange(1 << 16, dtype=np.uint32)


def _float16_values() -> np.ndarray:
    return _PATTERNS.astype(np.uint16).view(np.float16).astype(np.float64)


def _float32_midpoints() -> np.ndarray:
    """Midpoint of every float32 bin (NaN for the bins of infinities and NaNs)."""
    with np.errstate(invalid="ignore"):
        lo = (_PATTERNS << 16).astype(np.uint32).view(np.float32).astype(np.float64)
        hi = ((_PATTERNS << 16) | 0xFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
        mid = (lo + hi) / 2.0
    mid[~(np.isfinite(lo) & np.isfinite(hi))] = np.nan
    return mid


@dataclass(frozen=True)
class _Table:
    values: np.ndarray  # float64 per bin index; NaN where the bin holds no finite value
    order: np.ndarray  # finite bin indices sorted by value (stable)
    nonfinite: np.ndarray  # bin indices of infinities and NaNs


_TABLES: dict[str, _Table] = {}
_F16_TO_F32: np.ndarray | None = None


def _table(kind: str) -> _Table:
    table = _TABLES.get(kind)
    if table is None:
        values = _float16_values() if kind == FLOAT16 else _float32_midpoints()
        finite = np.flatnonzero(np.isfinite(values))
        order = finite[np.argsort(values[finite], kind="stable")]
        table = _TABLES[kind] = _Table(values, order, np.flatnonzero(~np.isfinite(values)))
    return table


def _f16_to_f32() -> np.ndarray:
    """The float32 bin of every float16 bit pattern."""
    global _F16_TO_F32
    if _F16_TO_F32 is None:
        as32 = _PATTERNS.astype(np.uint16).view(np.float16).astype(np.float32)
        _F16_TO_F32 = (as32.view(np.uint32) >> 16).astype(np.intp)
    return _F16_TO_F32


#: Per float dtype: its bits' unsigned type, the mask of all bits but the sign, the
#: pattern of +inf (a larger magnitude is a NaN) and the pattern of ``dtype(nan)``.
_BIT_LAYOUT: dict[type[np.floating[Any]], tuple[type[np.unsignedinteger[Any]], int, int, int]] = {
    np.float16: (np.uint16, 0x7FFF, 0x7C00, 0x7E00),
    np.float32: (np.uint32, 0x7FFFFFFF, 0x7F800000, 0x7FC00000),
}


def _folded_bits(values: np.ndarray, dtype: type[np.floating[Any]]) -> np.ndarray:
    """Bit patterns of ``values`` as ``dtype``, -0.0 folded into +0.0, every NaN into one.

    On the integer patterns (a new array; ``values`` is never written to): a zero
    magnitude becomes +0.0 and a magnitude above infinity's becomes ``dtype(nan)``.
    """
    uint, magnitude_mask, inf_bits, nan_bits = _BIT_LAYOUT[dtype]
    bits = np.ascontiguousarray(values, dtype=dtype).reshape(-1).view(uint)
    magnitude = bits & uint(magnitude_mask)
    out: np.ndarray = np.where(magnitude == 0, uint(0), bits)
    nan = magnitude > uint(inf_bits)
    if nan.any():
        out[nan] = uint(nan_bits)
    return out


def float32_bins(values: np.ndarray) -> np.ndarray:
    """Per value, its float32 bin index (the top 16 bits of the bit pattern) as uint16.

    -0.0 is binned as +0.0 and all NaN payloads as one NaN: equal numbers share a bin.
    """
    return (_folded_bits(values, np.float32) >> 16).astype(np.uint16)


#: Bin indices a float histogram holds uncounted before it adds them into its 65,536 bins.
#: A small batch (one camera of a few rows) is then never worth a pass over every bin: it
#: is kept as its indices, merging appends them, and they are counted in place once this
#: many have gathered (or when the counts are read).
PENDING_VALUES = 1 << 18
#: Batches at least this large are counted over all bins (``float16_counts``) and added in
#: place; smaller ones are added index by index (``np.add.at``, cost proportional to them).
_DENSE_BATCH = 1 << 14


def _count_into(counts: np.ndarray, patterns: np.ndarray) -> None:
    """Add the counts of the uint16 bin indices ``patterns`` into ``counts`` in place."""
    if patterns.size >= _DENSE_BATCH:
        counts += float16_counts(patterns.view(np.float16))
    elif patterns.size:
        np.add.at(counts, patterns, 1)


class FieldHistogram:
    """One field's counts on the shared bins of one store, plus its exact moments.

    Follows the accumulator protocol: :meth:`update` adds values in place, :meth:`merge`
    adds another histogram's counts into this one and never changes the other.
    Non-finite values are not counted (the scan reports them as integrity problems).
    Counts are added into the bins in place; small batches wait as bin indices
    (:data:`PENDING_VALUES`) and :attr:`counts` counts them in before it answers.
    """

    __slots__ = ("_counts", "_pending", "_pending_size", "dtype", "integers", "kind", "moments")

    def __init__(self, kind: str, dtype: str) -> None:
        if kind not in (FLOAT16, FLOAT32, INTEGER):
            raise ValueError(f"histogram kind must be float16, float32 or integer, got {kind!r}")
        self.kind = kind
        self.dtype = dtype
        self._counts: np.ndarray | None = None  # int64 per bin (float kinds)
        self._pending: list[np.ndarray] = []  # uint16 bin indices not yet in _counts
        self._pending_size = 0
        self.integers: Counter[int] = Counter()  # value -> count (integer kind)
        self.moments = Moments()  # float32 moments (float16 ones follow from the counts)

    @property
    def counts(self) -> np.ndarray | None:
        """int64 count per bin (float kinds; ``None`` before any value), pending ones in."""
        self._flush()
        return self._counts

    @classmethod
    def for_dtype(cls, dtype: np.dtype[Any] | str) -> FieldHistogram:
        d = np.dtype(dtype)
        if d == np.float16:
            return cls(FLOAT16, d.name)
        if d.kind == "f":
            return cls(FLOAT32, d.name)
        if d.kind in "iub":
            return cls(INTEGER, d.name)
        raise ValueError(f"cannot compare values of dtype {d.name!r}: expected a number")

    def update(self, values: np.ndarray, *, also: FieldHistogram | None = None) -> int:
        """Add ``values`` (any shape); returns how many were not finite (not counted).

        ``also`` (a histogram of the same kind, e.g. the whole field beside one camera's
        part) gets the same values, binned once: equal to updating a fresh histogram with
        ``values`` and merging it into both.
        """
        if also is not None and (also.kind != self.kind or self.kind == INTEGER):
            one = FieldHistogram(self.kind, self.dtype)
            nonfinite = one.update(values)
            self.merge(one)
            also.merge(one)
            return nonfinite
        if values.size == 0:
            return 0
        if self.kind == INTEGER:
            uniq, counts = np.unique(values.reshape(-1), return_counts=True)
            self.integers.update(dict(zip(uniq.tolist(), counts.tolist(), strict=True)))
            return 0
        if self.kind == FLOAT16:
            patterns = _folded_bits(values, np.float16)
            # Infinities and NaNs: every exponent bit set.
            nonfinite = int(np.count_nonzero((patterns & 0x7C00) == 0x7C00))
        elif also is None:
            nonfinite = self.moments.update(values)
            patterns = float32_bins(values)
        else:
            moments = Moments()
            nonfinite = moments.update(values)
            self.moments.merge(moments)
            also.moments.merge(moments)
            patterns = float32_bins(values)
        self._add_patterns(patterns)
        if also is not None:
            if also.dtype != self.dtype:
                also.dtype = np.promote_types(also.dtype, self.dtype).name
            also._add_patterns(patterns)
        return nonfinite

    def _dense(self) -> np.ndarray:
        if self._counts is None:
            self._counts = np.zeros(1 << 16, dtype=np.int64)
        return self._counts

    def _add_patterns(self, patterns: np.ndarray) -> None:
        if patterns.size >= PENDING_VALUES:
            _count_into(self._dense(), patterns)
            return
        # Kept, never written to: the arrays are this histogram's own (or, after a merge,
        # shared read-only with the other histogram).
        self._pending.append(patterns)
        self._pending_size += int(patterns.size)
        if self._pending_size >= PENDING_VALUES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        pending = self._pending
        patterns = pending[0] if len(pending) == 1 else np.concatenate(pending)
        self._pending = []
        self._pending_size = 0
        _count_into(self._dense(), patterns)

    def _add_counts(self, counts: np.ndarray) -> None:
        if self._counts is None:
            self._counts = counts.astype(np.int64, copy=True)
        else:
            self._counts += counts

    def merge(self, other: FieldHistogram) -> FieldHistogram:
        """Add ``other``'s counts into this histogram (``other`` is never changed).

        A float16 and a float32 histogram of one field (its dtype differs between shards
        of one store) merge on the float32 bins, as two stores of different dtypes are
        compared: the float16 counts move into the float32 bin of their value exactly and
        the dtype becomes the wider one.
        """
        if other.kind != self.kind:
            if INTEGER in (self.kind, other.kind):
                raise ValueError(
                    f"cannot merge a {other.kind} histogram into a {self.kind} one "
                    "(a field holds integers in one shard and floats in another)"
                )
            if self.kind == FLOAT16:
                self._widen()
            other = other.copy()
            other._widen()
        if other.dtype != self.dtype:
            self.dtype = np.promote_types(self.dtype, other.dtype).name
        if other._counts is not None:
            self._add_counts(other._counts)
        for patterns in other._pending:
            self._add_patterns(patterns)
        self.integers.update(other.integers)
        self.moments.merge(other.moments)
        return self

    def copy(self) -> FieldHistogram:
        out = FieldHistogram(self.kind, self.dtype)
        out._counts = None if self._counts is None else self._counts.copy()
        out._pending = list(self._pending)
        out._pending_size = self._pending_size
        out.integers = Counter(self.integers)
        out.moments = Moments().merge(self.moments)
        return out

    def _widen(self) -> None:
        """Move a float16 histogram onto the float32 bins in place (exactly)."""
        if self.kind != FLOAT16:
            return
        self._flush()
        self.kind = FLOAT32
        counts16 = self._counts
        if counts16 is None:
            return
        counts = np.zeros(1 << 16, dtype=np.int64)
        np.add.at(counts, _f16_to_f32(), counts16)
        self._counts = counts
        # float16 moments follow from the bit-pattern counts; the float32 kind keeps them
        # beside its own exact sums (non-finite patterns are left out at finish).
        own = Moments()
        own.counts16 = counts16.copy()
        self.moments.merge(own)

    # Pickled sparsely: most of the 65,536 bins of a field are empty.
    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "kind": self.kind,
            "dtype": self.dtype,
            "integers": dict(self.integers),
            "moments": self.moments,
        }
        counts = self.counts
        if counts is not None:
            used = np.flatnonzero(counts)
            state["bins"] = used.astype(np.uint16)
            state["bin_counts"] = counts[used]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.kind = state["kind"]
        self.dtype = state["dtype"]
        self.integers = Counter(state["integers"])
        self.moments = state["moments"]
        self._counts = None
        self._pending = []
        self._pending_size = 0
        if "bins" in state:
            counts = np.zeros(1 << 16, dtype=np.int64)
            counts[state["bins"].astype(np.intp)] = state["bin_counts"]
            self._counts = counts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldHistogram):
            return NotImplemented
        return self.summary() == other.summary()

    __hash__ = None  # type: ignore[assignment]

    def summary(self) -> HistogramSummary:
        """Count, exact mean and std (population), and the counts in value order."""
        if self.kind == INTEGER:
            items = sorted((v, c) for v, c in self.integers.items() if c > 0)
            n = sum(c for _, c in items)
            values = np.asarray([v for v, _ in items], dtype=np.float64)
            counts = np.asarray([c for _, c in items], dtype=np.int64)
            if n == 0:
                return HistogramSummary(INTEGER, self.dtype, 0, None, None, values, counts)
            s = sum(v * c for v, c in items)
            q = sum(v * v * c for v, c in items)
            variance = (q * n - s * s) / (n * n)
            return HistogramSummary(
                INTEGER, self.dtype, n, s / n, math.sqrt(variance), values, counts
            )
        flushed = self.counts
        counts = flushed if flushed is not None else np.zeros(1 << 16, dtype=np.int64)
        table = _table(self.kind)
        ordered = counts[table.order]
        keep = ordered > 0
        if self.kind == FLOAT16:
            moments = Moments()
            moments.counts16 = counts
        else:
            moments = self.moments
        n, mean, std, _, _ = moments.finish()
        return HistogramSummary(
            self.kind,
            self.dtype,
            int(n),
            mean,
            std,
            table.values[table.order[keep]],
            ordered[keep],
            bins=table.order[keep],
        )


@dataclass(frozen=True, eq=False)
class HistogramSummary:
    """A finished histogram: non-empty bins in value order (``values`` their representatives)."""

    kind: str
    dtype: str
    count: int
    mean: float | None
    std: float | None
    values: np.ndarray  # float64, ascending
    counts: np.ndarray  # int64, > 0
    bins: np.ndarray | None = None  # bin index of each entry (float kinds)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HistogramSummary):
            return NotImplemented
        return (
            (self.kind, self.dtype, self.count, self.mean, self.std)
            == (other.kind, other.dtype, other.count, other.mean, other.std)
            and np.array_equal(self.values, other.values)
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None  # type: ignore[assignment]

    def as_float32(self) -> HistogramSummary:
        """This float16 histogram moved onto the float32 bins (exactly; moments kept)."""
        if self.kind != FLOAT16 or self.bins is None:
            return self
        counts = np.zeros(1 << 16, dtype=np.int64)
        np.add.at(counts, _f16_to_f32()[self.bins], self.counts)
        table = _table(FLOAT32)
        ordered = counts[table.order]
        keep = ordered > 0
        return HistogramSummary(
            FLOAT32,
            self.dtype,
            self.count,
            self.mean,
            self.std,
            table.values[table.order[keep]],
            ordered[keep],
            bins=table.order[keep],
        )


@dataclass(frozen=True)
class DriftMetrics:
    psi: float | None
    js_distance: float | None
    wasserstein: float | None
    ks_statistic: float | None
    exact: bool
    edges: tuple[float, ...]
    display_a: tuple[int, ...]
    display_b: tuple[int, ...]


def _shared(a: HistogramSummary, b: HistogramSummary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both histograms on the union of their bins: ``(values, counts_a, counts_b)``."""
    values = np.union1d(a.values, b.values)
    ca = np.zeros(values.size, dtype=np.int64)
    cb = np.zeros(values.size, dtype=np.int64)
    # Added, not assigned: two bins with one representative value both keep their counts.
    np.add.at(ca, np.searchsorted(values, a.values), a.counts)
    np.add.at(cb, np.searchsorted(values, b.values), b.counts)
    return values, ca, cb


def _display(
    values: np.ndarray, ca: np.ndarray, cb: np.ndarray, kind: str
) -> tuple[tuple[float, ...], tuple[int, ...], tuple[int, ...]]:
    """Equal-width display bins over both stores' range (unit bins for small integer ranges)."""
    if values.size == 0:
        return (), (), ()
    low, high = float(values[0]), float(values[-1])
    if kind == INTEGER and high - low < DISPLAY_BINS:
        edges = np.arange(low - 0.5, high + 1.0, 1.0)
    elif high == low:
        edges = np.asarray([low - 0.5, high + 0.5])
    else:
        edges = np.linspace(low, high, DISPLAY_BINS + 1)
    index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    da = np.bincount(index, weights=ca, minlength=edges.size - 1)
    db = np.bincount(index, weights=cb, minlength=edges.size - 1)
    return (
        tuple(float(e) for e in edges),
        tuple(round(float(x)) for x in da),
        tuple(round(float(x)) for x in db),
    )


def _js_distance(p: np.ndarray, q: np.ndarray) -> float:
    m = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / m), 0.0)
        kl_q = np.where(q > 0, q * np.log2(q / m), 0.0)
    divergence = 0.5 * float(kl_p.sum()) + 0.5 * float(kl_q.sum())
    return min(1.0, math.sqrt(max(0.0, divergence)))


def _groups(shares: np.ndarray, groups: int) -> np.ndarray:
    """Group of each bin: consecutive bins cut where the cumulative ``shares`` cross k/groups."""
    before = np.concatenate([[0.0], np.cumsum(shares)[:-1]])
    group: np.ndarray = np.minimum(groups - 1, np.floor(before * groups).astype(np.int64))
    return group


def _psi(p: np.ndarray, q: np.ndarray) -> float:
    group = _groups(p, PSI_BINS)
    ga = np.maximum(np.bincount(group, weights=p, minlength=PSI_BINS), PSI_EPSILON)
    gb = np.maximum(np.bincount(group, weights=q, minlength=PSI_BINS), PSI_EPSILON)
    return float(np.sum((ga - gb) * np.log(ga / gb)))


def _js(p: np.ndarray, q: np.ndarray) -> float:
    group = _groups(0.5 * (p + q), JS_BINS)
    ga = np.bincount(group, weights=p, minlength=JS_BINS)
    gb = np.bincount(group, weights=q, minlength=JS_BINS)
    return _js_distance(ga, gb)


def drift_metrics(a: HistogramSummary, b: HistogramSummary) -> DriftMetrics:
    """The four metrics and a display histogram of two stores' histograms of one field."""
    if a.kind != b.kind and INTEGER not in (a.kind, b.kind):
        a, b = a.as_float32(), b.as_float32()
    # Integers against floats (a dtype change) compare as exact points on the union.
    kind = a.kind if a.kind == b.kind else FLOAT32
    values, ca, cb = _shared(a, b)
    edges, display_a, display_b = _display(values, ca, cb, kind)
    exact = kind != FLOAT32
    na, nb = int(ca.sum()), int(cb.sum())
    if na == 0 or nb == 0:
        return DriftMetrics(None, None, None, None, exact, edges, display_a, display_b)
    cdf_a = np.cumsum(ca) / na
    cdf_b = np.cumsum(cb) / nb
    gap = np.abs(cdf_a - cdf_b)
    ks = float(gap.max())
    wasserstein = float(np.sum(gap[:-1] * np.diff(values)))
    p, q = ca / na, cb / nb
    js = _js(p, q)
    psi = _psi(p, q)
    return DriftMetrics(psi, js, wasserstein, ks, exact, edges, display_a, display_b)
