"""Which cameras' attribution maps are near-flat, judged against each other.

Normalising each camera's map to its own range makes a map that spans 1.8e-4..2.0e-4
look exactly as hot as one that spans 0..0.8: the colours say nothing about how much a
camera's evidence matters. :func:`map_flatness` compares each camera's raw span
(``max - min``) with the largest span among the cameras shown together and with an
absolute floor, so a viewer (or a script) can say which maps carry no real structure.
:func:`~vinlens.attribution.explain.near_flat_cameras` applies the same rule to records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_ABSOLUTE_SPAN",
    "DEFAULT_RELATIVE_SPAN",
    "MapFlatness",
    "map_flatness",
]

DEFAULT_RELATIVE_SPAN = 0.01
"""A map whose span is at most this fraction of the largest camera's span is near-flat."""

DEFAULT_ABSOLUTE_SPAN = 1e-6
"""A map whose span is at most this (in raw attribution units) is near-flat on its own."""


@dataclass(frozen=True)
class MapFlatness:
    """How flat one camera's raw map is, next to the other cameras'.

    Attributes:
        camera_key: The camera.
        raw_min: Smallest raw value of its map.
        raw_max: Largest raw value of its map.
        span: ``raw_max - raw_min`` (NaN when either end is not finite).
        relative_span: ``span`` divided by the largest finite span among the cameras
            compared (1.0 for that camera; 0.0 for every camera when all spans are 0).
        largest_camera: The camera with the largest span ("" when no span is finite).
        flat: True when ``span`` is at most the absolute floor or ``relative_span`` is at
            most the relative threshold. A map with a non-finite end is never called flat:
            NaN or infinity is a different problem and must not hide behind this mark.
        reason: Why the map is flat, in words a viewer can show ("" when it is not).
    """

    camera_key: str
    raw_min: float
    raw_max: float
    span: float
    relative_span: float
    largest_camera: str
    flat: bool
    reason: str


def map_flatness(
    ranges: Mapping[str, tuple[float, float]],
    *,
    relative_span: float = DEFAULT_RELATIVE_SPAN,
    absolute_span: float = DEFAULT_ABSOLUTE_SPAN,
) -> dict[str, MapFlatness]:
    """Judge each camera's map flat or not from its raw ``(min, max)``.

    Args:
        ranges: Camera key -> ``(raw_min, raw_max)`` of its map (for example
            ``{r.camera_key: (r.raw_min, r.raw_max) for r in records}``), for the
            cameras shown together. The result keeps this order.
        relative_span: Fraction of the largest camera's span at or below which a map
            is near-flat. With one camera only the absolute floor can apply.
        absolute_span: Span at or below which a map is near-flat whatever the others do.

    Raises:
        ValueError: On a negative or non-finite threshold, or a range whose min exceeds
            its max.
    """
    for name, value in (("relative_span", relative_span), ("absolute_span", absolute_span)):
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
    spans: dict[str, float] = {}
    for key, (lo, hi) in ranges.items():
        lo, hi = float(lo), float(hi)
        if lo > hi:
            raise ValueError(f"camera {key!r}: range min {lo!r} is larger than max {hi!r}.")
        spans[key] = hi - lo if math.isfinite(lo) and math.isfinite(hi) else math.nan
    finite = {key: span for key, span in spans.items() if math.isfinite(span)}
    largest_camera = max(finite, key=lambda key: finite[key]) if finite else ""
    largest = finite[largest_camera] if finite else math.nan

    out: dict[str, MapFlatness] = {}
    for key, (lo, hi) in ranges.items():
        span = spans[key]
        if not math.isfinite(span):
            relative = math.nan
        elif largest > 0:
            relative = span / largest
        else:
            relative = 0.0
        reason = ""
        if math.isfinite(span) and span <= absolute_span:
            reason = f"raw span {span:.3g} is at most {absolute_span:g}"
        elif key != largest_camera and math.isfinite(relative) and relative <= relative_span:
            reason = (
                f"raw span {span:.3g} is {_percent(relative)} of {largest_camera}'s {largest:.3g}"
            )
        out[key] = MapFlatness(
            camera_key=key,
            raw_min=float(lo),
            raw_max=float(hi),
            span=span,
            relative_span=relative,
            largest_camera=largest_camera,
            flat=bool(reason),
            reason=reason,
        )
    return out


def _percent(fraction: float) -> str:
    percent = 100 * fraction
    return f"{percent:.2g}%" if percent < 10 else f"{percent:.0f}%"
