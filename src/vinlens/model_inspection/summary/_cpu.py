"""Sums of CPU float32/float64 tensors accumulated in float64 on every CPU.

:func:`cpu_moments` is the CPU side of a summary's fast path; :func:`finite_pair_sums`
the one-pass distance and product of two tensors that :mod:`vinlens.health.diff` uses.
Both run the compiled kernels of :mod:`._kernel` when numba (the ``fast`` extra) is
installed and the tensor is dense, and torch reductions into a float64 buffer otherwise.
"""

from __future__ import annotations

import importlib
import math
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch

from vinlens.model_inspection.summary import _blocks
from vinlens.model_inspection.summary._blocks import count_zeros, tensor_blocks

FAST_DTYPES = (torch.float32, torch.float64)


def cpu_moments(tensor: torch.Tensor) -> tuple[float, float, float, float, int] | None:
    """Sum, sum of squares, min, max and zero count of a CPU float32/float64 tensor, with
    float64 accumulation on every CPU and BLAS kernel; None when a value is not finite.

    The extremes come first, from one ``aminmax`` over the tensor as it is, in its own
    dtype (exact: no rounding): it propagates NaN and an infinity is an extreme, so a
    finite pair proves every value finite and a non-finite one hands the tensor to the
    blockwise path before any float64 work. The sums then read the tensor once more:

    * with numba (the ``fast`` extra; decided once per process, :func:`_moments_kernel`)
      and a dense tensor (:func:`_memory_order`), one compiled pass over its memory per
      block of at most ``BLOCK_ELEMENTS`` values adds every value, its square and its
      zero test into float64 (:mod:`._kernel`; the compiler may split the adds
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
    if tensor.numel() <= _blocks.BLOCK_ELEMENTS:  # the common activation: one block, no loop
        found = _widened_sums(tensor, zeros_possible)
        return None if found is None else (found[0], found[1], low, high, found[2])
    total = squares = 0.0
    zeros = 0
    for block in tensor_blocks(tensor, _blocks.BLOCK_ELEMENTS):
        found = _widened_sums(block, zeros_possible)
        if found is None:
            return None
        total += found[0]
        squares += found[1]
        zeros += found[2]
    return total, squares, low, high, zeros


def _widened_sums(block: torch.Tensor, zeros_possible: bool) -> tuple[float, float, int] | None:
    """:func:`_block_sums` of one block in float64: read in place when it already is a
    contiguous float64 block, else widened into this thread's scratch buffer (``copy_``:
    ``Tensor.to(float64)`` is several times slower on the CPU, and a fresh allocation per
    output, between the forward's own, lands on newly mapped pages)."""
    if block.dtype == torch.float64 and block.is_contiguous():
        return _block_sums(block.reshape(-1), zeros_possible, owned=False)
    wide = _scratch(block.numel())
    wide.view(block.shape).copy_(block)
    return _block_sums(wide, zeros_possible, owned=True)


_Kernel = Callable[[np.ndarray], tuple[float, float, int]]
_KERNELS: Any = None  # the loaded vinlens.model_inspection.summary._kernel module
_KERNEL_LOADED = False
_KERNEL_LOCK = threading.Lock()


def _kernels() -> Any:
    """The module of compiled kernels (:mod:`._kernel`), or None without numba.

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
                    _KERNELS = importlib.import_module("vinlens.model_inspection.summary._kernel")
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
    """The compiled sums of :mod:`._kernel` (see :func:`_kernels`), or None."""
    kernels = _kernels()
    return None if kernels is None else cast(_Kernel, kernels.moments)


def finite_pair_sums(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float] | None:
    """``(max |a - b|, sum (a - b)^2, sum a b)`` of two all-finite CPU tensors in float64,
    in one compiled pass over both; None where the pass does not apply (no numba, another
    device or dtype than float32/float64 on both, different shapes or layouts, a tensor
    that is not dense).

    The two tensors are read in the same memory order (equal strides, dense), so element
    ``i`` of one meets element ``i`` of the other; every sum errs by at most
    ``gamma_k * sum(|terms|)`` (any order, as :func:`cpu_moments`). Callers check
    finiteness first (a summary does): a NaN or infinity gives NaN or infinite sums.
    """
    kernels = _kernels()
    if (
        kernels is None
        or a.dtype != b.dtype
        or a.dtype not in FAST_DTYPES
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


def sum_and_squares(tensor: torch.Tensor) -> tuple[float, float] | None:
    """The float64 sum and sum of squares of a CPU float32/float64 tensor, one compiled pass
    over its memory (no float64 copy); None where the pass does not apply (no numba,
    another device or dtype, a tensor that is not dense). Non-finite values give non-finite
    sums; each sum errs by at most ``gamma_k`` times the sum of its terms' magnitudes."""
    kernels = _kernels()
    if kernels is None or tensor.device.type != "cpu" or tensor.dtype not in FAST_DTYPES:
        return None
    flat = _memory_order(tensor.detach())
    if flat is None:
        return None
    if not flat.numel():
        return 0.0, 0.0
    total, squares, _ = kernels.moments(flat.numpy())
    return float(total), float(squares)


def sums_of_squares(tensors: Sequence[torch.Tensor]) -> list[float] | None:
    """The float64 sum of squares of each CPU float32/float64 tensor, one compiled pass over
    each tensor's memory (no float64 copy); None where the pass does not apply to all of
    them (no numba, another device or dtype, a tensor that is not dense).

    Each sum errs by at most ``gamma_k * sum(x^2)`` (as :func:`cpu_moments`). With numba,
    this is about as fast as a float32 norm, where a float64 ``torch._foreach_norm`` over
    float32 tensors on the CPU widens element by element, several times slower.
    """
    kernels = _kernels()
    if kernels is None:
        return None
    flats = []
    for tensor in tensors:
        if tensor.device.type != "cpu" or tensor.dtype not in FAST_DTYPES:
            return None
        flat = _memory_order(tensor.detach())
        if flat is None:
            return None
        flats.append(flat)
    squares = kernels.squares
    return [float(squares(flat.numpy())) if flat.numel() else 0.0 for flat in flats]


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
    """:func:`cpu_moments` with the compiled kernel, one block of ``BLOCK_ELEMENTS`` values
    at a time; None when a float64 sum overflows (finite float64 values near its maximum)."""
    n = flat.size
    size = _blocks.BLOCK_ELEMENTS
    if n <= size:  # the common activation: one block, no loop
        total, squares, zeros = kernel(flat)
    else:
        total = squares = 0.0
        zeros = 0
        for start in range(0, n, size):
            block_total, block_squares, block_zeros = kernel(flat[start : start + size])
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
            zeros = count_zeros(wide)
    return total, squares, zeros
