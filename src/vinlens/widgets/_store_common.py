"""What the store widgets (dashboard, compare and coverage heatmap) share beyond the runtime.

Each reads its store(s) as an exclusive background command, started as soon as it is
constructed (the constructor, a Python call and a browser command all compete for the one
flight), publishes where the read is in its ``acquisition`` traitlet, and turns store,
file and value errors into :class:`~vinlens.widgets._base.CommandError` so the browser
shows them as user-facing messages. :class:`AcquisitionState` is that publishing in one
place; :class:`StoreRefresh` is the ``refresh`` command and method of the widgets that
read with a ``max_samples`` budget. Each widget keeps only what it reads and publishes.
"""

from __future__ import annotations

import base64
import html
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import traitlets

from vinlens.export import display_text
from vinlens.operations import OperationCancelled
from vinlens.store.diagnostics import check_max_samples
from vinlens.store.errors import VinOfflineStoreError
from vinlens.store.format import VinOfflineStoreConfig, normalize_location
from vinlens.store.reader import as_store_config
from vinlens.widgets._base import (
    BrowserSafeState,
    CommandCancelled,
    CommandContext,
    CommandError,
    VinlensWidget,
    command,
)

__all__ = ["AcquisitionState", "StoreRefresh", "esc", "static_png_html", "store_config"]


