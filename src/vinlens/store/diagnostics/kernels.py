"""Exact, mergeable numeric kernels: summaries, backbone moments and float16 bit-pattern counts.

Every state here merges associatively and exactly, so a store's numbers do not depend on
how its shards were grouped (one process, a pool, a cluster):

* sums are kept as exact dyadic rationals (a Python ``int`` scaled by a fixed power of
  two: every float64 is an integer multiple of ``2**-1074``), so adding partials in any
  grouping gives the same bits; floats are produced once, in :meth:`finish`;
* float16 blocks are summarised by counting their 65,536 bit patterns
  (``np.bincount`` over a ``uint16`` view): counts add exactly, and mean, variance,
  min, max, ``|x|`` mean, ``nz_frac`` and any percentile follow exactly from them;
* float32/float64 blocks get float64 two-pass moments per cache-sized block (fixed block
  order inside a shard), and the blocks' ``(n, n * mean, M2 + n * mean**2)`` are added
  exactly, which is Chan et al.'s parallel merge carried out without rounding.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from vinlens.store.diagnostics.records import NumericSummary

#: Scale of exact sums of values (every float64 is a multiple of 2**-1074).
_K1 = 1074
#: Scale of exact sums of squares.
_K2 = 2 * _K1
#: Elements widened to float64 at a time: two 256 KiB buffers stay in cache.
MOMENT_BLOCK = 1 << 15
#: float16 values are multiples of 2**-24.
_F16_SHIFT = 24


def scaled(x: float, k: int = _K1) -> int:
    """``x * 2**k`` as an exact integer (``x`` finite, a multiple of ``2**-k``)."""
    num, den = float(x).as_integer_ratio()
    return num << (k - (den.bit_length() - 1))


def block_sum(values: np.ndarray) -> int:
    """``sum(values) * 2**1074`` of one block of finite values, as an integer.

    Integers are summed exactly; floats get one float64 (pairwise) sum per block, which
    depends only on the block, so a shard's result does not depend on its neighbours.
    A float64 sum that overflows is replaced by the exact sum of the values.
    """
    if values.size == 0:
        return 0
    if values.dtype.kind in "iub":
        return int(np.add.reduce(values.astype(np.int64, copy=False))) << _K1
    total = float(np.add.reduce(values, dtype=np.float64, axis=None))
    if math.isfinite(total):
        return scaled(total)
    return sum(scaled(v) for v in values.astype(np.float64).reshape(-1).tolist())


def _to_float(numerator: int, denominator: int) -> float:
    return float(Fraction(numerator, denominator))


class Summary:
    """Finite-value count/min/mean/max with an exact sum; merges associatively."""

    __slots__ = ("count", "maximum", "minimum", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0  # exact sum * 2**1074
        self.minimum = math.inf
        self.maximum = -math.inf

    def update(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.count += int(values.size)
        self.total += block_sum(values)
        self.minimum = min(self.minimum, float(values.min()))
        self.maximum = max(self.maximum, float(values.max()))

    def merge(self, other: Summary) -> Summary:
        self.count += other.count
        self.total += other.total
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        return self

    def finish(self) -> NumericSummary:
        if self.count == 0:
            return NumericSummary(0, None, None, None)
        mean = _to_float(self.total, self.count << _K1)
        return NumericSummary(self.count, self.minimum, mean, self.maximum)

    def __getstate__(self) -> tuple[int, int, float, float]:
        return self.count, self.total, self.minimum, self.maximum

    def __setstate__(self, state: tuple[int, int, float, float]) -> None:
        self.count, self.total, self.minimum, self.maximum = state


def _float16_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bit pattern: finite?, value * 2**24 (exact int64), ``|value| > 1e-6``."""
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    wide = values.astype(np.float64)
    finite = np.isfinite(wide)
    ints = np.zeros(1 << 16, dtype=np.int64)
    ints[finite] = (wide[finite] * (1 << _F16_SHIFT)).astype(np.int64)
    nonzero = finite & (np.abs(np.where(finite, wide, 0.0)) > 1e-6)
    return finite, ints, nonzero


_F16_TABLES: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def _f16_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    global _F16_TABLES
    if _F16_TABLES is None:
        _F16_TABLES = _float16_tables()
    return _F16_TABLES


#: float16 values counted per ``np.bincount`` call: its intp copy of the block (8 MiB)
#: stays in cache, which measured ~2x faster than one call over a 32 Mi-value chunk.
_COUNT_BLOCK = 1 << 20


def float16_counts_numpy(values: np.ndarray) -> np.ndarray:
    """Counts of the 65,536 float16 bit patterns of ``values`` with ``np.bincount``."""
    flat = np.ascontiguousarray(values).reshape(-1).view(np.uint16)
    counts = np.bincount(flat[:_COUNT_BLOCK], minlength=1 << 16).astype(np.int64, copy=False)
    for start in range(_COUNT_BLOCK, flat.size, _COUNT_BLOCK):
        counts += np.bincount(flat[start : start + _COUNT_BLOCK], minlength=1 << 16)
    return counts


