"""RunCompareWidget: where two training runs part ways.

Two runs of the same model (a rerun, a changed seed, a new library version) are shown side
by side from their records only (see :mod:`vinlens.widgets.run_compare_payload`):

- both runs' every-step loss and global gradient norm on one chart each, the first step
  where the runs differ (``compare_runs``) marked;
- the engine's verdict: identical, or the first divergent step, rank, module, the field
  that differed first with both values, and the likely cause;
- a module x step heatmap of the relative difference ``|a-b| / max(|a|,|b|)``
  (``relative_difference``) of the gradient norms, the weight norms or the sampled output
  std, modules in production order, the divergent module's row highlighted. "Go to module"
  picks it in the shared :class:`~vinlens.widgets.ModuleSelection`, so a
  ``ModuleTableWidget`` given the same selection shows it.

Each run is a run log (its directory or URL, its ``TrainingRun``, or one rank of it,
``open_run(d).rank(r)``) or a live :class:`~vinlens.health.TrainingMonitor` in this kernel.
The divergence is found from the logs' every-step fingerprints, so it needs two run logs; a
live monitor's curves are shown beside the other run's, and the verdict says what is missing.
The view follows both runs while they grow: the background command ``follow`` (started at
construction, cancelled by ``close()``) checks every ``interval`` seconds and recomputes only
when either run moved.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import traitlets

from vinlens.health import (
    RankView,
    TrainingMonitor,
    TrainingRun,
    compare_runs,
    open_run,
    relative_difference,
)
from vinlens.widgets._base import (
    BrowserSafeState,
    CommandContext,
    CommandError,
    command,
    widget_asset,
)
from vinlens.widgets._selection import ModuleSelection, SelectionLink, link_selection
from vinlens.widgets.run_compare_payload import (
    DIFFERENCE_FIELDS,
    curves_payload,
    difference_payload,
    divergence_payload,
)

__all__ = ["DIFFERENCE_FIELDS", "RunCompareWidget"]

_NO_LOGS = (
    "a TrainingMonitor without log_dir= has no fingerprints to compare: give it log_dir= to"
    " find where the runs part ways"
)

#: Least time between two checks of the followed runs (an ``interval`` of 0 would spin).
MIN_POLL_S = 0.05


def _kind(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


@dataclass
class _Side:
    """One of the two runs: a run log (with the rank a ``RankView`` named) or a monitor."""

    name: str
    run: TrainingRun | None
    monitor: TrainingMonitor | None
    rank: int | None

    @property
    def label(self) -> str:
        if self.run is not None:
            return str(self.run.log_dir)
        return "live TrainingMonitor (no run log)"

    @property
    def ranks(self) -> tuple[int, ...]:
        if self.run is not None:
            return tuple(int(r) for r in self.run.ranks)
        assert self.monitor is not None
        return (int(self.monitor.rank),)

    def series(self, rank: int) -> Any:
        if self.run is not None:
            return self.run.step_series(rank)
        assert self.monitor is not None
        return self.monitor.step_series()

    def seen(self, rank: int) -> Any:
        """A cheap token that changes when the run moves."""
        if self.run is not None:
            return (self.run.ranks, self.run.record_counts(rank) if rank in self.run.ranks else ())
        assert self.monitor is not None
        return (self.monitor.step, self.monitor.nonfinite_count)


def _side(name: str, value: Any) -> _Side:
    if isinstance(value, RankView) and isinstance(value.run, TrainingRun):
        return _Side(name, value.run, None, int(value.rank))
    if isinstance(value, str | os.PathLike):
        return _Side(name, open_run(value), None, None)
    if isinstance(value, TrainingRun):
        return _Side(name, value, None, None)
    if isinstance(value, TrainingMonitor) and value.log_dir is not None:
        # The monitor's own run log: its fingerprints make the comparison (the log trails
        # the loop by at most the writer's flush interval).
        try:
            log = open_run(
                value.log_dir, storage_options=value.storage_options, run_id=value.run_id
            )
        except FileNotFoundError:  # nothing flushed yet: its curves, live, until restarted
            return _Side(name, None, value, int(value.rank))
        return _Side(name, log, None, int(value.rank))
    if isinstance(value, TrainingMonitor):
        return _Side(name, None, value, int(value.rank))
    raise TypeError(
        f"{name} must be a run log's directory or URL, a vinlens.health.TrainingRun "
        "(open_run(log_dir)), one rank of it (open_run(log_dir).rank(r)) or a live "
        f"TrainingMonitor, got {_kind(value)}"
    )


class RunCompareWidget(BrowserSafeState):
    """Two training runs side by side, and the first step where they part ways.

    Args:
        a, b: Each a run log's directory or URL, a ``TrainingRun``
            (``vinlens.health.open_run(log_dir)``), one rank of it
            (``open_run(log_dir).rank(r)``: that rank is shown first) or a live
            ``TrainingMonitor`` (its curves only: the divergence needs two run logs).
        rtol, atol: Passed to ``compare_runs``: how far two values may be apart and still
            count as equal (0: bit for bit).
        field: The statistic of the heatmap, one of :data:`DIFFERENCE_FIELDS`.
        selection: A :class:`~vinlens.widgets.ModuleSelection` shared with other widgets
            (a ``ModuleTableWidget``); "Go to module" picks the divergent module in it.
        interval: Seconds between two checks of whether either run moved.

    ``rank`` and ``field`` (synced) pick what the curves and the heatmap show;
    ``selected_paths`` (synced) is the module picked here. :attr:`divergence` is the
    ``RunDivergence`` shown (None without two run logs). Call :meth:`refresh` to recompute
    now and ``close()`` to stop following.

    Raises:
        TypeError: ``a`` or ``b`` is none of the above, or ``selection`` is not a
            ``ModuleSelection``.
        ValueError: an unknown ``field``, a negative ``interval``, or runs with no rank in
            common.
        FileNotFoundError: a directory holds no run log.
    """

    _esm = widget_asset("run_compare.js")
    _css = widget_asset("run_compare.css")

    runs = traitlets.Dict().tag(sync=True)
    curves = traitlets.Dict().tag(sync=True)
    verdict = traitlets.Dict().tag(sync=True)
    difference = traitlets.Dict().tag(sync=True)
    fields = traitlets.List(traitlets.Unicode()).tag(sync=True)
    field = traitlets.Unicode("grad_norm").tag(sync=True)
    rank = traitlets.Int(0).tag(sync=True)
    selected_paths = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def __init__(
        self,
        a: Any,
        b: Any,
        *,
        rtol: float = 0.0,
        atol: float = 0.0,
        field: str = "grad_norm",
        selection: ModuleSelection | None = None,
        interval: float = 1.0,
        **kwargs: Any,
    ) -> None:
        if field not in DIFFERENCE_FIELDS:
            raise ValueError(f"field must be one of {', '.join(DIFFERENCE_FIELDS)}, got {field!r}")
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise ValueError(f"interval must be a non-negative number of seconds, got {interval!r}")
        if selection is not None and not isinstance(selection, ModuleSelection):
            raise TypeError(
                f"selection must be a vinlens.widgets.ModuleSelection, got {_kind(selection)}"
            )
        self._a, self._b = _side("a", a), _side("b", b)
        # A monitor's curves are its own rank's whatever rank is picked: the ranks offered
        # are those of the run logs (both: the ranks they share).
        logs = [side for side in (self._a, self._b) if side.run is not None] or [self._a]
        shared = [r for r in logs[0].ranks if all(r in side.ranks for side in logs)]
        if not shared:
            raise ValueError(
                f"the runs share no rank: {self._a.label} has ranks {list(self._a.ranks)}, "
                f"{self._b.label} has {list(self._b.ranks)}"
            )
        super().__init__(fields=list(DIFFERENCE_FIELDS), field=field, **kwargs)
        self.rtol, self.atol = rtol, atol
        self.interval = float(interval)
        self.divergence: Any = None
        self._shared = shared
        self._lock = threading.Lock()  # one comparison assembled and sent at a time
        self._seen: Any = None
        self._wake = threading.Event()
        self._follow = None
        self._selection_link: SelectionLink | None = None
        self.selection = ModuleSelection() if selection is None else selection
        first = self._a.rank if self._a.rank is not None else self._b.rank
        self.rank = first if first is not None and first in shared else shared[0]
        self._picked_rank = first is not None
        self.refresh()
        self._selection_link = link_selection(
            self.selection, self, "selected_paths", known=self._knows
        )
        self.observe(self._on_pick, names=["rank", "field"])
        self._follow = self.start_command("follow", trigger="construction")

    @property
    def a(self) -> Any:
        """Run A: its ``TrainingRun``, or the ``TrainingMonitor``."""
        return self._a.run if self._a.run is not None else self._a.monitor

    @property
    def b(self) -> Any:
        """Run B: its ``TrainingRun``, or the ``TrainingMonitor``."""
        return self._b.run if self._b.run is not None else self._b.monitor

    def refresh(self) -> None:
        """Read what both run logs appended and send the comparison now (on the caller's
        thread)."""
        for side in (self._a, self._b):
            if side.run is not None and self._follow is not None:
                side.run.refresh()
        self._push(force=True)

    def go_to_module(self) -> None:
        """Pick the divergent module in the shared selection (the "Go to module" button)."""
        module = None if self.divergence is None else self.divergence.module
        if module is None:
            raise ValueError("the runs did not diverge in a module: there is none to go to")
        self.selected_paths = [module]

    def close(self) -> None:
        # Also runs from __del__ of a widget whose constructor refused its arguments.
        follow = getattr(self, "_follow", None)
        if follow is not None:
            follow.cancel()
            self._wake.set()
        link = getattr(self, "_selection_link", None)
        if link is not None:
            self._selection_link = None
            link.unlink()
        super().close()

    # -- commands ------------------------------------------------------------------------
    @command("follow", background=True)
    def _follow_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        # Both runs are checked every interval (a log may wait on a bucket: this is the
        # widget's worker thread, not the kernel's) and the comparison is recomputed only
        # when either moved. A failed read is shown and retried at the next interval.
        if self._follow is not None and self._follow.ctx is not ctx:
            raise CommandError("this view already follows its runs")
        while not ctx.cancelled:
            self._wake.wait(max(self.interval, MIN_POLL_S))
            self._wake.clear()
            if ctx.cancelled:
                break
            try:
                for side in (self._a, self._b):
                    if side.run is not None:
                        ctx.call(side.run.refresh)
                self._push(force=False)
            except Exception as error:
                if ctx.cancelled:
                    break
                self._report_error("", f"comparing the runs failed: {error}")
        return {}

    # -- updates -------------------------------------------------------------------------
    def _knows(self, path: str) -> bool:
        return path in self.difference.get("paths", ())

    def _push(self, *, force: bool) -> None:
        with self._lock:
            rank, field = int(self.rank), str(self.field)
            seen = (rank, field, self._a.seen(rank), self._b.seen(rank))
            if not force and seen == self._seen:
                return
            run_a, run_b = self._a.run, self._b.run
            divergence = None
            verdict: dict[str, Any] = {"note": _NO_LOGS}
            difference: dict[str, Any] = {}
            if run_a is not None and run_b is not None:
                # A log that has no step yet, or runs of other world sizes: the engine's
                # reason is the verdict (a growing log is compared again when it moves).
                try:
                    divergence = compare_runs(run_a, run_b, rtol=self.rtol, atol=self.atol)
                except ValueError as error:
                    verdict = {"note": str(error)}
                if divergence is not None:
                    verdict = divergence_payload(divergence)
                    if not self._picked_rank and divergence.rank is not None:
                        # The first view opens on the rank where the runs part ways.
                        self._picked_rank = True
                        if divergence.rank in self._shared:
                            rank = int(divergence.rank)
                            seen = (rank, field, self._a.seen(rank), self._b.seen(rank))
                try:
                    matrix = relative_difference(run_a, run_b, field=field, rank=rank)
                    difference = difference_payload(matrix)
                except ValueError as error:  # e.g. weight norms of a log without them
                    difference = {"field": field, "message": str(error)}
            curves = curves_payload(self._a.series(rank), self._b.series(rank))
            runs = {
                "a": {"label": self._a.label, "live": self._a.monitor is not None},
                "b": {"label": self._b.label, "live": self._b.monitor is not None},
                "ranks": list(self._shared),
                "rank": rank,
            }
            self.divergence = divergence
            with self.hold_sync():
                if self.rank != rank:
                    self.rank = rank
                self.runs = runs
                self.curves = curves
                self.difference = difference
                self.verdict = verdict
            self._seen = seen

    def _on_pick(self, change: dict[str, Any]) -> None:
        # The browser picked another rank or field: recompute now, off the comms thread.
        if change["name"] == "field" and change["new"] not in DIFFERENCE_FIELDS:
            self._report_error("", f"unknown field {change['new']!r}")
            self.field = change["old"]
            return
        if change["name"] == "rank" and change["new"] not in self._shared:
            self._report_error("", f"the runs share no rank {change['new']!r}")
            self.rank = change["old"]
            return
        if change["name"] == "rank":
            self._picked_rank = True
        self._wake.set()
