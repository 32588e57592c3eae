"""Whole-tensor statistics computed on the tensor's own device (:class:`TensorSummary`).

A summary reads every element of a floating tensor through reductions on the
tensor as it is (strided, permuted, sliced) and moves only a handful of scalars
to the host; the tensor is never copied whole (at most one bounded block at a time).

* float32/float64 on the CPU: the extremes from one ``aminmax``, then one compiled read of
  the tensor in memory order (sum, sum of squares and zeros, accumulated in float64) when
  numba is installed (the ``fast`` extra) and the tensor is dense; otherwise one read a
  bounded block at a time into float64 (``sum``, ``dot``, and a zero count when 0 lies in
  the range). Either way every sum accumulates in float64 whatever the CPU's float32
  kernels do; on a device, five or six reductions and one host transfer. When a value comes back
  non-finite (a NaN or an infinity, or a sum of squares that overflows), the tensor
  takes the blockwise path below instead. A finite tensor whose mean dominates its
  spread (where a one-pass variance would lose it) gets its mean and sum of squared
  deviations from an exact mask-free two-pass in float64, one bounded block at a time.
* Other floating dtypes (float16, bfloat16, float8) and tensors holding NaN or
  infinities: the tensor is read in views of at most :data:`BLOCK_ELEMENTS`
  elements; each block's finite values are widened to float64 (a temporary of
  at most one block) and reduced with a two-pass mean and sum of squared
  deviations; blocks merge with Chan et al.'s formula.
* Expanded dimensions (stride 0) are never materialised: the statistics of a
  tensor that repeats each element ``r`` times are those of the un-expanded view
  with every count multiplied by ``r`` (means, extremes and the population
  standard deviation are unchanged by uniform repetition), which is exact.

:class:`SummaryAccumulator` holds the same moments in mergeable form, so a
statistic over many tensors (batches, shards, workers) costs memory
independent of their number.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from vinlens.operations import chan_merge

__all__ = [
    "BLOCK_ELEMENTS",
    "FiniteCache",
    "SummaryAccumulator",
    "SummaryCache",
    "TensorSummary",
    "finite_pair_sums",
    "stored_elements",
    "summarize_tensor",
    "tensor_blocks",
]

#: Largest number of elements a summary widens or compacts at once (blockwise path).
BLOCK_ELEMENTS = 1 << 20
#: Rows of per-block results gathered on the device before one transfer to the host.
_TABLE_ROWS = 64

_FAST_DTYPES = (torch.float32, torch.float64)
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
    return _unexpanded(tensor)[0].numel()


class _TensorMemo:
    """Values computed from tensors seen during a forward, keyed by identity and version.

    The output of one module is usually the input of the next, and a container's
    output is its last child's: each is reduced once. A tensor modified in place
    gets a new version and is reduced again; an entry whose tensor was freed is
    never reused (its weak reference is dead). Inference tensors have no version
    counter and are never cached.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[torch.Tensor], int, object]] = {}

    def _get(self, tensor: torch.Tensor) -> object | None:
        if tensor.is_inference():
            return None
        entry = self._entries.get(id(tensor))
        if entry is not None and entry[0]() is tensor and entry[1] == tensor._version:
            return entry[2]
        return None

    def _put(self, tensor: torch.Tensor, value: object) -> None:
        if tensor.is_inference():
            return
        if len(self._entries) >= 4096:
            self._entries = {k: e for k, e in self._entries.items() if e[0]() is not None}
        # Tensor subclasses without weak references are simply not cached.
        with contextlib.suppress(TypeError):
            self._entries[id(tensor)] = (weakref.ref(tensor), tensor._version, value)


