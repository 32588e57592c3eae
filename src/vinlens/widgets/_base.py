"""The request/response protocol and the task runtime every vinlens widget shares.

Protocol (see docs/architecture.md). Browser to kernel::

    {"kind": "command", "id": "<uuid>", "name": "capture", "args": {...}}
    {"kind": "cancel", "id": "<uuid>"}

Kernel to browser, for each command: any number of
``{"kind": "progress", "id", "done", "total"}`` and then exactly one
``{"kind": "result", "id", "data"}`` or
``{"kind": "error", "id", "message", "traceback", "cancelled"}``. The ``status``
traitlet is set before the reply goes out, so whoever waits for the reply sees the
final status. Binary data rides in the message buffers (``{"$buffer": i}``
placeholders, see :mod:`vinlens.widgets._payload`).

Task runtime. A command handler is a widget method marked with :func:`command`::

    class MyWidget(VinlensWidget):
        @command("refresh", background=True, exclusive=True)
        def _refresh(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
            for done, shard in enumerate(shards):
                ctx.progress(done, len(shards))  # reports, and raises once cancelled
                ...
            rows = ctx.call(lambda: engine_call_that_checks_nothing())
            return {"rows": rows}

- ``background=True`` runs the handler on a worker thread *of this widget* (each widget
  has its own small executor, so long work in one widget never waits behind another
  widget's); without it the handler runs on the kernel's thread, which suits quick
  commands and user code that must run where the user's cell would (a forward pass).
- ``exclusive=True`` gives single flight per widget: while one exclusive command runs,
  any other exclusive command of the same widget is refused at once with an error reply
  (``busy=`` words it; the running command's status and error are left alone).
  Non-exclusive commands may run beside it.
- ``ctx.progress(done, total)`` sends a progress message and is where a cancel lands
  (it raises :class:`CommandCancelled`); ``ctx.check_cancelled()`` checks without
  reporting; ``ctx.call(func)`` runs a blocking call that has no progress hook on a
  helper thread and raises :class:`CommandCancelled` as soon as the user cancels,
  leaving the (read-only) call to wind down in the background with its result dropped;
  ``ctx.cancel_token`` is a :class:`vinlens.operations.CancelToken` on the same cancel, for
  an engine operation (its ``OperationCancelled`` ends the command as cancelled).
- ``ctx.trigger`` says who started the command: the command's name when the browser
  sent it, or what :meth:`VinlensWidget.start_command` was given.
- The handler returns JSON-safe data (or a record, which is converted) and raises
  :class:`CommandError` for a user-facing problem. Any other exception, a
  ``KeyboardInterrupt`` from user code or a hostile or malformed message becomes an
  error reply and the ``error`` traitlet: nothing escapes into the kernel's message loop.

From Python, :meth:`VinlensWidget.run_command` runs a command and waits for its reply
(how the tests drive every command without a browser), and
:meth:`VinlensWidget.start_command` starts one without waiting and returns its
:class:`CommandTask` (``wait()``, ``cancel()``, ``done()``); a widget that starts work
at construction does it this way, and the browser can cancel that work by its id.
:attr:`VinlensWidget.current_task` is the exclusive command running now and
:attr:`VinlensWidget.last_task` the latest one started, running or finished.
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anywidget
import traitlets

from vinlens.operations import OperationCancelled
from vinlens.widgets._assets import STATIC_DIR, WidgetAsset, widget_asset
from vinlens.widgets._payload import split_buffers, to_jsonable
from vinlens.widgets._runtime import (
    CommandCancelled,
    CommandContext,
    CommandError,
    CommandTask,
    _Busy,
    _CommandSpec,
    command,
)

__all__ = [
    "STATIC_DIR",
    "BrowserSafeState",
    "CommandCancelled",
    "CommandContext",
    "CommandError",
    "CommandTask",
    "TableExport",
    "VinlensWidget",
    "WidgetAsset",
    "command",
    "reject_unknown_kwargs",
    "widget_asset",
]

T = TypeVar("T")

_MAX_ID_LENGTH = 128
#: Worker threads per widget: exclusive commands take at most one, so quick
#: non-exclusive ones (a detail listing beside a long scan) still find a thread.
_WORKERS_PER_WIDGET = 3


def reject_unknown_kwargs(
    widget_type: type[anywidget.AnyWidget], kwargs: Mapping[str, Any]
) -> None:
    """Raise TypeError for keywords that are not traits of ``widget_type``.

    traitlets only warns about unknown keywords; a typo should fail where it is made.
    """
    unknown = sorted(set(kwargs) - set(widget_type.class_trait_names()))
    if unknown:
        raise TypeError(
            f"{widget_type.__name__} got unexpected keyword argument(s) {', '.join(unknown)}"
        )


class VinlensWidget(anywidget.AnyWidget):
    """Base of every vinlens widget: status/error traitlets, the protocol and the runtime."""

    status = traitlets.Unicode("idle").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    error_traceback = traitlets.Unicode("").tag(sync=True)

    _commands: ClassVar[dict[str, _CommandSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        commands: dict[str, _CommandSpec] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                spec = getattr(value, "__vinlens_command__", None)
                if spec is not None:
                    commands[spec[0]] = _CommandSpec(spec[0], attr, *spec[1:])
        cls._commands = commands

    def __init__(self, **kwargs: Any) -> None:
        reject_unknown_kwargs(type(self), kwargs)
        for key in ("_esm", "_css"):
            asset = getattr(type(self), key, None)
            if isinstance(asset, WidgetAsset):
                # anywidget reads these from the instance when it adds its traits.
                setattr(self, key, asset.resolve())
        # The runtime's state exists before traitlets run validators or observers.
        self._tasks: dict[str, CommandTask] = {}
        self._tasks_lock = threading.Lock()
        self._flight: CommandTask | None = None
        self._last_flight: CommandTask | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self.replies: list[dict[str, Any]] = []  # last replies, newest last (for tests/debugging)
        super().__init__(**kwargs)
        self.on_msg(self._on_custom_msg)

    # -- runtime ------------------------------------------------------------------------------
    @property
    def current_task(self) -> CommandTask | None:
        """The exclusive command running now, if any."""
        return self._flight

    @property
    def last_task(self) -> CommandTask | None:
        """The latest exclusive command started (running or finished), if any."""
        return self._last_flight

    def start_command(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        trigger: str | None = None,
        id_prefix: str | None = None,
    ) -> CommandTask:
        """Start command ``name`` from Python without waiting for it; return its task.

        A background command runs on the widget's worker thread, any other runs before
        this returns. ``trigger`` becomes ``ctx.trigger``; the request id starts with
        ``id_prefix`` (default: the name), and the browser can cancel the task by it.
        Raises KeyError for an unknown command and RuntimeError when an exclusive command
        is already running.
        """
        spec = self._commands.get(name)
        if spec is None:
            raise KeyError(f"unknown command {name!r}; this widget knows: {self._known()}")
        ctx = CommandContext(
            self, f"{id_prefix or name}-{uuid.uuid4().hex}", trigger=trigger or name
        )
        try:
            task = self._admit(spec, ctx)
        except _Busy as exc:
            raise RuntimeError(str(exc)) from None
        self._launch(spec, dict(args or {}), task)
        return task

    def _known(self) -> str:
        return ", ".join(sorted(self._commands)) or "none"

    def _admit(
        self, spec: _CommandSpec, ctx: CommandContext, *, as_last: bool = True
    ) -> CommandTask:
        """Register a task for ``spec``; raise _Busy when single flight refuses it.

        ``as_last=False`` takes the flight without becoming :attr:`last_task` (work run
        by a Python method on the caller's thread, which the caller already waited for).
        """
        task = CommandTask(spec.name, ctx, exclusive=spec.exclusive)
        with self._tasks_lock:
            if self._closed:
                raise _Busy(
                    f"{spec.name!r} cannot start: this {type(self).__name__} was closed; "
                    "create a new widget"
                )
            if spec.exclusive:
                running = self._flight
                if running is not None:
                    raise _Busy(
                        spec.busy
                        or f"{spec.name!r} cannot start: {running.name!r} is already running "
                        "in this widget; wait for it or cancel it"
                    )
                self._flight = task
                if as_last:
                    self._last_flight = task
            self._tasks[ctx.request_id] = task
        return task

    def _release(self, task: CommandTask) -> None:
        with self._tasks_lock:
            self._tasks.pop(task.request_id, None)
            if self._flight is task:
                self._flight = None

    def _launch(self, spec: _CommandSpec, args: dict[str, Any], task: CommandTask) -> None:
        if not spec.background:
            self._run(spec, args, task)
            return
        try:
            self._worker_pool().submit(self._run, spec, args, task)
        except BaseException as exc:  # a closed widget: its executor refuses new work
            self._release(task)
            task._finish(None, exc)
            self._reply_error(task.request_id, f"{spec.name} could not start: {exc}", exc)

    def _worker_pool(self) -> ThreadPoolExecutor:
        with self._tasks_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=_WORKERS_PER_WIDGET,
                    thread_name_prefix=f"vinlens-{type(self).__name__}",
                )
            return self._executor

    def close(self) -> None:
        """Close the widget; running commands finish, their threads then end."""
        lock = getattr(self, "_tasks_lock", None)  # None when __init__ failed early
        if lock is not None:
            with lock:
                self._closed = True
                executor, self._executor = self._executor, None
            if executor is not None:
                executor.shutdown(wait=False)
        super().close()

    # -- protocol ---------------------------------------------------------------------------
    def _send_message(self, message: dict[str, Any]) -> None:
        content, buffers = split_buffers(to_jsonable(message))
        if message.get("kind") in ("result", "error"):
            self.replies.append(content)
            del self.replies[:-20]
        self.send(content, buffers=buffers or None)

    def _on_custom_msg(self, _widget: Any, content: Any, buffers: list[Any] | None) -> None:
        try:
            self._dispatch(content)
        except Exception as exc:  # never let a message break the kernel's comm loop
            self._report_error("", f"internal error while handling a message: {exc}", exc)

    def _dispatch(self, content: Any) -> None:
        if not isinstance(content, Mapping):
            self._report_error(
                "", f"ignored a message that is not an object: {type(content).__name__}"
            )
            return
        kind = content.get("kind")
        request_id = content.get("id")
        if not isinstance(request_id, str) or not 0 < len(request_id) <= _MAX_ID_LENGTH:
            self._report_error("", f"ignored a {kind!r} message without a valid string id")
            return
        if kind == "cancel":
            running = self._tasks.get(request_id)
            if running is not None:
                running.cancel()
            return
        if kind != "command":
            self._reply_error(
                request_id, f"unknown message kind {kind!r}; expected 'command' or 'cancel'"
            )
            return
        name = content.get("name")
        spec = self._commands.get(name) if isinstance(name, str) else None
        if spec is None:
            self._reply_error(
                request_id, f"unknown command {name!r}; this widget knows: {self._known()}"
            )
            return
        args = content.get("args", {})
        if not isinstance(args, Mapping):
            self._reply_error(
                request_id, f"command {name!r}: 'args' must be an object, got {type(args).__name__}"
            )
            return
        if request_id in self._tasks:
            self._reply_error(request_id, f"command {name!r}: request id is already in use")
            return
        try:
            task = self._admit(spec, CommandContext(self, request_id, trigger=spec.name))
        except _Busy as exc:
            # A refusal answers the asker only: the running command keeps its status.
            self._send_error_reply(request_id, str(exc), "", cancelled=False)
            return
        self._launch(spec, dict(args), task)

    def _run(self, spec: _CommandSpec, args: dict[str, Any], task: CommandTask) -> None:
        ctx = task.ctx
        self.status = "busy"
        self.error = ""
        self.error_traceback = ""
        try:
            data = getattr(self, spec.method)(args, ctx)
        except BaseException as exc:  # KeyboardInterrupt in user code too: report, keep kernel
            # An engine stopped through ctx.cancel_token ends the same way as a ctx check.
            cancelled = isinstance(exc, CommandCancelled | OperationCancelled)
            if cancelled:
                message = f"{spec.name}: {exc}"
            elif isinstance(exc, CommandError):
                message = str(exc)
            else:
                message = f"{spec.name} failed: {type(exc).__name__}: {exc}"
            shown = None if cancelled or isinstance(exc, CommandError) else exc
            # State first, reply last: whoever waits for the reply (or the task) sees the
            # final status, and may start the next exclusive command at once.
            if cancelled or (not task.exclusive and self._others_running(task)):
                # A side command that fails beside a running scan answers its asker
                # only: the widget's status and error box follow the scan.
                self._settle_status(task)
            else:
                self._report_error(ctx.request_id, message, shown)
            self._end(task, None, exc)
            tb = "".join(traceback.format_exception(shown)) if shown is not None else ""
            self._send_error_reply(ctx.request_id, message, tb, cancelled=cancelled)
        else:
            self._settle_status(task)
            self._end(task, data, None)
            self._send_message(
                {"kind": "result", "id": ctx.request_id, "data": data if data is not None else {}}
            )

    def _settle_status(self, ending: CommandTask) -> None:
        """``idle`` once ``ending`` ends, unless another command of this widget still runs.

        A quick side command next to a long exclusive scan must not tell the browser the
        widget is idle while the scan goes on.
        """
        self.status = "busy" if self._others_running(ending) else "idle"

    def _others_running(self, task: CommandTask) -> bool:
        with self._tasks_lock:
            return any(other is not task for other in self._tasks.values())

    def run_in_flight(
        self, name: str, func: Callable[[CommandContext], T], *, trigger: str | None = None
    ) -> T:
        """Run ``func(ctx)`` on this thread as exclusive command ``name`` would run.

        For a Python method that does a command's work itself (``analyze()``): it takes
        the widget's single flight, so it is refused (RuntimeError, the command's ``busy``
        words) while that command or another exclusive one runs, and a browser command
        is refused while it runs. Status and replies are left alone: the caller gets the
        result or the exception directly.
        """
        spec = self._commands.get(name)
        if spec is None:
            raise KeyError(f"unknown command {name!r}; this widget knows: {self._known()}")
        ctx = CommandContext(self, f"{name}-{uuid.uuid4().hex}", trigger=trigger or f"{name}()")
        try:
            task = self._admit(spec, ctx, as_last=False)
        except _Busy as exc:
            raise RuntimeError(str(exc)) from None
        try:
            result = func(ctx)
        except BaseException as exc:
            self._end(task, None, exc)
            raise
        self._end(task, result, None)
        return result

    def _end(self, task: CommandTask, result: Any, exception: BaseException | None) -> None:
        self._release(task)
        task._finish(result, exception)

    def _reply_error(
        self,
        request_id: str,
        message: str,
        exc: BaseException | None = None,
        *,
        cancelled: bool = False,
    ) -> None:
        if not cancelled:
            self._report_error(request_id, message, exc)
        tb = "".join(traceback.format_exception(exc)) if exc is not None else ""
        self._send_error_reply(request_id, message, tb, cancelled=cancelled)

    def _send_error_reply(self, request_id: str, message: str, tb: str, *, cancelled: bool) -> None:
        self._send_message(
            {
                "kind": "error",
                "id": request_id,
                "message": message,
                "traceback": tb,
                "cancelled": cancelled,
            }
        )

    def _report_error(
        self, _request_id: str, message: str, exc: BaseException | None = None
    ) -> None:
        self.error = message
        self.error_traceback = "".join(traceback.format_exception(exc)) if exc is not None else ""
        self.status = "error"

    # -- Python-side helpers -----------------------------------------------------------------
    def run_command(
        self, name: str, args: Mapping[str, Any] | None = None, *, timeout: float = 300
    ) -> Any:
        """Run a browser command from Python (tests, scripts) and return its reply.

        The reply is the same dict the browser receives (``kind`` is ``result`` or
        ``error``). Background commands are waited for up to ``timeout`` seconds.
        """
        request_id = uuid.uuid4().hex
        self._dispatch(
            {"kind": "command", "id": request_id, "name": name, "args": dict(args or {})}
        )
        deadline = time.monotonic() + timeout
        while True:
            for reply in reversed(self.replies):
                if reply.get("id") == request_id:
                    return reply
            if time.monotonic() > deadline:
                raise TimeoutError(f"command {name!r} did not answer within {timeout}s")
            time.sleep(0.01)


class BrowserSafeState(VinlensWidget):
    """A widget whose synced traitlets may be written by a browser without risk to the kernel.

    ipywidgets validates browser updates inside the comm handler; a hostile or stale value
    would raise there. Here it becomes the widget's error message and the old value stays.
    """

    def set_state(self, sync_data: Any) -> None:
        try:
            super().set_state(sync_data)
        except Exception as exc:
            names = ", ".join(sorted(sync_data)) if isinstance(sync_data, Mapping) else "?"
            self._report_error("", f"ignored a browser update of {names}: {exc}")

    def _from_browser(self, name: str) -> bool:
        """True while ipywidgets applies a browser update of traitlet ``name``."""
        return name in (getattr(self, "_property_lock", None) or {})


class TableExport:
    """``to_rows`` / ``to_dataframe`` / ``export`` of the one table a widget shows.

    A widget lists its table's records in :meth:`_export_records` (engine records, e.g.
    the ``ModuleMetadata`` of every module); the three methods hand them to
    :mod:`vinlens.export`, so every widget exports the same way as a script does.
    """

    def _export_records(self) -> Sequence[Any]:
        raise NotImplementedError

    def to_rows(self) -> list[dict[str, Any]]:
        """One dict per row of the table shown (the engine record's fields)."""
        from vinlens.export import to_rows

        return to_rows(self._export_records())

    def to_dataframe(self) -> Any:
        """The table shown as a ``pandas.DataFrame`` (needs ``vinlens[export]``)."""
        from vinlens.export import to_dataframe

        return to_dataframe(self._export_records())

    def export(self, path: str | Path) -> Path:
        """Write the table shown to ``path`` as CSV, JSON or Parquet, chosen by the suffix."""
        from vinlens.export import export

        return export(self._export_records(), path)