#: Values per pass of the compiled kernel: each of its four uint32 sub-histograms sees at
#: most a quarter of them, far below 2**32, before they are added into the int64 result.
_NUMBA_BLOCK = 1 << 28


def _compile_float16_kernel() -> Any:
    """The numba bit-pattern counter, or ``None`` when numba (the ``fast`` extra) is absent."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(nogil=True, cache=True)
    def count(flat: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        # Four interleaved sub-histograms: runs of one repeated value (zeros, saturated
        # voxels) would otherwise wait on the previous increment of the same counter.
        subs = np.zeros((4, 1 << 16), dtype=np.uint32)
        n = flat.size
        for start in range(0, n, _NUMBA_BLOCK):
            stop = min(n, start + _NUMBA_BLOCK)
            i = start
            while i + 4 <= stop:
                subs[0, flat[i]] += 1
                subs[1, flat[i + 1]] += 1
                subs[2, flat[i + 2]] += 1
                subs[3, flat[i + 3]] += 1
                i += 4
            while i < stop:
                subs[0, flat[i]] += 1
                i += 1
            for k in range(1 << 16):
                out[k] += np.int64(subs[0, k]) + subs[1, k] + subs[2, k] + subs[3, k]
                subs[0, k] = 0
                subs[1, k] = 0
                subs[2, k] = 0
                subs[3, k] = 0

    return count


_F16_KERNEL: Any = None
_F16_KERNEL_LOADED = False


def _float16_kernel() -> Any:
    global _F16_KERNEL, _F16_KERNEL_LOADED
    if not _F16_KERNEL_LOADED:
        _F16_KERNEL = _compile_float16_kernel()
        _F16_KERNEL_LOADED = True
    return _F16_KERNEL


def float16_counts_compiled(values: np.ndarray) -> np.ndarray | None:
    """Counts of the 65,536 float16 bit patterns with numba, or ``None`` without numba."""
    kernel = _float16_kernel()
    if kernel is None:
        return None
    flat = np.ascontiguousarray(values).reshape(-1).view(np.uint16)
    counts = np.zeros(1 << 16, dtype=np.int64)
    kernel(flat, counts)
    return counts


#: float16 values a process counts with ``np.bincount`` before it loads the compiled
#: kernel: importing numba and loading its cached kernel takes ~1-2 s, which only a
#: scan of more than ~100 MB of float16 repays (the kernel counts ~2x faster).
COMPILED_AFTER = 1 << 26
_f16_counted = 0


def float16_counts(values: np.ndarray) -> np.ndarray:
    """Counts of the 65,536 float16 bit patterns of ``values`` (int64, exact).

    Once a process has counted :data:`COMPILED_AFTER` values, uses the compiled kernel when
    numba is installed (``pip install 'vinlens[fast]'``); both paths return the same counts.
    """
    global _f16_counted
    if _f16_counted >= COMPILED_AFTER:
        counts = float16_counts_compiled(values)
        if counts is not None:
            return counts
    else:
        _f16_counted += int(values.size)
    return float16_counts_numpy(values)


class Moments:
    """float64 moments of one backbone field; exact and associative under :meth:`merge`.

    State: ``n``, the exact sums ``S = sum n_b * mean_b`` and ``Q = sum (M2_b + n_b *
    mean_b**2)`` over float32/float64 blocks, the exact ``|x|`` sum, the ``|x| > 1e-6``
    count, the non-finite count, and for float16 input the counts of its bit patterns
    (added exactly; turned into the same exact sums at :meth:`finish`).
    """

    __slots__ = (
        "abs_total",
        "count",
        "counts16",
        "maximum",
        "minimum",
        "nonfinite",
        "nonzero",
        "q",
        "s",
    )

    def __init__(self) -> None:
        self.count = 0
        self.s = 0  # * 2**1074
        self.q = 0  # * 2**2148
        self.abs_total = 0  # * 2**1074
        self.nonzero = 0
        self.nonfinite = 0
        self.minimum = math.inf  # of float32/float64 input; float16 extremes come from counts
        self.maximum = -math.inf
        self.counts16: np.ndarray | None = None

    def update(self, batch: np.ndarray) -> int:
        """Add a block of values; returns how many of them were not finite."""
        if batch.dtype == np.float16:
            counts = float16_counts(batch)
            finite = _f16_tables()[0]
            bad = int(counts[~finite].sum())
            if self.counts16 is None:
                self.counts16 = counts
            else:
                self.counts16 += counts
            return bad
        flat = batch.reshape(-1)
        before = self.nonfinite
        wide = np.empty(min(MOMENT_BLOCK, flat.size), dtype=np.float64)
        scratch = np.empty_like(wide)
        for start in range(0, flat.size, MOMENT_BLOCK):
            self._update_block(flat[start : start + MOMENT_BLOCK], wide, scratch)
        return self.nonfinite - before

    def _update_block(
        self, block: np.ndarray, wide_buf: np.ndarray, scratch_buf: np.ndarray
    ) -> None:
        wide = wide_buf[: block.size]
        np.copyto(wide, block, casting="unsafe")
        total = float(np.add.reduce(wide))
        if not math.isfinite(total):
            finite = np.isfinite(wide)
            self.nonfinite += int(wide.size - np.count_nonzero(finite))
            wide = wide[finite]
            total = float(np.add.reduce(wide))
        n_b = int(wide.size)
        if n_b == 0:
            return
        self.minimum = min(self.minimum, float(wide.min()))
        self.maximum = max(self.maximum, float(wide.max()))
        scratch = scratch_buf[:n_b]
        np.abs(wide, out=scratch)
        abs_sum = float(np.add.reduce(scratch))
        self.nonzero += int(np.count_nonzero(scratch > 1e-6))
        if not (math.isfinite(total) and math.isfinite(abs_sum)):
            # Finite values whose float64 sum overflows: exact per value (rare, slow).
            self._update_exact(wide)
            return
        mean_b = total / n_b
        np.subtract(wide, mean_b, out=wide)
        np.square(wide, out=scratch)
        m2_b = float(np.add.reduce(scratch))
        scaled_mean = scaled(mean_b)
        self.count += n_b
        self.s += n_b * scaled_mean
        self.q += (scaled(m2_b, _K2) if math.isfinite(m2_b) else 0) + n_b * scaled_mean**2
        self.abs_total += scaled(abs_sum)

    def _update_exact(self, wide: np.ndarray) -> None:
        values = [scaled(v) for v in wide.tolist()]
        self.count += len(values)
        self.s += sum(values)
        self.q += sum(v * v for v in values)
        self.abs_total += sum(abs(v) for v in values)

    def merge(self, other: Moments) -> Moments:
        self.count += other.count
        self.s += other.s
        self.q += other.q
        self.abs_total += other.abs_total
        self.nonzero += other.nonzero
        self.nonfinite += other.nonfinite
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        if other.counts16 is not None:
            if self.counts16 is None:
                self.counts16 = other.counts16.copy()
            else:
                self.counts16 = self.counts16 + other.counts16
        return self

    def _exact_totals(self) -> tuple[int, int, int, int, int]:
        """``(n, S, Q, |x| sum, nonzero)`` over both kinds of input, exact."""
        n, s, q, a, nz = self.count, self.s, self.q, self.abs_total, self.nonzero
        if self.counts16 is not None:
            finite, ints, nonzero = _f16_tables()
            used = np.flatnonzero((self.counts16 > 0) & finite)
            counts = self.counts16[used].tolist()
            values = ints[used].tolist()
            n += sum(counts)
            nz += int(self.counts16[nonzero].sum())
            shift1 = _K1 - _F16_SHIFT
            shift2 = _K2 - 2 * _F16_SHIFT
            weighted = list(map(operator.mul, counts, values))
            s += sum(weighted) << shift1
            q += sum(map(operator.mul, weighted, values)) << shift2
            a += sum(map(abs, weighted)) << shift1
        return n, s, q, a, nz

    def extremes(self) -> tuple[float | None, float | None]:
        """Exact ``(min, max)`` of the finite values, or ``(None, None)``."""
        low, high = self.minimum, self.maximum
        if self.counts16 is not None:
            finite = _f16_tables()[0]
            patterns = np.flatnonzero((self.counts16 > 0) & finite)
            if patterns.size:
                values = patterns.astype(np.uint16).view(np.float16).astype(np.float64)
                low, high = min(low, float(values.min())), max(high, float(values.max()))
        if low > high:
            return None, None
        return low, high

    def finish(self) -> tuple[int, float | None, float | None, float | None, float | None]:
        """``(count, mean, std, abs_mean, nz_frac)`` over the finite values."""
        n, s, q, a, nz = self._exact_totals()
        if n == 0:
            return 0, None, None, None, None
        mean = _to_float(s, n << _K1)
        # Population variance (Q n - S^2) / n^2, exact until the one final rounding.
        variance = Fraction(q * n - s * s, (n * n) << _K2)
        std = math.sqrt(float(max(variance, Fraction(0))))
        return n, mean, std, _to_float(a, n << _K1), nz / n

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def weighted_percentile(counts: Mapping[Any, int], q: float) -> float:
    """``np.percentile`` (linear rule) of the multiset ``{value: count}``."""
    items = sorted((v, c) for v, c in counts.items() if c > 0)
    n = sum(c for _, c in items)
    if n == 0:
        return 0.0
    position = q / 100.0 * (n - 1)
    lo_index = math.floor(position)
    frac = position - lo_index

    def at(index: int) -> Any:
        seen = 0
        for value, count in items:
            seen += count
            if index < seen:
                return value
        return items[-1][0]

    lo = at(lo_index)
    hi = at(min(lo_index + 1, n - 1))
    return float(lo + (hi - lo) * frac)