class SummaryCache(_TensorMemo):
    """Moments of the tensors seen during a forward (see :class:`_TensorMemo`); shared by
    capture and health so that a tensor seen by several hooks is reduced once."""

    def get(self, tensor: torch.Tensor) -> SummaryAccumulator | None:
        """The cached moments of ``tensor`` (do not modify them), or None."""
        cached = self._get(tensor)
        return cached if isinstance(cached, SummaryAccumulator) else None

    def moments(self, tensor: torch.Tensor) -> SummaryAccumulator:
        """The moments of ``tensor``, reduced now unless cached (do not modify them)."""
        inference = tensor.is_inference()
        if not inference:  # get, inlined: this runs for every module output
            entry = self._entries.get(id(tensor))
            if entry is not None and entry[0]() is tensor and entry[1] == tensor._version:
                cached = entry[2]
                if isinstance(cached, SummaryAccumulator):
                    return cached
        moments = SummaryAccumulator().update(tensor)
        if not inference:
            self._put(tensor, moments)
        return moments

    def summary(self, tensor: torch.Tensor) -> TensorSummary:
        """The summary of ``tensor`` (its moments, reduced now unless cached)."""
        return self.moments(tensor).finish()


class FiniteCache(_TensorMemo):
    """Whether the tensors seen during a forward hold only finite values (one pass each).

    A NaN or an infinity makes the sum non-finite, so a finite sum proves the
    tensor finite with one reduction and one scalar read; only a non-finite sum
    (a NaN, an infinity, or finite values whose sum overflows) costs the exact
    check of the extremes, which propagate NaN and infinities.
    """

    def finite(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` holds no NaN or infinity (checked now unless cached)."""
        inference = tensor.is_inference()
        if not inference:  # _get, inlined: this runs for every input and output
            entry = self._entries.get(id(tensor))
            if entry is not None and entry[0]() is tensor and entry[1] == tensor._version:
                return entry[2] is True
        source = _unexpanded(tensor.detach())[0]
        if source.numel() == 0 or math.isfinite(source.sum().item()):
            result = True
        else:
            low, high = source.amin().item(), source.amax().item()
            result = math.isfinite(low) and math.isfinite(high)
        if not inference:
            self._put(tensor, result)
        return result


# --------------------------------------------------------------------------- computation


def _accumulate(acc: SummaryAccumulator, tensor: torch.Tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"expected a torch.Tensor, got {type(tensor).__module__}.{type(tensor).__qualname__}"
        )
    reason = summary_unsupported_reason(tensor)
    if reason is not None:
        error = TypeError if not tensor.is_floating_point() else ValueError
        raise error(f"cannot summarize this tensor: {reason}")
    base, repeat = _unexpanded(tensor.detach())
    if base.numel() == 0:
        return
    if base.dtype in _FAST_DTYPES and _fast_path(acc, base, repeat):
        return
    _blockwise(acc, base, repeat)


def _unexpanded(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The view without its stride-0 (expanded) dimensions, and how often it repeats."""
    stride = tensor.stride()
    if 0 not in stride:
        return tensor, 1
    shape = tensor.shape
    repeat = 1
    kept: list[int] = []
    for size, step in zip(shape, stride, strict=True):
        if step == 0 and size > 1:
            repeat *= size
            kept.append(1)
        else:
            kept.append(size)
    if repeat == 1:
        return tensor, 1
    return tensor.as_strided(kept, stride, tensor.storage_offset()), repeat


def _fast_path(acc: SummaryAccumulator, tensor: torch.Tensor, repeat: int) -> bool:
    """Reductions on the whole strided view; False (nothing added) when a value is not finite.

    On the CPU the extremes are read first (a NaN or an infinity stops there) and the
    moments accumulate in float64 (:func:`_cpu_moments`); on a device all reductions are queued and read in one
    transfer.
    """
    if tensor.device.type == "cpu":
        moments = _cpu_moments(tensor)
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
        zeros = _count_zeros(tensor) if negative_zero else tensor.numel() - int(nonzero)
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
        mean, m2 = _finite_two_pass(tensor)
    acc.count += n * repeat
    acc.zeros += zeros * repeat
    acc.minimum = min(acc.minimum, low)
    acc.maximum = max(acc.maximum, high)
    acc._add_moments(n * repeat, mean, m2 * repeat)
    return True


def _finite_two_pass(tensor: torch.Tensor) -> tuple[float, float]:
    """Exact mean and sum of squared deviations of an all-finite tensor.

    Two passes in float64 per bounded block (no masks: every value is finite),
    merged with Chan et al.'s formula; one host transfer.
    """
    rows: list[torch.Tensor] = []
    sizes: list[int] = []
    for block in _blocks(tensor, BLOCK_ELEMENTS):
        if block.dtype == torch.float64:
            wide = block
        else:  # at most one block; empty + copy_ is several times faster than .to()
            wide = torch.empty(block.shape, dtype=torch.float64, device=block.device)
            wide.copy_(block)
        mean = wide.mean()
        deviations = (wide - mean).reshape(-1)  # a new block: the source is never modified
        rows.append(torch.stack([mean, torch.dot(deviations, deviations)]))
        sizes.append(block.numel())
    moments = SummaryAccumulator()
    for size, (mean_b, m2_b) in zip(sizes, torch.stack(rows).tolist(), strict=True):
        moments._add_moments(size, mean_b, m2_b)
    return moments.mean, moments.m2


def _sum_of_squares(tensor: torch.Tensor) -> torch.Tensor:
    """``sum(x * x)`` as a scalar tensor of the tensor's dtype, in one reduction (devices:
    their reductions are trees; the CPU goes through :func:`_cpu_moments`)."""
    if tensor.is_contiguous():
        flat = tensor.view(-1)
        return torch.dot(flat, flat)
    squares: torch.Tensor = torch.linalg.vector_norm(tensor).square()
    return squares


def _cpu_moments(tensor: torch.Tensor) -> tuple[float, float, float, float, int] | None:
    """Sum, sum of squares, min, max and zero count of a CPU float32/float64 tensor, with
    float64 accumulation on every CPU and BLAS kernel; None when a value is not finite.

    The extremes come first, from one ``aminmax`` over the tensor as it is, in its own
    dtype (exact: no rounding): it propagates NaN and an infinity is an extreme, so a
    finite pair proves every value finite and a non-finite one hands the tensor to the
    blockwise path before any float64 work. The sums then read the tensor once more:

    * with numba (the ``fast`` extra; decided once per process, :func:`_moments_kernel`)
      and a dense tensor (:func:`_memory_order`), one compiled pass over its memory per
      block of at most ``BLOCK_ELEMENTS`` values adds every value, its square and its
      zero test into float64 (:mod:`._summary_kernel`; the compiler may split the adds
      over vector lanes, another summation order), the block results added as Python
      floats;
    * otherwise (no numba, a strided view with gaps, a tensor subclass, a negative view)
      one bounded block at a time into a float64 buffer (float32 widens exactly; a
      contiguous float64 block is used in place): ``sum`` and ``dot`` there, the block
      results added as Python floats, and a zero count only when 0 lies in the range.

    Every float64 reduction, in whatever order a kernel adds, errs by at most ``gamma_k *
    sum(|x|)`` (``gamma_k = k u / (1 - k u)``, ``u = 2**-53``, ``k`` the block's elements;
    Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1), so the accuracy of the
    moments is a property of this algorithm, not of one machine's float32 rounding (a
    float32 ``sdot``/``bmm`` chunk sum erred 1e-7 relative on one CPU and 4e-7 on another).
    Both ways give the same count, extremes and zeros, and sums within that bound.
    """
    kernel = _moments_kernel()
    flat = _memory_order(tensor) if kernel is not None else None
    # A dense tensor's extremes are read in memory order too (an aminmax of a channels_last
    # tensor in its logical order took 7x as long as of the same memory read in order).
    extremes = torch.aminmax(tensor if flat is None else flat)
    low, high = float(extremes[0]), float(extremes[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    if kernel is not None and flat is not None:
        return _compiled_moments(kernel, flat.numpy(), low, high)
    zeros_possible = low <= 0.0 <= high
    if tensor.numel() <= BLOCK_ELEMENTS:  # the common activation: one block, no loop
        if tensor.dtype == torch.float64 and tensor.is_contiguous():
            found = _block_sums(tensor.view(-1), zeros_possible, owned=False)
        else:
            # Into this thread's scratch buffer (copy_: Tensor.to(float64) is several times
            # slower on the CPU): a fresh allocation per output, between the forward's own,
            # kept landing on newly mapped pages.
            wide = _scratch(tensor.numel())
            wide.view(tensor.shape).copy_(tensor)
            found = _block_sums(wide, zeros_possible, owned=True)
        if found is None:
            return None
        return found[0], found[1], low, high, found[2]
    total = squares = 0.0
    zeros = 0
    for block in _blocks(tensor, BLOCK_ELEMENTS):
        if block.dtype == torch.float64 and block.is_contiguous():
            found = _block_sums(block.reshape(-1), zeros_possible, owned=False)
        else:
            wide = _scratch(block.numel())
            wide.view(block.shape).copy_(block)
            found = _block_sums(wide, zeros_possible, owned=True)
        if found is None:
            return None
        total += found[0]
        squares += found[1]
        zeros += found[2]
    return total, squares, low, high, zeros


_Kernel = Callable[[np.ndarray], tuple[float, float, int]]
_KERNELS: Any = None  # the loaded vinlens.model_inspection._summary_kernel module
_KERNEL_LOADED = False
_KERNEL_LOCK = threading.Lock()


def _kernels() -> Any:
    """The module of compiled kernels (:mod:`._summary_kernel`), or None without numba.

    Loaded on the first CPU summary of the process (importing numba and reading its cached
    machine code takes ~1-1.5 s, once; the first run after an install compiles, ~2 s) and
    kept for the process, so the path never changes part way through: a tensor summarized
    twice gives the same numbers.
    """
    global _KERNELS, _KERNEL_LOADED
    if not _KERNEL_LOADED:
        with _KERNEL_LOCK:
            if not _KERNEL_LOADED:
                try:
                    _KERNELS = importlib.import_module("vinlens.model_inspection._summary_kernel")
                except ImportError:  # numba (the ``fast`` extra) is not installed
                    _KERNELS = None
                except Exception as error:  # e.g. numba finds no writable cache directory
                    warnings.warn(
                        f"vinlens: the compiled summary kernel did not load ({error!r}); "
                        "CPU summaries use torch reductions in this process",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    _KERNELS = None
                _KERNEL_LOADED = True
    return _KERNELS


def _moments_kernel() -> _Kernel | None:
    """The compiled sums of :mod:`._summary_kernel` (see :func:`_kernels`), or None."""
    kernels = _kernels()
    return None if kernels is None else cast(_Kernel, kernels.moments)


def finite_pair_sums(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float] | None:
    """``(max |a - b|, sum (a - b)^2, sum a b)`` of two all-finite CPU tensors in float64,
    in one compiled pass over both; None where the pass does not apply (no numba, another
    device or dtype than float32/float64 on both, different shapes or layouts, a tensor
    that is not dense).

    The two tensors are read in the same memory order (equal strides, dense), so element
    ``i`` of one meets element ``i`` of the other; every sum errs by at most
    ``gamma_k * sum(|terms|)`` (any order, as :func:`_cpu_moments`). Callers check
    finiteness first (a summary does): a NaN or infinity gives NaN or infinite sums.
    """
    kernels = _kernels()
    if (
        kernels is None
        or a.dtype != b.dtype
        or a.dtype not in _FAST_DTYPES
        or a.device.type != "cpu"
        or b.device.type != "cpu"
        or a.shape != b.shape
        or a.stride() != b.stride()
    ):
        return None
    flat_a, flat_b = _memory_order(a.detach()), _memory_order(b.detach())
    if flat_a is None or flat_b is None or flat_a.numel() == 0:
        return None
    found: tuple[float, float, float] = kernels.pair_sums(flat_a.numpy(), flat_b.numpy())
    return found


def _memory_order(tensor: torch.Tensor) -> torch.Tensor | None:
    """Every element of a dense CPU tensor once, as a 1-d view of its memory (no copy) that
    numpy reads as it is; None when the tensor is not dense or numpy cannot read it.

    A permutation of the dimensions by decreasing stride that is contiguous proves the
    elements fill ``numel`` consecutive storage slots, each once (channels_last and other
    permuted dense tensors); the statistics do not depend on the order they are read in.
    Tensor subclasses, negative views (``numpy()`` refuses the neg bit) and a storage that
    is not aligned to the dtype (the kernel's signatures are for aligned arrays) keep the
    torch path.
    """
    if type(tensor) is not torch.Tensor or tensor.is_neg():
        return None
    if not tensor.is_contiguous():
        strides = tensor.stride()
        tensor = tensor.permute(sorted(range(tensor.dim()), key=strides.__getitem__)[::-1])
        if not tensor.is_contiguous():
            return None
    flat = tensor.view(-1)
    return flat if flat.data_ptr() % flat.element_size() == 0 else None


def _compiled_moments(
    kernel: _Kernel, flat: np.ndarray, low: float, high: float
) -> tuple[float, float, float, float, int] | None:
    """:func:`_cpu_moments` with the compiled kernel, one block of ``BLOCK_ELEMENTS`` values
    at a time; None when a float64 sum overflows (finite float64 values near its maximum)."""
    n = flat.size
    if n <= BLOCK_ELEMENTS:  # the common activation: one block, no loop
        total, squares, zeros = kernel(flat)
    else:
        total = squares = 0.0
        zeros = 0
        for start in range(0, n, BLOCK_ELEMENTS):
            block_total, block_squares, block_zeros = kernel(flat[start : start + BLOCK_ELEMENTS])
            total += block_total
            squares += block_squares
            zeros += block_zeros
    if not math.isfinite(total):
        return None
    return total, squares, low, high, zeros


# Per thread: the float64 buffer CPU summaries widen float32 blocks into.
_SCRATCH = threading.local()


def _scratch(elements: int) -> torch.Tensor:
    """A 1-d float64 CPU buffer of ``elements`` (at most ``BLOCK_ELEMENTS``) values, this
    thread's own and reused by every summary it makes: it holds at most
    ``BLOCK_ELEMENTS`` float64 values (8 MiB) per thread for the thread's lifetime."""
    buffer: torch.Tensor | None = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.numel() < elements:
        buffer = torch.empty(max(elements, 1 << 12), dtype=torch.float64)
        _SCRATCH.buffer = buffer
    return buffer[:elements]


def _block_sums(
    wide: torch.Tensor, zeros_possible: bool, *, owned: bool
) -> tuple[float, float, int] | None:
    """Float64 sum, sum of squares and zeros of a 1-d float64 block of finite values;
    None when a sum overflows. ``owned``: the block is our own copy, which may be
    overwritten; ``zeros_possible``: 0 lies in the tensor's range."""
    total = float(wide.sum())
    if not math.isfinite(total):  # finite float64 values near its maximum
        return None
    squares = float(torch.dot(wide, wide))
    zeros = 0
    if zeros_possible:
        if owned:
            # +0.0 is the all-zero bit pattern; |x| clears the sign bit of -0.0 (in place,
            # in our own copy).
            magnitudes = torch.abs(wide, out=wide).view(torch.int64)
            zeros = wide.numel() - int(torch.count_nonzero(magnitudes))
        else:
            zeros = _count_zeros(wide)
    return total, squares, zeros


# Same-size integer views: +0.0 is the all-zero bit pattern, so a count of non-zero
# integers counts non-zero floats, except -0.0, whose pattern is the integer minimum.
_SAME_SIZE_INT = {torch.float32: torch.int32, torch.float64: torch.int64}
_NEGATIVE_ZERO_BITS = {torch.float32: -(2**31), torch.float64: -(2**63)}


def _count_zeros(tensor: torch.Tensor) -> int:
    """Exact count of zeros (both signs) with reductions only, no full-size mask."""
    bits = tensor.view(_SAME_SIZE_INT[tensor.dtype])
    if int(bits.amin().item()) != _NEGATIVE_ZERO_BITS[tensor.dtype]:
        return tensor.numel() - int(torch.count_nonzero(bits).item())
    # -0.0 is common (hardswish and SiLU of negative values give it): |x| clears the sign
    # bit, so the bit count of one bounded block of absolute values counts both zeros.
    nonzero = 0
    for block in _blocks(tensor, BLOCK_ELEMENTS):
        magnitudes = torch.abs(block).view(bits.dtype)
        nonzero += int(torch.count_nonzero(magnitudes).item())
    return tensor.numel() - nonzero


def tensor_blocks(tensor: torch.Tensor, limit: int) -> Iterator[torch.Tensor]:
    """Views of ``tensor`` with at most ``limit`` elements each, covering it exactly once."""
    if tensor.dim() == 0 or tensor.numel() <= limit:
        yield tensor
        return
    length = tensor.shape[0]
    inner = tensor.numel() // length
    if inner == 0:
        return
    if inner <= limit:
        rows = max(1, limit // inner)
        for start in range(0, length, rows):
            yield tensor.narrow(0, start, min(rows, length - start))
        return
    for index in range(length):
        yield from _blocks(tensor.select(0, index), limit)


def _blockwise(acc: SummaryAccumulator, tensor: torch.Tensor, repeat: int) -> None:
    """Exact float64 moments, one bounded block at a time, one host transfer per table.

    Every block is widened into the same float64 buffers of ``BLOCK_ELEMENTS`` values
    (and one boolean buffer), and its nine numbers are written into a small table; all
    are allocated once and reused. Temporaries whose size changed from block to block (a
    masked selection of the finite values and its float64 copies), between small
    per-block results that lived to the end, fragmented glibc's heap so much that one
    256 MiB float16 tensor raised peak memory by 0.4-1 GiB in some runs; now a block
    allocates nothing but a few scalars that die with it. Non-finite values are masked
    in place instead: zero for the sums, +-inf for the extremes.
    """
    f64 = torch.float64
    device = tensor.device
    size = min(tensor.numel(), BLOCK_ELEMENTS)
    values = torch.empty(size, dtype=f64, device=device)
    deviations = torch.empty(size, dtype=f64, device=device)
    flags = torch.empty(size, dtype=torch.bool, device=device)
    # Columns: finite count, mean, M2, min, max, zeros, NaN, +inf, elements.
    table = torch.zeros((_TABLE_ROWS, 9), dtype=f64, device=device)
    rows: list[list[float]] = []
    used = 0
    for block in _blocks(tensor, BLOCK_ELEMENTS):
        if used == _TABLE_ROWS:
            rows.extend(table.tolist())
            used = 0
        row = table[used]
        used += 1
        k = block.numel()
        wide = values[:k]
        wide.view(block.shape).copy_(block)
        mask = flags[:k]
        row[5] = torch.eq(wide, 0.0, out=mask).sum()
        row[6] = torch.ne(wide, wide, out=mask).sum()
        row[7] = torch.eq(wide, math.inf, out=mask).sum()
        row[8] = k
        squares = deviations[:k]
        torch.abs(wide, out=squares)
        torch.lt(squares, math.inf, out=mask)  # finite: NaN and +-inf compare False
        n = int(mask.sum())  # one sync per block decides the masking
        row[0] = n
        if not n:
            row[1:5] = torch.tensor([0.0, 0.0, math.inf, -math.inf], dtype=f64)
            continue
        nonfinite = n < k
        if nonfinite:
            torch.logical_not(mask, out=mask)  # from here on: the non-finite values
            wide.masked_fill_(mask, 0.0)
        mean = wide.sum() / n
        torch.sub(wide, mean, out=squares)
        squares.square_()
        if nonfinite:
            squares.masked_fill_(mask, 0.0)
            wide.masked_fill_(mask, math.inf)
        row[1] = mean
        row[2] = squares.sum()
        row[3] = wide.amin()
        if nonfinite:
            wide.masked_fill_(mask, -math.inf)
        row[4] = wide.amax()
    rows.extend(table[:used].tolist())
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


# Names used inside this module before the helpers above became public.
_SummaryCache = SummaryCache
_FiniteCache = FiniteCache
_blocks = tensor_blocks
