"""TrainingMonitorWidget: a training run's module x step heatmaps, its NaN events and their origin.

The widget shows a :class:`~vinlens.health.TrainingMonitor` while the loop runs in the same
kernel: display it before the loop, and each sampled or non-finite step updates it
(``history`` is re-sent at most once per ``interval`` seconds; a new event is sent at once).
What the browser gets comes from the engine records only:

- ``TrainingMonitor.history_matrices``: per module, the gradient norm of its own
  parameters and the std of its outputs at every sampled step in the ring (float32
  arrays, drawn on a log colour scale);
- ``TrainingMonitor.events``: each ``NonFiniteEvent`` with its ``GradientOrigin`` (marks on
  the step axis; the selected one's origin is highlighted in the module table);
- an optional ``PrecisionReport`` (``precision_headroom``): each module's lowest headroom
  in bits, a column where modules under 1 bit stand out.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import traitlets

from vinlens.widgets._base import BrowserSafeState, widget_asset
from vinlens.widgets._payload import encode_array, to_jsonable

__all__ = ["TrainingMonitorWidget", "monitor_payload", "precision_payload"]

#: Statistics drawn as heatmaps, in order.
HEATMAP_FIELDS = ("grad_norm", "std")


def _event_payload(event: Any) -> dict[str, Any]:
    """A ``NonFiniteEvent`` as sent, with the origin's ``entered_nonfinite`` (a property,
    which ``to_jsonable`` does not carry) so the browser reads the engine's answer."""
    payload: dict[str, Any] = to_jsonable(event)
    if event.origin is not None:
        payload["origin"]["entered_nonfinite"] = bool(event.origin.entered_nonfinite)
    return payload


def monitor_payload(monitor: Any) -> dict[str, Any]:
    """What the browser draws of ``monitor``: the heatmaps, the events, the counters."""
    grad_norm, std = monitor.history_matrices(HEATMAP_FIELDS)
    events = monitor.events
    return {
        "paths": list(grad_norm.module_paths),
        "steps": encode_array(np.asarray(grad_norm.steps, dtype=np.int64)),
        "grad_norm": encode_array(grad_norm.values.astype(np.float32)),
        "std": encode_array(std.values.astype(np.float32)),
        "events": [_event_payload(event) for event in events],
        "steps_run": int(monitor.step),
        "every": int(monitor.every),
        "on_nonfinite": monitor.on_nonfinite,
    }


def precision_payload(report: Any, paths: list[str]) -> dict[str, Any]:
    """A ``PrecisionReport``'s lowest headroom per module, aligned to ``paths``."""
    if report is None:
        return {}
    lowest = report.lowest_headroom()
    values = np.array([lowest.get(path, np.nan) for path in paths], dtype=np.float64)
    return {
        "dtype": report.dtype,
        "headroom": encode_array(values),
        "first_overflow_path": report.first_overflow_path,
    }


class TrainingMonitorWidget(BrowserSafeState):
    """A live view of a :class:`~vinlens.health.TrainingMonitor`.

    Args:
        monitor: The monitor the training loop calls ``run_step`` on.
        precision: A ``PrecisionReport`` (``precision_headroom``) to show as a column.
        interval: Least time in seconds between two updates of the heatmaps while the loop
            runs (events are sent at once).

    ``selected_event`` (synced) is the index in ``monitor.events`` of the event whose
    origin is shown; -1 shows the latest. Call :meth:`refresh` to send the current state
    at once, :meth:`show_precision` to show another report, and ``close()`` to stop
    listening to the monitor.
    """

    _esm = widget_asset("training_monitor.js")
    _css = widget_asset("training_monitor.css")

    history = traitlets.Dict().tag(sync=True)
    precision = traitlets.Dict().tag(sync=True)
    selected_event = traitlets.Int(-1).tag(sync=True)

    def __init__(
        self,
        monitor: Any,
        *,
        precision: Any = None,
        interval: float = 0.5,
        **kwargs: Any,
    ) -> None:
        from vinlens.health import PrecisionReport, TrainingMonitor

        if not isinstance(monitor, TrainingMonitor):
            raise TypeError(
                "monitor must be a vinlens.health.TrainingMonitor, got "
                f"{type(monitor).__module__}.{type(monitor).__qualname__}"
            )
        if precision is not None and not isinstance(precision, PrecisionReport):
            raise TypeError(
                "precision must be a vinlens.health.PrecisionReport (precision_headroom), got "
                f"{type(precision).__module__}.{type(precision).__qualname__}"
            )
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise ValueError(f"interval must be a non-negative number of seconds, got {interval!r}")
        super().__init__(**kwargs)
        self.monitor = monitor
        self.interval = float(interval)
        self._report = precision
        self._push_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._last_push = 0.0
        self._events_sent = 0
        self.refresh()
        self.precision = precision_payload(precision, list(monitor.module_paths))
        self._stop_listening = monitor.add_listener(self._on_step)

    @property
    def report(self) -> Any:
        """The ``PrecisionReport`` shown, or None."""
        return self._report

    def show_precision(self, report: Any) -> None:
        """Show ``report`` (a ``PrecisionReport``, or None to hide the column)."""
        from vinlens.health import PrecisionReport

        if report is not None and not isinstance(report, PrecisionReport):
            raise TypeError(
                "report must be a vinlens.health.PrecisionReport or None, got "
                f"{type(report).__module__}.{type(report).__qualname__}"
            )
        self._report = report
        self.precision = precision_payload(report, list(self.monitor.module_paths))

    def refresh(self) -> None:
        """Send the monitor's current history and events now."""
        with self._push_lock:
            self._cancel_timer()
            self._push()

    def close(self) -> None:
        # Also runs from __del__ of a widget whose constructor refused its arguments.
        stop = getattr(self, "_stop_listening", None)
        if stop is not None:
            stop()
        lock = getattr(self, "_push_lock", None)
        if lock is not None:
            with lock:
                self._cancel_timer()
        super().close()

    # -- live updates ----------------------------------------------------------------------
    def _push(self) -> None:
        payload = monitor_payload(self.monitor)
        self._events_sent = len(payload["events"])
        self._last_push = time.monotonic()
        self.history = payload

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_step(self, monitor: Any) -> None:
        # Runs on the training thread after each sampled or non-finite step: a cheap
        # decision, and at most one payload per interval (a timer sends the last one).
        with self._push_lock:
            wait = self.interval - (time.monotonic() - self._last_push)
            if wait <= 0 or len(monitor.events) != self._events_sent:
                self._cancel_timer()
                self._push()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._push_lock:
            self._timer = None
            try:
                self._push()
            except Exception as error:  # never raise in a timer thread: show it instead
                self._report_error("", f"updating the training monitor view failed: {error}")
