"""The background-job plumbing the two store widgets share (dashboard and coverage heatmap).

Both widgets read one store on a worker thread as soon as they are constructed, let
only one read run at a time (the constructor, a Python call and a browser command all
compete for it), publish where the read is in their ``acquisition`` traitlet, and turn
store, file and value errors into :class:`~vinlens.widgets._base.CommandError` so the
browser shows them as user-facing messages. :class:`BackgroundJob` is that protocol in one
place; each widget keeps only what it reads and what it publishes.
"""

from __future__ import annotations

import base64
import html
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from vinlens.store.format import VinOfflineStoreError
from vinlens.widgets._base import CommandCancelled, CommandContext, CommandError, VinlensWidget

__all__ = ["BackgroundJob", "reject_unknown_kwargs", "static_png_html"]

T = TypeVar("T")


def reject_unknown_kwargs(widget_type: type[VinlensWidget], kwargs: Mapping[str, Any]) -> None:
    """Raise TypeError for keywords that are not traits of ``widget_type``.

    traitlets only warns about unknown keywords; a typo should fail where it is made.
    """
    unknown = sorted(set(kwargs) - set(widget_type.class_trait_names()))
    if unknown:
        raise TypeError(
            f"{widget_type.__name__} got unexpected keyword argument(s) {', '.join(unknown)}"
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


class BackgroundJob:
    """One store read at a time for ``widget``, run in the background or as a command.

    ``name`` says what is running in the busy messages ("a coverage scan");
    ``id_prefix`` starts the request id of background runs (the browser cancels by it);
    ``failure`` starts the message of an unexpected error; ``with_unit`` keeps the
    ``unit`` key in the published ``acquisition`` state.
    """

    def __init__(
        self,
        widget: VinlensWidget,
        *,
        name: str,
        id_prefix: str,
        failure: str,
        with_unit: bool = False,
    ) -> None:
        self._widget = widget
        self._name = name
        self._id_prefix = id_prefix
        self._failure = failure
        self._with_unit = with_unit
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._done.set()
        #: The error of the last run (None when it succeeded or was cancelled).
        self.error: BaseException | None = None

    def wait(self, timeout: float | None, what: str) -> None:
        """Block until the running job ends; raise its error. ``what`` names the result."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{what} not ready after {timeout}s")
        if self.error is not None:
            raise self.error

    def start(self, trigger: str, run: Callable[[CommandContext, str], object]) -> None:
        """Run ``run(ctx, trigger)`` on the widget's executor; errors land in the widget."""
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(f"{self._name} is already running; wait() for it first")
        self._done.clear()
        widget = self._widget
        ctx = CommandContext(widget, f"{self._id_prefix}-{uuid.uuid4().hex}")
        widget._running[ctx.request_id] = ctx  # the browser cancels it by this id

        def job() -> None:
            try:
                run(ctx, trigger)
            except CommandCancelled:
                pass
            except CommandError as exc:
                widget._report_error(ctx.request_id, str(exc))
            except BaseException as exc:  # reported in the widget, never raised in a thread
                widget._report_error(
                    ctx.request_id, f"{self._failure}: {type(exc).__name__}: {exc}", exc
                )
            finally:
                widget._running.pop(ctx.request_id, None)
                self._done.set()
                self._lock.release()

        widget._background_executor().submit(job)

    def run_command(self, busy_message: str, run: Callable[[], T]) -> T:
        """Run ``run()`` on the command's thread, refused with ``busy_message`` when busy."""
        if not self._lock.acquire(blocking=False):
            raise CommandError(busy_message)
        try:
            self._done.clear()
            return run()
        finally:
            self._done.set()
            self._lock.release()

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

    def finish(self, ctx: CommandContext, trigger: str, state: str, message: str = "") -> None:
        """Publish the end state, keeping the last progress numbers."""
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
        widget.status = "busy"
        widget.error = ""
        widget.error_traceback = ""
        try:
            yield
        except CommandCancelled:
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


def static_png_html(render: Callable[[], bytes], *, alt: str, unavailable: str) -> str:
    """An inline ``<img>`` of ``render()``, or a note naming why it could not be drawn.

    The static HTML fallback still shows its numbers when plotting fails, so the error
    becomes a line of text (``unavailable`` names what is missing) instead of a raise.
    """
    esc = html.escape
    try:
        png = render()
    except Exception as exc:  # the numbers around it are still worth showing
        return f"<p>({unavailable} unavailable: {esc(type(exc).__name__)}: {esc(str(exc))})</p>"
    data = base64.b64encode(png).decode("ascii")
    return f"<img alt='{alt}' src='data:image/png;base64,{data}'/>"
