"""The overhead budget of :class:`~vinlens.health.monitor.TrainingMonitor`: its own time
measured against the loop's, and the sampling interval stretched to stay under a budget.

The monitor times its own work with a monotonic clock: ``begin_step``, the bodies of the
sampled step's hooks and ``end_step`` (the replay of a non-finite step excluded: it is
neither a loop's time nor avoidable by sampling less). An *iteration* runs from one
``begin_step`` to the next, so it holds everything the loop does (forward, backward,
optimizer step, data loading). A sampled iteration costs what its own time says, or more:
its length minus the loop's own work of an unsampled iteration (the mean, over unsampled
iterations, of their length minus the monitor's time in them), which catches what the
clock inside the monitor cannot see (the dispatch of the hooks, a compiled model's sampled
step running eagerly).

With a budget ``b`` a step is sampled when at least ``every`` steps have passed since the
last sample and sampling it keeps the monitor's share within ``b``::

    spent + cost <= b * (elapsed + work + cost)

(``spent``: the monitor's time so far, ``elapsed``: the loop's time so far, ``work`` and
``cost``: the estimates of an unsampled iteration's loop work and of a sample's cost).
The first step is sampled before any cost is known; past :data:`MAX_STRETCH` times
``every`` steps without a sample one is taken whatever it costs, so the history never
stops. While the estimates hold, every sample after the first leaves ``spent <= b *
elapsed``, and unsampled steps lower the share unless the per-step check alone costs more
than ``b``, which no interval can help.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

#: With a budget, the longest sampling interval, in multiples of ``every``.
MAX_STRETCH = 100

#: Weight of the newest sampled cost in its running estimate.
COST_WEIGHT = 0.25


def check_budget(budget: object) -> float | None:
    if budget is None:
        return None
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | float)
        or not 0 < budget < 1
        or math.isnan(budget)
    ):
        raise ValueError(
            "budget must be None or a fraction of the loop's time between 0 and 1 "
            f"(0.02: the monitor may take 2%), got {budget!r}"
        )
    return float(budget)


class Budget:
    """The monitor's time and the loop's, and the choice of the sampled steps."""

    def __init__(
        self, budget: object, every: int, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.fraction = check_budget(budget)
        self.every = every
        self.clock = clock
        self._start: float | None = None  # the first begin_step
        self._begin = 0.0  # the iteration in progress began
        self._end = 0.0  # the latest end_step ended
        self._sampled = False  # the iteration in progress is a sampled one
        self._own = 0.0  # the monitor's time in the iteration in progress
        self._excluded = 0.0  # replays, in the iteration in progress
        self._excluded_total = 0.0
        self.spent = 0.0  # the monitor's time, every iteration
        self._work_sum = 0.0  # loop work of the unsampled iterations
        self._work_count = 0
        self._cost: float | None = None  # running estimate of a sample's cost
        self._unpriced: list[tuple[float, float]] = []  # sampled (length, own) to price
        self._last_sample: int | None = None

    # ------------------------------------------------------------------ the iteration

    def begin(self, step: int) -> tuple[tuple[float, float], bool]:
        """A step begins: close the previous iteration; returns (a :meth:`mark` of now,
        whether to sample the step)."""
        now = self.clock()
        if self._start is None:
            self._start = now
        else:
            self._close(now)
        self._begin, self._own, self._excluded = now, 0.0, 0.0
        self._sampled = self._due(step, now)
        if self._sampled:
            self._last_sample = step
        return (now, self._excluded_total), self._sampled

    def spend(self, seconds: float) -> None:
        """The monitor's own time (begin_step, a hook's body, end_step)."""
        self._own += seconds
        self.spent += seconds

    def exclude(self, seconds: float) -> None:
        """Time neither the monitor's nor the loop's (a replay)."""
        self._excluded += seconds
        self._excluded_total += seconds

    def mark(self) -> tuple[float, float]:
        """Where a stretch of the monitor's own work starts (see :meth:`spend_since`)."""
        return self.clock(), self._excluded_total

    def spend_since(self, mark: tuple[float, float], *, ends_step: bool = False) -> None:
        """The monitor's time since ``mark``, less what was excluded meanwhile."""
        now = self.clock()
        start, excluded = mark
        self.spend(max(now - start - (self._excluded_total - excluded), 0.0))
        if ends_step:
            self._end = now

    def _close(self, now: float) -> None:
        length = now - self._begin - self._excluded
        if self._sampled:
            self._unpriced.append((length, self._own))
        else:
            self._work_sum += max(length - self._own, 0.0)
            self._work_count += 1
        if not self._work_count:
            return  # a sampled iteration is priced against an unsampled one
        work = self._work_sum / self._work_count
        for length, own in self._unpriced:
            cost = own
            hidden = length - work  # what the clock inside the monitor missed included
            if hidden > cost:
                self.spent += hidden - cost
                cost = hidden
            self._cost = (
                cost if self._cost is None else COST_WEIGHT * cost + (1 - COST_WEIGHT) * self._cost
            )
        self._unpriced.clear()

    def _due(self, step: int, now: float) -> bool:
        if self.fraction is None:
            return step % self.every == 0
        last = self._last_sample
        if last is None:
            return True
        since = step - last
        if since < self.every:
            return False
        if since >= MAX_STRETCH * self.every:
            return True
        cost = self._cost
        if cost is None:  # the first sample is not priced yet (no unsampled step to compare)
            return False
        assert self._start is not None
        elapsed = now - self._start - self._excluded_total
        work = self._work_sum / self._work_count if self._work_count else 0.0
        return self.spent + cost <= self.fraction * (elapsed + work + cost)

    # ------------------------------------------------------------------ the report

    @property
    def overhead(self) -> float:
        """The monitor's share of the loop's time so far (0.0 before a step ended)."""
        if self._start is None:
            return 0.0
        elapsed = max(self._end, self._begin) - self._start - self._excluded_total
        return self.spent / elapsed if elapsed > 0 else 0.0
