"""How close each module's outputs come to a low-precision dtype's limits: :func:`precision_headroom`.

Before a model moves to float16 (or bfloat16), the question is which activations will
overflow its largest finite value or fall below its smallest normal one. One forward,
run as it is (float32, float16, bfloat16 or under autocast), answers it per module
call: the largest finite magnitude of its floating outputs, how many values become
infinities when cast to ``dtype`` (magnitudes at or above the rounding boundary
``finfo(dtype).max + ulp/2``, infinities already there included), how many lie below
``finfo(dtype).tiny`` without being zero (they would become subnormal or zero), and the
headroom in bits, ``log2(finfo(dtype).max / abs_max)``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vinlens.health.summaries import check_callable, check_model, floating_tensors, labelled_modules
from vinlens.hooks import HookSet
from vinlens.wrappers import run_eagerly

__all__ = ["ModulePrecision", "PrecisionReport", "precision_headroom"]

#: Elements compared at once (the largest temporary a row costs is a few of these).
PRECISION_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class ModulePrecision:
    """One module call's floating outputs measured against a target dtype.

    Attributes:
        module_path: Registered path (``"<root>"`` for the model itself).
        call_index: Zero-based index of the call of this path within the forward.
        count: Elements of the call's floating outputs (finite or not).
        abs_max: Largest finite magnitude (0 when there is no finite non-zero value, NaN
            when no value is finite).
        overflow_count: Values whose cast to ``dtype`` is infinite: magnitudes at or above
            the rounding boundary ``finfo(dtype).max + ulp/2`` (values between ``max`` and
            the boundary round to ``max``), infinities already in the outputs included.
        underflow_count: Non-zero finite values whose magnitude is below
            ``finfo(dtype).tiny`` (they become subnormal or zero in ``dtype``).
        headroom_bits: ``log2(finfo(dtype).max / abs_max)``: inf when ``abs_max`` is 0,
            negative when ``abs_max`` exceeds ``max``, -inf when the outputs hold an
            infinity, NaN when no value is finite.
    """

    module_path: str
    call_index: int
    count: int
    abs_max: float
    overflow_count: int
    underflow_count: int
    headroom_bits: float


@dataclass(frozen=True)
class PrecisionReport:
    """Precision headroom of every module call of one forward, in order of return.

    Attributes:
        modules: One row per module call with floating outputs.
        first_overflow_path: Path of the first row with ``overflow_count > 0``, or None.
        dtype: The target dtype, as a string (``"torch.float16"``).
    """

    modules: tuple[ModulePrecision, ...]
    first_overflow_path: str | None
    dtype: str = "torch.float16"

    def lowest_headroom(self) -> Mapping[str, float]:
        """Per module path (first return order), its calls' lowest ``headroom_bits``."""
        lowest: dict[str, float] = {}
        for row in self.modules:
            seen = lowest.get(row.module_path)
            if seen is None or row.headroom_bits < seen or math.isnan(seen):
                lowest[row.module_path] = row.headroom_bits
        return lowest


_TARGETS = (torch.float16, torch.bfloat16)


def _check_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"dtype must be a floating torch.dtype such as torch.float16, got {dtype!r}"
        )
    return dtype


def _overflow_boundary(target: torch.dtype) -> float:
    """Smallest magnitude whose cast to ``target`` is infinite (inf for float64).

    Round-to-nearest-even sends ``max + ulp/2`` up: ``max`` has an odd (all-ones) mantissa.
    """
    if target == torch.float64:
        return math.inf  # no wider value to overflow from: only infinities count
    info = torch.finfo(target)
    _, exponent = math.frexp(float(info.max))  # max = m * 2**exponent, 0.5 <= m < 1
    return float(info.max) + info.eps * 2.0 ** (exponent - 1) / 2


