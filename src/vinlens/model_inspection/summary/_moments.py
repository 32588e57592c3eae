"""The record of a summary (:class:`TensorSummary`), its mergeable moments
(:class:`SummaryAccumulator`) and the choice of path that reduces one tensor.

A float32/float64 tensor takes the fast path (a few reductions on the whole view, on the
CPU through :func:`~._cpu.cpu_moments`); when a value there is not finite, and for every
other floating dtype, the tensor is read blockwise (:mod:`._blocks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vinlens.model_inspection.summary._blocks import (
    _NEGATIVE_ZERO_BITS,
    _SAME_SIZE_INT,
    blockwise_rows,
    count_zeros,
    finite_two_pass,
    unexpanded,
)
from vinlens.model_inspection.summary._cpu import FAST_DTYPES, cpu_moments
from vinlens.operations import chan_merge

# Largest sum(x^2) / sum((x - mean)^2) the one-pass variance is trusted with.
_CONDITIONING = 64.0


@dataclass(frozen=True)
class TensorSummary:
    """Statistics of every element of one floating tensor (or of a stream of them).

    Float statistics cover the finite values only; the non-finite ones are
    counted. With no finite value, the float statistics are NaN.

    Attributes:
        count: Number of elements, finite or not.
        mean: Mean of the finite values.
        std: Population standard deviation (``correction=0``) of the finite values.
        min: Smallest finite value.
        max: Largest finite value.
        abs_max: Largest absolute finite value.
        zero_fraction: Fraction of the finite values that are exactly zero.
        nan_count: Number of NaN elements.
        posinf_count: Number of ``+inf`` elements.
        neginf_count: Number of ``-inf`` elements.
    """

    count: int
    mean: float
    std: float
    min: float
    max: float
    abs_max: float
    zero_fraction: float
    nan_count: int
    posinf_count: int
    neginf_count: int

    @property
    def finite_count(self) -> int:
        """Number of finite elements (those the float statistics describe)."""
        return self.count - self.nan_count - self.posinf_count - self.neginf_count

    @property
    def nonfinite_count(self) -> int:
        """Number of NaN and infinite elements."""
        return self.nan_count + self.posinf_count + self.neginf_count


class SummaryAccumulator:
    """Mergeable moments behind a :class:`TensorSummary`.

    ``update`` adds one tensor, ``merge`` folds another accumulator in (Chan et
    al.'s parallel update for mean and sum of squared deviations), ``finish``
    returns the record. Memory is a few numbers whatever was added.
    """

    __slots__ = (
        "count",
        "finite",
        "m2",
        "maximum",
        "mean",
        "minimum",
        "nan",
        "neginf",
        "posinf",
        "zeros",
    )

    def __init__(self) -> None:
        self.count = 0
        self.nan = 0
        self.posinf = 0
        self.neginf = 0
        self.finite = 0
        self.zeros = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.minimum = math.inf
        self.maximum = -math.inf

    def update(self, tensor: torch.Tensor) -> SummaryAccumulator:
        """Add every element of a floating ``tensor``; returns ``self``."""
        _accumulate(self, tensor)
        return self

    def merge(self, other: SummaryAccumulator) -> SummaryAccumulator:
        """Fold ``other`` into this accumulator; returns ``self``."""
        if not isinstance(other, SummaryAccumulator):
            raise TypeError(
                f"can only merge a SummaryAccumulator, got {type(other).__module__}."
                f"{type(other).__qualname__}"
            )
        self.count += other.count
        self.nan += other.nan
        self.posinf += other.posinf
        self.neginf += other.neginf
        self.zeros += other.zeros
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self._add_moments(other.finite, other.mean, other.m2)
        return self

    def finish(self) -> TensorSummary:
        """The summary of everything added so far."""
        finite = self.finite
        if finite == 0:
            nan = math.nan
            mean = std = low = high = abs_max = zero_fraction = nan
        else:
            mean = self.mean
            std = math.sqrt(max(self.m2, 0.0) / finite)
            low, high = self.minimum, self.maximum
            abs_max = max(abs(low), abs(high))
            zero_fraction = self.zeros / finite
        return TensorSummary(
            count=self.count,
            mean=mean,
            std=std,
            min=low,
            max=high,
            abs_max=abs_max,
            zero_fraction=zero_fraction,
            nan_count=self.nan,
            posinf_count=self.posinf,
            neginf_count=self.neginf,
        )

    def update_value(self, value: float) -> SummaryAccumulator:
        """Add one Python number (a norm, a loss); returns ``self``. Same rules as ``update``."""
        self.count += 1
        if math.isnan(value):
            self.nan += 1
        elif math.isinf(value):
            if value > 0:
                self.posinf += 1
            else:
                self.neginf += 1
        else:
            self._add_moments(1, value, 0.0)
            self.zeros += value == 0.0
            self.minimum = min(self.minimum, value)
            self.maximum = max(self.maximum, value)
        return self

    def _add_moments(self, n_b: int, mean_b: float, m2_b: float) -> None:
        if n_b == 0:
            return
        self.mean, self.m2 = chan_merge(self.finite, self.mean, self.m2, n_b, mean_b, m2_b)
        self.finite += n_b

    def __repr__(self) -> str:
        return f"SummaryAccumulator({self.finish()!r})"


def summarize_tensor(tensor: torch.Tensor) -> TensorSummary:
    """Summarize every element of a real floating tensor on its own device.

    Raises:
        TypeError: ``tensor`` is not a tensor, or is not a real floating dtype.
        ValueError: a meta, sparse, nested or quantized tensor (no values to reduce).
    """
    return SummaryAccumulator().update(tensor).finish()


def summary_unsupported_reason(tensor: torch.Tensor) -> str | None:
    """Why ``tensor`` has no summary, or None when :func:`summarize_tensor` accepts it."""
    if tensor.is_meta:
        return "meta tensor: it has no values"
    if tensor.layout != torch.strided or tensor.is_nested:
        return f"layout {tensor.layout} is not a dense strided tensor"
    if tensor.is_quantized:
        return f"quantized dtype {tensor.dtype}"
    if not tensor.is_floating_point():
        return f"dtype {tensor.dtype} is not a real floating dtype"
    return None


def stored_elements(tensor: torch.Tensor) -> int:
    """Elements a summary of ``tensor`` reads: expanded (stride-0) dimensions count once."""
    return unexpanded(tensor)[0].numel()


def _accumulate(acc: SummaryAccumulator, tensor: torch.Tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"expected a torch.Tensor, got {type(tensor).__module__}.{type(tensor).__qualname__}"
        )
    reason = summary_unsupported_reason(tensor)
    if reason is not None:
        error = TypeError if not tensor.is_floating_point() else ValueError
        raise error(f"cannot summarize this tensor: {reason}")
    base, repeat = unexpanded(tensor.detach())
    if base.numel() == 0:
        return
    if base.dtype in FAST_DTYPES and _fast_path(acc, base, repeat):
        return
    _add_block_rows(acc, blockwise_rows(base), repeat)


def _fast_path(acc: SummaryAccumulator, tensor: torch.Tensor, repeat: int) -> bool:
    """Reductions on the whole strided view; False (nothing added) when a value is not finite.

    On the CPU the extremes are read first (a NaN or an infinity stops there) and the
    moments accumulate in float64 (:func:`~._cpu.cpu_moments`); on a device all reductions are queued and read in one
    transfer.
    """
    if tensor.device.type == "cpu":
        moments = cpu_moments(tensor)
        # A NaN or an infinity (or a float64 sum that overflows): the exact blockwise
        # path takes over.
        if moments is None:
            return False
        total, squares, low, high, zeros = moments
    else:
        bits = tensor.view(_SAME_SIZE_INT[tensor.dtype])
        values: list[float] = torch.stack(
            [
                tensor.sum().to(torch.float64),
                tensor.amin().to(torch.float64),
                tensor.amax().to(torch.float64),
                _sum_of_squares(tensor).to(torch.float64),
                torch.count_nonzero(bits).to(torch.float64),
                (bits.amin() == _NEGATIVE_ZERO_BITS[tensor.dtype]).to(torch.float64),
            ]
        ).tolist()
        total, low, high, squares, nonzero, negative_zero = values
        if not (math.isfinite(total) and math.isfinite(low) and math.isfinite(high)):
            return False
        zeros = count_zeros(tensor) if negative_zero else tensor.numel() - int(nonzero)
    # An overflowing sum of squares (values near the dtype's maximum) also goes blockwise.
    if not math.isfinite(squares):
        return False
    n = tensor.numel()
    mean = total / n
    m2 = squares - n * mean * mean
    # The sum of squared deviations as a difference of two large sums loses what their
    # rounding error is worth relative to it; when the mean dominates the spread
    # (mean^2 > 63 var, a constant tensor, a single value) the exact two-pass path
    # decides instead.
    if m2 * _CONDITIONING < squares:
        mean, m2 = finite_two_pass(tensor)
    acc.count += n * repeat
    acc.zeros += zeros * repeat
    acc.minimum = min(acc.minimum, low)
    acc.maximum = max(acc.maximum, high)
    acc._add_moments(n * repeat, mean, m2 * repeat)
    return True


def _sum_of_squares(tensor: torch.Tensor) -> torch.Tensor:
    """``sum(x * x)`` as a scalar tensor of the tensor's dtype, in one reduction (devices:
    their reductions are trees; the CPU goes through :func:`~._cpu.cpu_moments`)."""
    if tensor.is_contiguous():
        flat = tensor.view(-1)
        return torch.dot(flat, flat)
    squares: torch.Tensor = torch.linalg.vector_norm(tensor).square()
    return squares


def _add_block_rows(acc: SummaryAccumulator, rows: list[list[float]], repeat: int) -> None:
    """Merge the per-block rows of :func:`~._blocks.blockwise_rows` into ``acc``; every
    count is multiplied by ``repeat`` (the tensor's expanded dimensions)."""
    for n_f, mean_b, m2_b, low_b, high_b, zeros, nans, posinf, total in rows:
        n_block = int(total)
        n_finite = int(n_f)
        n_nan = int(nans)
        n_posinf = int(posinf)
        acc.count += n_block * repeat
        acc.nan += n_nan * repeat
        acc.posinf += n_posinf * repeat
        acc.neginf += (n_block - n_finite - n_nan - n_posinf) * repeat
        acc.zeros += int(zeros) * repeat
        if n_finite:
            acc.minimum = min(acc.minimum, low_b)
            acc.maximum = max(acc.maximum, high_b)
            acc._add_moments(n_finite * repeat, mean_b, m2_b * repeat)
