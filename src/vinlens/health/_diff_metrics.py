"""The numbers of one paired module call in a model diff: the two outputs' summaries,
``max |a - b|``, the relative L2 distance and the cosine, read in bounded float64 blocks
(or one compiled pass of two finite dense CPU outputs)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from vinlens.health.summaries import reducible
from vinlens.model_inspection import SummaryAccumulator, TensorSummary
from vinlens.model_inspection.summary import BLOCK_ELEMENTS, finite_pair_sums, tensor_blocks


def output_drift(
    path: str,
    tensors_a: list[tuple[str, torch.Tensor]],
    tensors_b: list[tuple[str, torch.Tensor]],
) -> tuple[float, float, float, TensorSummary, TensorSummary]:
    """(max |a - b|, relative L2, cosine, summary of a, summary of b) of one call's
    floating outputs, each side taken as one vector (see :class:`ModuleDiff`'s fields).

    Raises:
        ValueError: the two sides differ in structure or shapes (``path`` names the call).
    """
    layout_a = [(p, tuple(t.shape)) for p, t in tensors_a]
    layout_b = [(p, tuple(t.shape)) for p, t in tensors_b]
    if layout_a != layout_b:
        raise ValueError(
            f"outputs of {path!r} differ in structure or shape: {layout_a} vs {layout_b}"
        )
    summary_a, summary_b = SummaryAccumulator(), SummaryAccumulator()
    max_abs = 0.0
    diff_sq = norm_a_sq = norm_b_sq = dot = 0.0
    # The summaries first: they tell whether every value is finite, and then the pair pass
    # needs no <a, b> (the cosine comes from the distance and the norms).
    pairs_found: list[tuple[torch.Tensor, torch.Tensor, SummaryAccumulator, SummaryAccumulator]]
    pairs_found = []
    for (_, a), (_, b) in zip(tensors_a, tensors_b, strict=True):
        a, b = reducible(a), reducible(b)  # float8: an exact float16 copy
        part_a, part_b = SummaryAccumulator().update(a), SummaryAccumulator().update(b)
        summary_a.merge(part_a)
        summary_b.merge(part_b)
        pairs_found.append((a, b, part_a, part_b))
    every_finite = all(
        part_a.finite + part_b.finite == 2 * a.numel() for a, _, part_a, part_b in pairs_found
    )
    for a, b, part_a, part_b in pairs_found:
        if part_a.finite + part_b.finite != 2 * a.numel():
            pairs: Iterator[tuple[float, float, float, float, float]] = _pair_moments(a, b)
        else:
            pairs = _finite_pair(a, b, part_a, part_b, product=not every_finite)
        for block_max, block_diff, block_a, block_b, block_dot in pairs:
            max_abs = block_max if math.isnan(block_max) else max(max_abs, block_max)
            diff_sq += block_diff
            norm_a_sq += block_a
            norm_b_sq += block_b
            dot += block_dot
            if math.isnan(max_abs):
                break
    if diff_sq == 0.0:
        relative = 0.0
    elif norm_a_sq == 0.0:
        relative = math.inf
    else:
        relative = math.sqrt(diff_sq) / math.sqrt(norm_a_sq)
    if math.isnan(max_abs):
        relative = math.nan
    if norm_a_sq == 0.0 and norm_b_sq == 0.0:
        cosine = 1.0
    elif norm_a_sq == 0.0 or norm_b_sq == 0.0:
        cosine = 0.0
    elif every_finite:
        cosine = _cosine_from_distance(diff_sq, norm_a_sq, norm_b_sq)
    else:
        cosine = dot / (math.sqrt(norm_a_sq) * math.sqrt(norm_b_sq))
    return max_abs, relative, cosine, summary_a.finish(), summary_b.finish()


def _cosine_from_distance(diff_sq: float, norm_a_sq: float, norm_b_sq: float) -> float:
    """cos(a, b) from ``||a-b||^2``, ``||a||^2`` and ``||b||^2`` (the relative_l2 blocks).

    ``1 - cos = (||a-b||^2 - (||a|| - ||b||)^2) / (2 ||a|| ||b||)``: the difference is
    reduced from ``a - b`` itself, and the norms' own rounding cancels in
    ``||a|| - ||b||`` to second order, so ``1 - cos`` keeps its relative precision near 1
    where a float32 ``<a, b> / (||a|| ||b||)`` leaves ~1e-7 of absolute noise.
    """
    norm_a = math.sqrt(norm_a_sq)
    norm_b = math.sqrt(norm_b_sq)
    gap = norm_a - norm_b
    one_minus = (diff_sq - gap * gap) / (2.0 * norm_a * norm_b)
    return min(1.0, max(-1.0, 1.0 - one_minus))


def _finite_pair(
    a: torch.Tensor,
    b: torch.Tensor,
    part_a: SummaryAccumulator,
    part_b: SummaryAccumulator,
    *,
    product: bool,
) -> Iterator[tuple[float, float, float, float, float]]:
    """:func:`_finite_moments` of two all-finite outputs; on the CPU with the compiled pass
    (:func:`~vinlens.model_inspection.summary.finite_pair_sums`), one float64 read of both
    tensors, with ``||a||^2`` and ``||b||^2`` taken from their summaries (``M2 + n mean^2``,
    float64, every value finite)."""
    found = finite_pair_sums(a, b)
    if found is None:
        yield from _finite_moments(a, b, product=product)
        return
    largest, distance, dot = found
    yield largest, distance, _squares(part_a), _squares(part_b), dot if product else 0.0


def _squares(part: SummaryAccumulator) -> float:
    """``sum(x^2)`` of an all-finite summary: ``M2 + n mean^2`` (both terms >= 0)."""
    return part.m2 + part.finite * part.mean * part.mean


def _finite_moments(
    a: torch.Tensor, b: torch.Tensor, *, product: bool
) -> Iterator[tuple[float, float, float, float, float]]:
    """(max |a-b|, ||a-b||^2, ||a||^2, ||b||^2, <a,b>) per block of two all-finite outputs:
    one ``aminmax`` of the difference (the one temporary per block) and dot products of the
    blocks themselves, accumulated by the backend in the source precision. Without
    ``product`` the last term is 0: when every output of the call is finite its cosine
    needs no ``<a, b>`` (the norms' rounding then cancels in ``||a|| - ||b||``).
    """
    a = a.detach()
    b = b.detach()
    if a.device != b.device:
        b = b.to(a.device)
    if a.dtype != b.dtype or a.dtype not in (torch.float32, torch.float64):
        yield from _pair_moments(a, b)
        return
    rows: list[torch.Tensor] = []
    for block_a, block_b in zip(
        tensor_blocks(a, BLOCK_ELEMENTS), tensor_blocks(b, BLOCK_ELEMENTS), strict=True
    ):
        flat_a = block_a.reshape(-1)  # a view when the block is one run of memory
        flat_b = block_b.reshape(-1)
        if not flat_a.numel():
            continue
        delta = flat_a - flat_b
        low, high = torch.aminmax(delta)
        terms = [
            torch.maximum(high, -low),
            torch.dot(delta, delta),
            torch.dot(flat_a, flat_a),
            torch.dot(flat_b, flat_b),
        ]
        if product:
            terms.append(torch.dot(flat_a, flat_b))
        rows.append(torch.stack(terms))
    if not rows:
        return
    for row in torch.stack(rows).to(torch.float64).tolist():
        yield row[0], row[1], row[2], row[3], row[4] if product else 0.0


def _pair_moments(
    a: torch.Tensor, b: torch.Tensor
) -> Iterator[tuple[float, float, float, float, float]]:
    """(max |a-b|, ||a-b||^2, ||a||^2, ||b||^2, <a,b>) per bounded float64 block pair.

    Equal values (NaN and infinities included) differ by zero; non-finite values
    are left out of norms and products so one infinity does not hide the rest.
    """
    a = a.detach()
    b = b.detach()
    if a.device != b.device:
        b = b.to(a.device)
    f64 = torch.float64
    rows: list[torch.Tensor] = []
    for block_a, block_b in zip(
        tensor_blocks(a, BLOCK_ELEMENTS), tensor_blocks(b, BLOCK_ELEMENTS), strict=True
    ):
        wide_a = block_a.to(f64)
        wide_b = block_b.to(f64)
        same = (wide_a == wide_b) | (torch.isnan(wide_a) & torch.isnan(wide_b))
        delta = torch.where(same, 0.0, wide_a - wide_b).abs()
        finite_a = torch.where(torch.isfinite(wide_a), wide_a, 0.0)
        finite_b = torch.where(torch.isfinite(wide_b), wide_b, 0.0)
        rows.append(
            torch.stack(
                [
                    delta.amax() if delta.numel() else delta.new_zeros(()),
                    torch.where(torch.isfinite(delta), delta, 0.0).square().sum(),
                    finite_a.square().sum(),
                    finite_b.square().sum(),
                    (finite_a * finite_b).sum(),
                ]
            )
        )
    if not rows:
        return
    for row in torch.stack(rows).tolist():
        yield row[0], row[1], row[2], row[3], row[4]