def _measure(
    tensors: list[torch.Tensor], boundary: float, tiny: float
) -> tuple[int, float, int, int, int]:
    """(count, largest finite magnitude or -1, overflows, underflows, infinities)."""
    rows: list[torch.Tensor] = []
    count = 0
    for tensor in tensors:
        value = tensor.detach()
        count += value.numel()
        if value.numel() == 0:
            continue
        if value.dtype not in (torch.float32, torch.float64):
            value = value.float()  # float16/bfloat16/float8 widen exactly
        flat = value.reshape(-1)
        for start in range(0, flat.numel(), PRECISION_BLOCK_ELEMENTS):
            block = flat.narrow(0, start, min(PRECISION_BLOCK_ELEMENTS, flat.numel() - start))
            magnitude = block.abs()
            finite = torch.isfinite(magnitude)
            finite_magnitude = torch.where(finite, magnitude, -1.0)
            rows.append(
                torch.stack(
                    [
                        finite_magnitude.amax().to(torch.float64),
                        (magnitude >= boundary).sum().to(torch.float64),
                        ((finite_magnitude < tiny) & (finite_magnitude > 0))
                        .sum()
                        .to(torch.float64),
                        (magnitude == math.inf).sum().to(torch.float64),
                    ]
                )
            )
    if not rows:
        return count, -1.0, 0, 0, 0
    table = torch.stack(rows)
    top = float(table[:, 0].amax().item())
    over, under, infinite = (int(v) for v in table[:, 1:].sum(0).tolist())
    return count, top, over, under, infinite


def precision_headroom(
    model: nn.Module, run: Callable[[], object], dtype: torch.dtype = torch.float16
) -> PrecisionReport:
    """Run the forward once and measure every module call's outputs against ``dtype``.

    ``run`` drives the forward as the caller would (for example ``lambda: model(x)``,
    inside ``torch.autocast`` when the model runs that way). Every registered module's
    floating outputs are measured when it returns, on their device, with one host
    transfer per call; nothing is retained. Only forwards on the calling thread (the one
    ``run`` runs on) are measured: other threads forwarding the same model meanwhile are
    not counted.

    Args:
        model: Constructed model whose registered modules are observed.
        run: Callable of no arguments that drives the forward.
        dtype: Target floating dtype (``torch.float16`` or ``torch.bfloat16`` typically).

    Returns:
        One :class:`ModulePrecision` per module call with floating outputs, in order of
        return, and the first path that overflows.

    Raises:
        TypeError: bad model, run or dtype.
        Exception: whatever ``run`` raises, after the hooks are removed.
    """
    check_model(model)
    check_callable(run, "takes no arguments and drives the forward")
    target = _check_dtype(dtype)
    info = torch.finfo(target)
    high, tiny = float(info.max), float(info.tiny)
    boundary = _overflow_boundary(target)
    targets = labelled_modules(model, None)
    counts: dict[str, int] = {}
    rows: list[ModulePrecision] = []
    lock = threading.Lock()
    owner = threading.get_ident()

    def post(label: str, args: tuple[Any, ...], output: Any) -> None:
        if threading.get_ident() != owner:
            return  # another thread's forward of the same model (evaluation, serving)
        tensors = [t for _, t in floating_tensors(output, "output")]
        with lock:
            index = counts.get(label, 0)
            counts[label] = index + 1
        if not tensors:
            return
        count, top, over, under, infinite = _measure(tensors, boundary, tiny)
        if top < 0:
            abs_max = headroom = math.nan
        else:
            abs_max = top
            headroom = math.inf if top == 0 else math.log2(high) - math.log2(top)
        if infinite:
            headroom = -math.inf
        with lock:
            rows.append(ModulePrecision(label, index, count, abs_max, over, under, headroom))

    with run_eagerly(), HookSet() as hooks:
        hooks.hook_modules(targets, None, post, own_thread=True)
        run()
    first = next((row.module_path for row in rows if row.overflow_count), None)
    return PrecisionReport(tuple(rows), first, str(target))
