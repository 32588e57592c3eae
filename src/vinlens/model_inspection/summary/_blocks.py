"""Bounded blocks of a tensor, and the exact float64 moments read one block at a time.

Every path of a summary that widens or compacts values does so in views of at most
:data:`BLOCK_ELEMENTS` elements (:func:`tensor_blocks`), so its temporaries are bounded
whatever the tensor's size. :func:`blockwise_rows` is the path for float16, bfloat16,
float8 and for tensors holding NaN or infinities; :func:`finite_two_pass` is the exact
mean and spread of an all-finite tensor whose mean dominates its spread.

Other modules of this package read ``_blocks.BLOCK_ELEMENTS`` at call time (not a copy
bound at import), so one assignment changes the block size of every path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from vinlens.operations import chan_merge

#: Largest number of elements a summary widens or compacts at once.
BLOCK_ELEMENTS = 1 << 20
#: Rows of per-block results gathered on the device before one transfer to the host.
_TABLE_ROWS = 64


def unexpanded(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
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


# Same-size integer views: +0.0 is the all-zero bit pattern, so a count of non-zero
# integers counts non-zero floats, except -0.0, whose pattern is the integer minimum.
_SAME_SIZE_INT = {torch.float32: torch.int32, torch.float64: torch.int64}
_NEGATIVE_ZERO_BITS = {torch.float32: -(2**31), torch.float64: -(2**63)}


def count_zeros(tensor: torch.Tensor) -> int:
    """Exact count of zeros (both signs) with reductions only, no full-size mask."""
    bits = tensor.view(_SAME_SIZE_INT[tensor.dtype])
    if int(bits.amin().item()) != _NEGATIVE_ZERO_BITS[tensor.dtype]:
        return tensor.numel() - int(torch.count_nonzero(bits).item())
    # -0.0 is common (hardswish and SiLU of negative values give it): |x| clears the sign
    # bit, so the bit count of one bounded block of absolute values counts both zeros.
    nonzero = 0
    for block in tensor_blocks(tensor, BLOCK_ELEMENTS):
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
        yield from tensor_blocks(tensor.select(0, index), limit)


def blockwise_rows(tensor: torch.Tensor) -> list[list[float]]:
    """Exact float64 moments of every block, one host transfer per table of blocks.

    One row per block of at most ``BLOCK_ELEMENTS`` values: finite count, mean, sum of
    squared deviations, min, max, zeros, NaN, +inf and elements (the caller merges them).
    Every block is widened into the same float64 buffers (and one boolean buffer) and its
    nine numbers are written into a small table; all are allocated once and reused, so a
    block allocates nothing but a few scalars that die with it. Temporaries whose size
    changes from block to block (a masked selection of the finite values and its float64
    copies), between small per-block results that live to the end, fragment glibc's heap:
    one 256 MiB float16 tensor raised peak memory by 0.4-1 GiB that way. Non-finite
    values are masked in place instead: zero for the sums, +-inf for the extremes.
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
    for block in tensor_blocks(tensor, BLOCK_ELEMENTS):
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
    return rows


def finite_two_pass(tensor: torch.Tensor) -> tuple[float, float]:
    """Exact mean and sum of squared deviations of an all-finite tensor.

    Two passes in float64 per bounded block (no masks: every value is finite),
    merged with Chan et al.'s formula; one host transfer.
    """
    rows: list[torch.Tensor] = []
    sizes: list[int] = []
    for block in tensor_blocks(tensor, BLOCK_ELEMENTS):
        if block.dtype == torch.float64:
            wide = block
        else:  # at most one block; empty + copy_ is several times faster than .to()
            wide = torch.empty(block.shape, dtype=torch.float64, device=block.device)
            wide.copy_(block)
        mean = wide.mean()
        deviations = (wide - mean).reshape(-1)  # a new block: the source is never modified
        rows.append(torch.stack([mean, torch.dot(deviations, deviations)]))
        sizes.append(block.numel())
    count, mean_all, m2_all = 0, 0.0, 0.0
    for size, (mean_b, m2_b) in zip(sizes, torch.stack(rows).tolist(), strict=True):
        mean_all, m2_all = chan_merge(count, mean_all, m2_all, size, mean_b, m2_b)
        count += size
    return mean_all, m2_all
