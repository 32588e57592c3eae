"""The pieces of a running command: its context, its task, the ``@command`` marker.

:class:`~vinlens.widgets._base.VinlensWidget` dispatches messages and runs handlers; this
module holds what a handler sees (:class:`CommandContext`: progress, cancellation,
``call``), what a caller holds (:class:`CommandTask`: ``wait``, ``cancel``, ``done``) and
the exceptions that end a command as a user-facing error or a cancel. The how-to is the
docstring of :mod:`vinlens.widgets._base`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from vinlens.errors import VinlensError
from vinlens.operations import CancelToken

__all__ = [
    "CommandCancelled",
    "CommandContext",
    "CommandError",
    "CommandTask",
    "MessageSink",
    "command",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class MessageSink(Protocol):
    """What a command context reports progress to (a :class:`VinlensWidget`)."""

    def _send_message(self, message: dict[str, Any]) -> None: ...


class CommandError(VinlensError, RuntimeError):
    """A problem the user should read in the widget's error box (no traceback needed)."""


class CommandCancelled(VinlensError, RuntimeError):
    """Raised inside a handler by :meth:`CommandContext.check_cancelled`."""


@dataclass
class CommandContext:
    """What a running command can use: progress reports and a cancellation flag."""

    widget: MessageSink
    request_id: str
    cancel_event: threading.Event = field(default_factory=threading.Event)
    #: Who started the command: its name for a browser request, else what
    #: :meth:`VinlensWidget.start_command` was given ("construction", "refresh()").
    trigger: str = ""

    def progress(self, done: int, total: int) -> None:
        self.widget._send_message(
            {"kind": "progress", "id": self.request_id, "done": done, "total": total}
        )
        self.check_cancelled()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def cancel_token(self) -> CancelToken:
        """A :class:`vinlens.operations.CancelToken` on this command's cancel event.

        Give it to an engine operation (``cancel=ctx.cancel_token``): the browser's cancel
        then stops the engine at its next check, and the ``OperationCancelled`` it raises
        ends the command as cancelled, like :meth:`check_cancelled` does.
        """
        return CancelToken(self.cancel_event)

    def check_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise CommandCancelled("cancelled by the user")

    def call(self, func: Callable[[], T], *, poll_s: float = 0.05) -> T:
        """Run ``func()`` on a helper thread; return its result or raise at once on cancel.

        For a blocking call that checks for cancellation rarely or never (an engine that
        only looks between shards). ``func`` must only read: after a cancel its thread
        winds down in the background and whatever it returns is dropped.
        """
        box: dict[str, Any] = {}
        finished = threading.Event()

        def target() -> None:
            try:
                box["result"] = func()
            except BaseException as exc:  # re-raised on the command's thread
                box["error"] = exc
            finally:
                finished.set()

        name = f"vinlens-call-{self.request_id[:24]}"
        threading.Thread(target=target, name=name, daemon=True).start()
        while not finished.wait(poll_s):
            self.check_cancelled()
        if "error" in box:
            raise box["error"]
        return box["result"]  # type: ignore[no-any-return]


class CommandTask:
    """One command started on a widget: wait for it, cancel it, read how it ended."""

    def __init__(self, name: str, ctx: CommandContext, *, exclusive: bool) -> None:
        self.name = name
        self.ctx = ctx
        self.exclusive = exclusive
        self._finished = threading.Event()
        #: The handler's return value (None until it returned).
        self.result: Any = None
        #: What the handler raised (a :class:`CommandCancelled` after a cancel), else None.
        self.exception: BaseException | None = None

    @property
    def request_id(self) -> str:
        return self.ctx.request_id

    def done(self) -> bool:
        return self._finished.is_set()

    def cancel(self) -> None:
        """Ask the handler to stop at its next progress report or cancellation check."""
        self.ctx.cancel_event.set()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the command ended or ``timeout`` passed; True when it ended."""
        return self._finished.wait(timeout)

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the command ended; return its result or raise what it raised."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"command {self.name!r} still running after {timeout}s")
        if self.exception is not None:
            raise self.exception
        return self.result

    def _finish(self, result: Any, exception: BaseException | None) -> None:
        self.result = result
        self.exception = exception
        self._finished.set()


@dataclass(frozen=True)
class _CommandSpec:
    name: str
    method: str
    background: bool
    exclusive: bool
    busy: str | None


class _Busy(VinlensError, RuntimeError):
    """An exclusive command was asked for while another one runs."""


def command(
    name: str,
    *,
    background: bool = False,
    exclusive: bool = False,
    busy: str | None = None,
) -> Callable[[F], F]:
    """Mark a widget method as the handler of browser command ``name``.

    ``background`` runs it on the widget's own worker thread; ``exclusive`` lets only one
    exclusive command of the widget run at a time (``busy`` is the refusal's message).
    See the module docstring.
    """

    def decorate(func: F) -> F:
        func.__vinlens_command__ = (name, background, exclusive, busy)  # type: ignore[attr-defined]
        return func

    return decorate
