"""Timing shared by the attribution benchmarks: interleaved medians of two callables.

Both sides run alternately in the same process, so load drifting on this shared
machine hits them alike; each side's figure is the median over rounds of the median
over repeats. Time is this process's CPU time (the benchmarks run torch on one
thread): wall time on a machine shared by many jobs swings by 2x between identical
calls, CPU time much less.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU time of this process over ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def interleaved_medians(
    reference: Callable[[], object],
    measured: Callable[[], object],
    *,
    rounds: int,
    repeats: int,
) -> tuple[float, float]:
    """``(reference seconds, measured seconds)`` after one warm-up call of each."""
    reference()
    measured()
    reference_times, measured_times = [], []
    for _ in range(rounds):
        reference_times.append(median_seconds(reference, repeats))
        measured_times.append(median_seconds(measured, repeats))
    return statistics.median(reference_times), statistics.median(measured_times)


def verdict(worst: float, target: float) -> str:
    """The closing line every ratio benchmark prints."""
    met = "meets" if worst <= target else "MISSES"
    return f"worst ratio {worst:.3f} ({met} target <= {target})"