def store_config(
    store: VinOfflineStoreConfig | str | os.PathLike[str],
    *,
    raw_dataset_dir: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> VinOfflineStoreConfig:
    """The config a store widget reads: ``store`` (a config, a path or an fsspec URL) with
    ``raw_dataset_dir`` and ``storage_options`` replacing the config's when given."""
    config = as_store_config(store)
    if raw_dataset_dir is None and storage_options is None:
        return config
    return VinOfflineStoreConfig(
        store_dir=config.store_dir,
        raw_dataset_dir=config.raw_dataset_dir
        if raw_dataset_dir is None
        else normalize_location(raw_dataset_dir),
        storage_options=config.storage_options
        if storage_options is None
        else dict(storage_options),
    )


def acquisition_state(
    ctx: CommandContext,
    trigger: str,
    state: str,
    step: str,
    done: int,
    total: int,
    message: str,
    unit: str | None = None,
) -> dict[str, Any]:
    """The ``acquisition`` traitlet value; ``unit`` is left out when None."""
    value: dict[str, Any] = {
        "id": ctx.request_id,
        "state": state,
        "step": step,
        "done": done,
        "total": total,
    }
    if unit is not None:
        value["unit"] = unit
    value["trigger"] = trigger
    value["message"] = message
    return value


class AcquisitionState:
    """The ``acquisition`` traitlet of ``widget``: where its one store read is, how it ended.

    The read itself is an exclusive background command of the widget (see
    :mod:`vinlens.widgets._base`); this class only publishes its steps. ``with_unit``
    keeps the ``unit`` key in the published state.
    """

    def __init__(self, widget: VinlensWidget, *, with_unit: bool = False) -> None:
        self._widget = widget
        self._with_unit = with_unit
        #: The error of the last run (None when it succeeded or was cancelled).
        self.error: BaseException | None = None
        # Request id of the run whose progress may still be published: an engine thread
        # left winding down after a cancel must not publish "running" over "cancelled".
        self._open: str | None = None
        self._lock = threading.Lock()

    def wait(self, timeout: float | None, what: str) -> None:
        """Block until the widget's latest read ends; raise its error. ``what`` names it."""
        task = self._widget.last_task
        if task is None:
            return
        if not task.join(timeout):
            raise TimeoutError(f"{what} not ready after {timeout}s")
        task_error = task.exception
        if task_error is None or isinstance(task_error, CommandCancelled | OperationCancelled):
            return
        # The original error (a missing file, a replaced store), not its CommandError.
        raise self.error if self.error is not None else task_error

    def running(
        self,
        ctx: CommandContext,
        trigger: str,
        step: str,
        done: int = 0,
        total: int = 0,
        unit: str = "",
    ) -> dict[str, Any]:
        """The ``acquisition`` state of a running step (``unit`` only when kept)."""
        return acquisition_state(
            ctx,
            trigger,
            "running",
            step,
            int(done),
            int(total),
            "",
            unit if self._with_unit else None,
        )

    def publish_running(
        self,
        ctx: CommandContext,
        trigger: str,
        step: str,
        done: int = 0,
        total: int = 0,
        unit: str = "",
    ) -> None:
        """Publish a running step of ``ctx``'s run; raise CommandCancelled once it was
        cancelled or ended (then nothing is published)."""
        with self._lock:
            if ctx.cancelled or self._open != ctx.request_id:
                raise CommandCancelled("cancelled by the user")
            self._widget.acquisition = self.running(ctx, trigger, step, done, total, unit)

    def finish(self, ctx: CommandContext, trigger: str, state: str, message: str = "") -> None:
        """Publish the end state, keeping the last progress numbers; the run is closed."""
        with self._lock:
            if self._open == ctx.request_id:
                self._open = None
            self._publish_end(ctx, trigger, state, message)

    def _publish_end(self, ctx: CommandContext, trigger: str, state: str, message: str) -> None:
        previous = self._widget.acquisition
        self._widget.acquisition = acquisition_state(
            ctx,
            trigger,
            state,
            "",
            previous.get("done", 0),
            previous.get("total", 0),
            message,
            previous.get("unit", "") if self._with_unit else None,
        )

    @contextmanager
    def outcome(self, ctx: CommandContext, trigger: str) -> Iterator[None]:
        """Mark the widget busy around one run and publish how it ended when it fails.

        The body publishes success itself (``finish(..., "done")`` and ``status`` idle).
        A cancel ends as "cancelled"; any other error is kept for :meth:`wait`, ends as
        "failed", and a store, file or value error is raised again as a CommandError.
        """
        widget = self._widget
        self.error = None
        with self._lock:
            self._open = ctx.request_id
        widget.status = "busy"
        widget.error = ""
        widget.error_traceback = ""
        try:
            yield
        except (CommandCancelled, OperationCancelled):
            self.finish(ctx, trigger, "cancelled", "cancelled by the user")
            widget.status = "idle"
            raise
        except BaseException as exc:
            self.error = exc
            self.finish(ctx, trigger, "failed", str(exc))
            if isinstance(exc, VinOfflineStoreError | OSError | ValueError) and not isinstance(
                exc, CommandError
            ):
                raise CommandError(str(exc)) from exc
            raise


class StoreRefresh(BrowserSafeState):
    """The ``refresh`` command of a store widget that reads ``max_samples`` rows per store.

    :meth:`refresh` (Python) and the browser's ``refresh`` command both start one exclusive
    read, optionally with a new ``max_samples``; a subclass implements the read in
    :meth:`_read_stores` and names its runs with ``_READ_ID_PREFIX``.
    """

    max_samples = traitlets.Int(512, allow_none=True).tag(sync=True)

    _READ_ID_PREFIX: ClassVar[str] = "read"

    def _start_first_read(self) -> None:
        self.start_command("refresh", trigger="construction", id_prefix=self._READ_ID_PREFIX)

    def refresh(self, *, max_samples: int | object | None = ...) -> None:
        """Read again in the background (the store's generation now), optionally with a new
        ``max_samples``; see :meth:`wait`."""
        args: dict[str, Any] = {}
        if max_samples is not ...:
            args["max_samples"] = check_max_samples(max_samples)
        self.start_command("refresh", args, trigger="refresh()", id_prefix=self._READ_ID_PREFIX)

    @command(
        "refresh",
        background=True,
        exclusive=True,
        busy="a read of the store(s) is already running; wait for it or cancel it first",
    )
    def _refresh_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        if "max_samples" in args:
            try:
                self.max_samples = check_max_samples(args["max_samples"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        return self._read_stores(ctx)

    def _read_stores(self, ctx: CommandContext) -> dict[str, Any]:
        raise NotImplementedError


def esc(text: str) -> str:
    """Kernel text for static HTML: escaped, and readable when it is not valid Unicode."""
    return html.escape(display_text(text))


def static_png_html(render: Callable[[], bytes], *, alt: str, unavailable: str) -> str:
    """An inline ``<img>`` of ``render()``, or a note naming why it could not be drawn.

    The static HTML fallback still shows its numbers when plotting fails, so the error
    becomes a line of text (``unavailable`` names what is missing) instead of a raise.
    """
    try:
        png = render()
    except Exception as exc:  # the numbers around it are still worth showing
        return f"<p>({unavailable} unavailable: {esc(type(exc).__name__)}: {esc(str(exc))})</p>"
    data = base64.b64encode(png).decode("ascii")
    return f"<img alt='{alt}' src='data:image/png;base64,{data}'/>"
