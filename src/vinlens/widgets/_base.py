"""The request/response protocol every vinlens widget speaks (see docs/architecture.md).

Browser to kernel::

    {"kind": "command", "id": "<uuid>", "name": "capture", "args": {...}}
    {"kind": "cancel", "id": "<uuid>"}

Kernel to browser, for each command: any number of
``{"kind": "progress", "id", "done", "total"}`` and then exactly one
``{"kind": "result", "id", "data"}`` or ``{"kind": "error", "id", "message", "traceback"}``.
Binary data rides in the message buffers (``{"$buffer": i}`` placeholders, see
:mod:`vinlens.widgets._payload`).

A command handler is a method decorated with :func:`command`. It receives validated
``args`` and a :class:`CommandContext`; it returns JSON-safe data (or a record, which is
converted) and raises :class:`CommandError` for a user-facing problem. Any exception,
including a hostile or malformed message, becomes an error reply and the ``error``
traitlet: nothing escapes into the kernel's message loop. Handlers marked
``background=True`` run on a worker thread so the notebook stays responsive and can be
cancelled between steps.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anywidget
import traitlets

from vinlens.widgets._payload import split_buffers, to_jsonable

STATIC_DIR = Path(__file__).parent / "static"

F = TypeVar("F", bound=Callable[..., Any])

_MAX_ID_LENGTH = 128


class CommandError(Exception):
    """A problem the user should read in the widget's error box (no traceback needed)."""


class CommandCancelled(Exception):
    """Raised inside a handler by :meth:`CommandContext.check_cancelled`."""


@dataclass
class CommandContext:
    """What a running command can use: progress reports and a cancellation flag."""

    widget: VinlensWidget
    request_id: str
    cancel_event: threading.Event = field(default_factory=threading.Event)

    def progress(self, done: int, total: int) -> None:
        self.widget._send_message(
            {"kind": "progress", "id": self.request_id, "done": done, "total": total}
        )
        self.check_cancelled()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def check_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise CommandCancelled("cancelled by the user")


@dataclass(frozen=True)
class _CommandSpec:
    name: str
    method: str
    background: bool


def command(name: str, *, background: bool = False) -> Callable[[F], F]:
    """Mark a widget method as the handler of browser command ``name``."""

    def decorate(func: F) -> F:
        func.__vinlens_command__ = (name, background)  # type: ignore[attr-defined]
        return func

    return decorate


def widget_asset(name: str) -> Path:
    """Path of a built front-end file; a clear error when the bundle was never built."""
    path = STATIC_DIR / name
    if not path.exists():
        raise FileNotFoundError(
            f"vinlens front-end bundle {path} is missing; build it with `npm run build` "
            "in the vinlens source tree (scripts/setup.sh does this)"
        )
    return path


class VinlensWidget(anywidget.AnyWidget):
    """Base of every vinlens widget: status/error traitlets and the command protocol."""

    status = traitlets.Unicode("idle").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    error_traceback = traitlets.Unicode("").tag(sync=True)

    _commands: ClassVar[dict[str, _CommandSpec]] = {}
    _executor: ClassVar[ThreadPoolExecutor | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        commands: dict[str, _CommandSpec] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                spec = getattr(value, "__vinlens_command__", None)
                if spec is not None:
                    commands[spec[0]] = _CommandSpec(spec[0], attr, spec[1])
        cls._commands = commands

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._running: dict[str, CommandContext] = {}
        self._lock = threading.Lock()
        self.replies: list[dict[str, Any]] = []  # last replies, newest last (for tests/debugging)
        self.on_msg(self._on_custom_msg)

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
            ctx = self._running.get(request_id)
            if ctx is not None:
                ctx.cancel_event.set()
            return
        if kind != "command":
            self._reply_error(
                request_id, f"unknown message kind {kind!r}; expected 'command' or 'cancel'"
            )
            return
        name = content.get("name")
        spec = self._commands.get(name) if isinstance(name, str) else None
        if spec is None:
            known = ", ".join(sorted(self._commands)) or "none"
            self._reply_error(request_id, f"unknown command {name!r}; this widget knows: {known}")
            return
        args = content.get("args", {})
        if not isinstance(args, Mapping):
            self._reply_error(
                request_id, f"command {name!r}: 'args' must be an object, got {type(args).__name__}"
            )
            return
        ctx = CommandContext(self, request_id)
        if spec.background:
            self._running[request_id] = ctx
            self._background_executor().submit(self._run, spec, dict(args), ctx)
        else:
            self._run(spec, dict(args), ctx)

    @classmethod
    def _background_executor(cls) -> ThreadPoolExecutor:
        if VinlensWidget._executor is None:
            VinlensWidget._executor = ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="vinlens"
            )
        return VinlensWidget._executor

    def _run(self, spec: _CommandSpec, args: dict[str, Any], ctx: CommandContext) -> None:
        self.status = "busy"
        self.error = ""
        self.error_traceback = ""
        try:
            data = getattr(self, spec.method)(args, ctx)
        except CommandCancelled as exc:
            self.status = "idle"
            self._reply_error(ctx.request_id, f"{spec.name}: {exc}", cancelled=True)
        except CommandError as exc:
            self._reply_error(ctx.request_id, str(exc))
        except BaseException as exc:  # KeyboardInterrupt in user code too: report, keep kernel
            self._reply_error(
                ctx.request_id, f"{spec.name} failed: {type(exc).__name__}: {exc}", exc
            )
        else:
            # State first, reply last: whoever waits for the reply sees the final status.
            self.status = "idle"
            self._send_message(
                {"kind": "result", "id": ctx.request_id, "data": data if data is not None else {}}
            )
        finally:
            self._running.pop(ctx.request_id, None)

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
        import time
        import uuid

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
