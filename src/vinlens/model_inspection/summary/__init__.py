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

The package's modules: ``_moments`` (the record, the accumulator and the choice of
path), ``_cpu`` (float64 sums on the CPU, compiled by ``_kernel`` when numba is
there), ``_blocks`` (bounded blocks and the exact blockwise path) and ``_cache`` (the
per-forward memos). :data:`BLOCK_ELEMENTS` here is the default block size; every path
reads ``_blocks.BLOCK_ELEMENTS`` when it runs.
"""

from __future__ import annotations

from vinlens.model_inspection.summary._blocks import BLOCK_ELEMENTS, tensor_blocks
from vinlens.model_inspection.summary._cache import FiniteCache, SummaryCache
from vinlens.model_inspection.summary._cpu import finite_pair_sums, sum_and_squares, sums_of_squares
from vinlens.model_inspection.summary._moments import (
    SummaryAccumulator,
    TensorSummary,
    stored_elements,
    summarize_tensor,
    summary_unsupported_reason,
)

__all__ = [
    "BLOCK_ELEMENTS",
    "FiniteCache",
    "SummaryAccumulator",
    "SummaryCache",
    "TensorSummary",
    "finite_pair_sums",
    "stored_elements",
    "sum_and_squares",
    "summarize_tensor",
    "summary_unsupported_reason",
    "sums_of_squares",
    "tensor_blocks",
]
