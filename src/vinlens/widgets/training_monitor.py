"""TrainingMonitorWidget: a training run's module x step heatmaps, its NaN events and their origin.

The widget shows either a :class:`~vinlens.health.TrainingMonitor` while the loop runs in
the same kernel, or a run log written by a script elsewhere, finished or still growing,
local or on object storage: its directory or URL, its :class:`~vinlens.health.TrainingRun`
(``open_run``) or one rank of it (``open_run(d).rank(r)``, a ``RankView``). What the
browser gets comes from the engine records only, thinned to a bound whatever the length of
the run (see :mod:`vinlens.widgets.training_monitor_payload`):

- per module, the gradient norm of its own parameters and the std of its outputs at the
  sampled steps (the monitor's ring; every sampled step of a run log), drawn on a log
  colour scale;
- the every-step loss and global gradient norm (``step_series()``, of the monitor or of
  the run log) as curves above the heatmaps: a run is read as curves first; a run log's
  one rank at a time (``rank``);
- the non-finite events (every rank's, for a run log) with their ``GradientOrigin``: the
  first :data:`~vinlens.health.EVENTS_KEPT` in full (later ones are counted);
- an optional ``PrecisionReport`` (``precision_headroom``): each module's lowest headroom
  in bits, a column where modules under 1 bit stand out.

Live updates. With a monitor, a new kept event goes out at once as a message holding that
event only; the heatmaps, the counters and the ``events`` traitlet follow from a timer
thread at most once per ``interval`` (the training thread only schedules it), so a flood
of non-finite steps never re-sends the events already shown. With a run, the background
command ``follow`` (started at construction, cancelled by ``close()``) reads what was
appended every ``interval`` seconds (``TrainingRun.refresh``) and re-sends only when
something was.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import traitlets

from vinlens.health import EVENTS_KEPT, RankView, open_run
from vinlens.widgets._base import (
    BrowserSafeState,
    CommandContext,
    CommandError,
    command,
    widget_asset,
)
from vinlens.widgets.training_monitor_payload import (
    event_payload,
    monitor_payload,
    origin_payload,
    origins_agree,
    precision_payload,
    run_payload,
    series_payload,
)

__all__ = ["TrainingMonitorWidget", "monitor_payload", "precision_payload", "run_payload"]


#: Least time between two reads of a followed run log (an ``interval`` of 0 would spin).
MIN_POLL_S = 0.05


def _kind(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _int_arg(args: dict[str, Any], name: str, default: int | None = None) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CommandError(f"replay needs an integer {name!r}, got {value!r}")
    return value


class TrainingMonitorWidget(BrowserSafeState):
    """A view of a :class:`~vinlens.health.TrainingMonitor` or of a run log's
    :class:`~vinlens.health.TrainingRun`.

    Args:
        monitor: The monitor the training loop calls ``run_step`` on, or a run log,
            followed while it grows: a ``TrainingRun`` (``vinlens.health.open_run(log_dir)``),
            one rank of it (``open_run(log_dir).rank(r)``: that rank is shown first), or the
            log's directory or URL (opened with ``open_run``).
        precision: A ``PrecisionReport`` (``precision_headroom``) to show as a column.
        interval: Least time in seconds between two updates of the heatmaps while a
            monitor's loop runs (events are sent at once); for a run, the time between two
            reads of what was appended.
        model: For a run only: a model of the run's architecture. Each event with a replay
            bundle then gets a "Replay" button, which loads the bundle into ``model`` (its
            parameters and buffers are overwritten with the step's) and re-executes the
            step (``TrainingRun.load_replay(step, model=, rank=).run()``); the recomputed
            origin is shown beside the recorded one (``replays``).

    ``selected_event`` (synced) is the index in ``events`` of the event whose origin is
    shown; -1 shows the latest. ``rank`` (synced) is the rank whose heatmaps and curves are
    shown (a run's ranks are ``history["ranks"]``). Call :meth:`refresh` to send the current
    state at once, :meth:`show_precision` to show another report, :meth:`replay` to replay
    an event from Python, and ``close()`` to stop following.

    Raises:
        TypeError: ``monitor`` is none of these, ``precision`` is not a ``PrecisionReport``, or
            ``model`` is not a ``torch.nn.Module``.
        ValueError: a negative ``interval``, or ``model`` given with a monitor.
    """

    _esm = widget_asset("training_monitor.js")
    _css = widget_asset("training_monitor.css")

    history = traitlets.Dict().tag(sync=True)
    series = traitlets.Dict().tag(sync=True)
    events: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    precision = traitlets.Dict().tag(sync=True)
    selected_event = traitlets.Int(-1).tag(sync=True)
    rank = traitlets.Int(0).tag(sync=True)
    replays = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        monitor: Any,
        *,
        precision: Any = None,
        interval: float = 0.5,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        from torch import nn

        from vinlens.health import PrecisionReport, TrainingMonitor, TrainingRun

        first_rank = None
        if isinstance(monitor, RankView):
            monitor, first_rank = monitor.run, int(monitor.rank)
        elif isinstance(monitor, str | os.PathLike):
            monitor = open_run(monitor)
        if not isinstance(monitor, TrainingMonitor | TrainingRun):
            raise TypeError(
                "monitor must be a vinlens.health.TrainingMonitor, a TrainingRun "
                "(vinlens.health.open_run(log_dir)), one rank of it (open_run(log_dir).rank(r)) "
                f"or a run log's directory, got {_kind(monitor)}"
            )
        if precision is not None and not isinstance(precision, PrecisionReport):
            raise TypeError(
                "precision must be a vinlens.health.PrecisionReport (precision_headroom), got "
                f"{_kind(precision)}"
            )
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise ValueError(f"interval must be a non-negative number of seconds, got {interval!r}")
        if model is not None:
            if not isinstance(model, nn.Module):
                raise TypeError(f"model must be a torch.nn.Module, got {_kind(model)}")
            if not isinstance(monitor, TrainingRun):
                raise ValueError(
                    "model= replays the events of a run log: pass a TrainingRun "
                    "(vinlens.health.open_run(log_dir)) instead of a TrainingMonitor"
                )
        super().__init__(**kwargs)
        self.source = monitor
        self.monitor = monitor if isinstance(monitor, TrainingMonitor) else None
        self.run = monitor if isinstance(monitor, TrainingRun) else None
        self.model = model
        self.interval = float(interval)
        self._report = precision
        self._push_lock = threading.Lock()  # timer bookkeeping and event messages
        self._send_lock = threading.Lock()  # one payload assembled and sent at a time
        self._timer: threading.Timer | None = None
        self._stopped = False
        self._last_push = 0.0
        self._event_payloads: list[dict[str, Any]] = []
        self._events_sent = 0
        self._seen: tuple[Any, ...] = ()
        self._wake = threading.Event()
        self._follow = None
        self._stop_listening = None
        if self.run is not None:
            self.rank = self.run.ranks[0] if first_rank is None else first_rank
        elif self.monitor is not None:
            self.rank = int(self.monitor.rank)
        self.refresh()
        self.precision = precision_payload(precision, list(monitor.module_paths))
        if self.monitor is not None:
            self._stop_listening = self.monitor.add_listener(self._on_step)
        else:
            self.observe(self._on_rank, names="rank")
            self._follow = self.start_command("follow", trigger="construction")

    @property
    def report(self) -> Any:
        """The ``PrecisionReport`` shown, or None."""
        return self._report

    def show_precision(self, report: Any) -> None:
        """Show ``report`` (a ``PrecisionReport``, or None to hide the column)."""
        from vinlens.health import PrecisionReport

        if report is not None and not isinstance(report, PrecisionReport):
            raise TypeError(
                f"report must be a vinlens.health.PrecisionReport or None, got {_kind(report)}"
            )
        self._report = report
        self.precision = precision_payload(report, list(self.source.module_paths))

    def refresh(self) -> None:
        """Send the current history and events now (a run's: after reading what was
        appended, on the caller's thread)."""
        with self._push_lock:
            self._cancel_timer()
        if self.run is not None and self._follow is not None:
            self.run.refresh()
        self._push(force=True)

    def replay(self, step: int, rank: int = 0, *, timeout: float = 600) -> dict[str, Any]:
        """Replay the event of ``step`` (of ``rank``) as the "Replay" button does and return
        the entry added to ``replays`` (``origin``, ``agrees``).

        Raises:
            RuntimeError: the replay failed or another replay runs (the message says why).
        """
        reply = self.run_command("replay", {"step": step, "rank": rank}, timeout=timeout)
        if reply["kind"] != "result":
            raise RuntimeError(reply["message"])
        data: dict[str, Any] = reply["data"]
        return data

    def close(self) -> None:
        # Also runs from __del__ of a widget whose constructor refused its arguments.
        stop = getattr(self, "_stop_listening", None)
        if stop is not None:
            stop()
        lock = getattr(self, "_push_lock", None)
        if lock is not None:
            with lock:
                self._stopped = True
                self._cancel_timer()
        follow = getattr(self, "_follow", None)
        if follow is not None:
            follow.cancel()
            self._wake.set()
        super().close()

    # -- commands ------------------------------------------------------------------------
    @command("replay", background=True, exclusive=True, busy="a replay is already running")
    def _replay_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        run, model = self.run, self.model
        if run is None or model is None:
            raise CommandError(
                "replay needs a run log and a model: TrainingMonitorWidget(open_run(log_dir), "
                "model=MyModel())"
            )
        step, rank = _int_arg(args, "step"), _int_arg(args, "rank", 0)
        recorded = next((e for e in run.events if e.step == step and e.rank == rank), None)
        if recorded is None:
            raise CommandError(f"rank {rank} has no non-finite event at step {step}")
        try:
            replay = run.load_replay(step, model=model, rank=rank)
        except ValueError as error:
            raise CommandError(str(error)) from None
        ctx.check_cancelled()
        origin = replay.run()
        entry = {
            "step": step,
            "rank": rank,
            "origin": origin_payload(origin),
            "agrees": origins_agree(recorded.origin, origin),
        }
        self.replays = {**self.replays, f"{rank}:{step}": entry}
        return entry

    @command("follow", background=True)
    def _follow_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        # A run log: read what was appended every interval (it may wait on a bucket: this
        # is the widget's worker thread, not the kernel's) and re-send only when something
        # was. A failed read is shown and retried at the next interval.
        run = self.run
        if run is None or (self._follow is not None and self._follow.ctx is not ctx):
            raise CommandError("this view already follows its run log (or shows a monitor)")
        while not ctx.cancelled:
            self._wake.wait(max(self.interval, MIN_POLL_S))
            self._wake.clear()
            if ctx.cancelled:
                break
            try:
                ctx.call(run.refresh)
                self._push(force=False)
            except Exception as error:
                if ctx.cancelled:
                    break
                self._report_error("", f"reading the run log {run.log_dir!r} failed: {error}")
        return {}

    # -- updates -------------------------------------------------------------------------
    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _push(self, *, force: bool) -> None:
        with self._send_lock:
            if self.monitor is not None:
                history = monitor_payload(self.monitor)
                series = series_payload(*self.monitor.step_series())
                self._sync_monitor_events(self.monitor.events)
                self.series = series
                self.history = history
            else:
                run = self.run
                assert run is not None
                if self.rank not in run.ranks:
                    self.rank = run.ranks[0]
                rank = self.rank
                seen = (rank, run.ranks, run.record_counts(rank), len(run.events))
                if force or seen != self._seen:
                    history, series = run_payload(run, rank)
                    self._sync_run_events(run)
                    self.series = series
                    self.history = history
                    self._seen = seen
            self._last_push = time.monotonic()

    def _sync_monitor_events(self, events: Any) -> None:
        """The ``events`` traitlet: the kept events, re-set only when they grew (each
        event's payload is built once)."""
        kept = events[:EVENTS_KEPT]
        if len(kept) == len(self._event_payloads):
            return
        for event in kept[len(self._event_payloads) :]:
            self._event_payloads.append(event_payload(event))
        self.events = list(self._event_payloads)

    def _sync_run_events(self, run: Any) -> None:
        # Every rank's events in step order: one rank's event may land before another's
        # (ranks flush on their own), so the list is compared, not only appended to.
        kept = run.events[:EVENTS_KEPT]
        bundles = {r: set(run.replay_steps(r)) for r in run.ranks} if self.model else {}
        payloads = [event_payload(e, replay=e.step in bundles.get(e.rank, ())) for e in kept]
        if payloads != self._event_payloads:
            self._event_payloads = payloads
            self.events = list(payloads)

    def _on_step(self, monitor: Any) -> None:
        # Runs on the training thread after each sampled or non-finite step: a new kept
        # event goes out at once as itself alone; the rest follows from a timer thread.
        with self._push_lock:
            if self._stopped:
                return
            events = monitor.events
            if len(events) > self._events_sent:
                start, self._events_sent = self._events_sent, len(events)
                fresh = [event_payload(e) for e in events[start:]]
                self._send_message({"kind": "events", "start": start, "events": fresh})
            if self._timer is None:
                wait = max(0.0, self.interval - (time.monotonic() - self._last_push))
                self._timer = threading.Timer(wait, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._push_lock:
            if self._timer is not threading.current_thread() or self._stopped:
                return  # cancelled meanwhile (refresh() sent it already, or closed)
            self._timer = None
        try:
            self._push(force=False)
        except Exception as error:  # never raise in a timer thread: show it instead
            self._report_error("", f"updating the training monitor view failed: {error}")

    def _on_rank(self, change: dict[str, Any]) -> None:
        # The browser picked another rank: the follow command re-sends at once.
        self._wake.set()
