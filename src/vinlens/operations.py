"""One shape for every long operation: tasks, partials, an ordered fold, progress and cancel.

A long operation (store stats, coverage, store compare, activation statistics over
batches, dataset attribution, camera reliance) is a request split into **tasks**: plain,
picklable data (a store URL and ids, a model recipe and a shard index; never an open
handle). ``run_task(task)`` returns a **partial**, and :func:`run_operation` folds the
partials **in task order**, whatever order they finish in, so the result does not depend
on where or how fast the tasks ran: ``executor=None`` runs them here, one at a time; any
``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``, a ``ThreadPoolExecutor``, or
``distributed.Client(...).get_executor()``) runs them there, with a bounded number in
flight so the coordinator never holds more than that many partials.

Partials follow one accumulator protocol (:class:`Accumulator`):

* ``update(value)`` adds one value in place and returns ``self``;
* ``merge(other)`` folds ``other`` into ``self`` and returns ``self``; it **never mutates
  ``other``** (a partial may live in a cache, or be merged into two folds);
* ``finish()`` returns a frozen record and leaves the accumulator usable.

Floating moments merge with one function, :func:`chan_merge` (Chan, Golub and LeVeque's
parallel update of count, mean and sum of squared deviations), for Python floats and
numpy arrays alike.

Progress has one signature everywhere, ``progress(done, total)`` (:data:`ProgressCallback`),
called on the calling thread. Cancelling goes through a :class:`CancelToken` (or a plain
``threading.Event``): no task is submitted after the cancel, queued ones are cancelled,
running ones are waited for, and :class:`OperationCancelled` is raised.

This module is the bottom of every engine: it imports neither torch nor any vinlens
module. Anchors: dask's ``reduction(chunk, combine, aggregate)``, whylogs' mergeable
profiles.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar, runtime_checkable

import numpy as np

from vinlens.errors import VinlensError

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "Accumulator",
    "BoundedProcessPool",
    "CancelToken",
    "Mergeable",
    "OperationCancelled",
    "ProgressCallback",
    "as_cancel_token",
    "chan_merge",
    "check_executor",
    "executor_workers",
    "run_operation",
]

#: ``progress(done, total)``: ``done`` units of work of ``total`` are finished.
ProgressCallback = Callable[[int, int], None]

#: Tasks submitted ahead of the fold by default: bounds the partials the coordinator holds.
DEFAULT_MAX_IN_FLIGHT = 32

T = TypeVar("T")
V_contra = TypeVar("V_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class OperationCancelled(VinlensError, RuntimeError):
    """A long operation was cancelled through its :class:`CancelToken` before it finished."""


class CancelToken:
    """A cancel request shared between the caller (or a widget) and a running operation.

    Wraps a ``threading.Event`` (a new one, or the one given), so a token can be cancelled
    from any thread and an existing event can be passed where a token is expected.
    """

    __slots__ = ("_event",)

    def __init__(self, event: threading.Event | None = None) -> None:
        if event is not None and not isinstance(event, threading.Event):
            raise TypeError(
                f"CancelToken wraps a threading.Event, got {type(event).__module__}."
                f"{type(event).__qualname__}"
            )
        self._event = event if event is not None else threading.Event()

    @property
    def event(self) -> threading.Event:
        """The underlying event (set once cancelled)."""
        return self._event

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called (or the event was set)."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Ask the operation to stop; idempotent, callable from any thread."""
        self._event.set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`OperationCancelled` when cancelled."""
        if self._event.is_set():
            raise OperationCancelled("operation cancelled")

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"


def as_cancel_token(cancel: CancelToken | threading.Event | None) -> CancelToken | None:
    """``cancel`` as a :class:`CancelToken` (a ``threading.Event`` is wrapped); None stays None."""
    if cancel is None or isinstance(cancel, CancelToken):
        return cancel
    if isinstance(cancel, threading.Event):
        return CancelToken(cancel)
    raise TypeError(
        "cancel must be None, a vinlens.operations.CancelToken or a threading.Event, "
        f"got {_describe(cancel)}"
    )


@runtime_checkable
class Mergeable(Protocol):
    """What the fold needs of a partial: ``merge(other)`` mutates and returns ``self``."""

    def merge(self, other: Self, /) -> Self: ...


@runtime_checkable
class Accumulator(Protocol[V_contra, R_co]):
    """The one accumulator protocol of every partial (see the module docstring).

    ``update(value)`` adds in place and returns ``self``; ``merge(other)`` folds ``other``
    into ``self``, returns ``self`` and never mutates ``other``; ``finish()`` returns a
    frozen record.
    """

    def update(self, value: V_contra, /) -> Self: ...

    def merge(self, other: Self, /) -> Self: ...

    def finish(self) -> R_co: ...


N = TypeVar("N", float, np.ndarray)


def chan_merge(count_a: int, mean_a: N, m2_a: N, count_b: int, mean_b: N, m2_b: N) -> tuple[N, N]:
    """Mean and sum of squared deviations of two slices together (Chan et al.'s formula).

    ``count_*`` are the slices' sizes, ``mean_*`` their means and ``m2_*`` their sums of
    squared deviations from the mean, as Python floats or numpy arrays of one shape (one
    statistic per element). Returns ``(mean, m2)`` of the union; the inputs are never
    modified, and an empty slice leaves the other's values unchanged (copied for arrays),
    so the result is exact when either side is empty.
    """
    if count_b == 0:
        return _copied(mean_a), _copied(m2_a)
    if count_a == 0:
        return _copied(mean_b), _copied(m2_b)
    total = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * count_b / total
    m2 = m2_a + m2_b + delta * delta * (count_a * count_b / total)
    return mean, m2


def _copied(value: N) -> N:
    return value.copy() if isinstance(value, np.ndarray) else value


# --------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------


def _describe(value: object) -> str:
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    if isinstance(value, str):
        return f"the string {value!r}"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__qualname__} {text}"


def check_executor(executor: object) -> concurrent.futures.Executor | None:
    """``executor`` when it is None or a ``concurrent.futures.Executor`` instance.

    Raises:
        TypeError: anything else, naming what was given and what is accepted (a class
            instead of an instance, a string such as ``"process"``, a number, or a
            ``distributed.Client`` instead of ``client.get_executor()``).
    """
    if executor is None or isinstance(executor, concurrent.futures.Executor):
        return executor
    accepted = (
        "executor must be None (run here) or a concurrent.futures.Executor instance, such as "
        "ProcessPoolExecutor(), ThreadPoolExecutor() or distributed.Client(...).get_executor()"
    )
    if isinstance(executor, type) and issubclass(executor, concurrent.futures.Executor):
        raise TypeError(
            f"{accepted}; got {_describe(executor)}: create an instance, e.g. "
            f"{executor.__qualname__}(max_workers=4)"
        )
    if type(executor).__name__ == "Client" and hasattr(executor, "get_executor"):
        raise TypeError(f"{accepted}; got a Dask Client: pass client.get_executor()")
    raise TypeError(f"{accepted}; got {_describe(executor)}")


class BoundedProcessPool(concurrent.futures.ProcessPoolExecutor):
    """A process pool that starts no more processes than there are CPUs and tasks.

    A ``ProcessPoolExecutor`` (``isinstance`` holds) that delegates to a real one created
    at the first ``submit``, sized then.

    ``BoundedProcessPool(64)`` on a 16-core machine runs at most 16 processes, and an
    operation of 3 tasks (:func:`run_operation` tells the pool its task count before the
    first submission) starts 3: the processes are forked at the first ``submit``, not
    at construction. ``on_cap(message)`` is called once when fewer processes than asked
    for are started, with a sentence saying how many and why. Later operations on the
    same pool keep the size chosen for the first.
    """

    def __init__(
        self,
        max_workers: int,
        *,
        on_cap: Callable[[str], None] | None = None,
        mp_context: Any = None,
    ) -> None:
        # The base initialiser is not called: it would size the pool before the tasks are known.
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an int >= 1, got {max_workers!r}")
        self.requested = max_workers
        self.cpus = os.cpu_count() or 1
        # Read by executor_workers (and so by an operation cutting its tasks).
        self._max_workers = min(max_workers, self.cpus)
        self._on_cap = on_cap
        self._mp_context = mp_context
        self._tasks: int | None = None
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._shutdown = False
        self._started: int | None = None

    @property
    def workers(self) -> int | None:
        """Processes the pool started (``None`` before the first submission)."""
        return self._started

    def reserve(self, tasks: int) -> None:
        """The next operation has ``tasks`` tasks (sizes the pool if it has not started)."""
        with self._lock:
            if self._pool is None:
                self._tasks = max(tasks, self._tasks or 0)

    def submit(
        self, fn: Callable[..., R_co], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[R_co]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._pool is None:
                self._pool = self._start()
            pool = self._pool
        return pool.submit(fn, *args, **kwargs)

    def _start(self) -> concurrent.futures.ProcessPoolExecutor:
        workers = self._max_workers
        reasons = []
        if self.requested > self.cpus:
            reasons.append(f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}")
        if self._tasks is not None and self._tasks < workers:
            workers = max(1, self._tasks)
            reasons.insert(0, f"{self._tasks} task{'s' if self._tasks != 1 else ''}")
        if workers < self.requested and self._on_cap is not None:
            self._on_cap(
                f"using {workers} worker process{'es' if workers != 1 else ''}, not the "
                f"{self.requested} asked for: no more than the {' and the '.join(reasons)}"
            )
        self._started = workers
        return concurrent.futures.ProcessPoolExecutor(workers, mp_context=self._mp_context)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            pool = self._pool
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def executor_workers(executor: concurrent.futures.Executor | None) -> int:
    """How many tasks ``executor`` runs at once where it says (the stdlib pools, Dask).

    ``None`` (in process) is 1; an executor that does not say counts this machine's cores.
    """
    if executor is None:
        return 1
    workers = getattr(executor, "_max_workers", None)
    if isinstance(workers, int) and workers > 0:
        return workers
    client = getattr(executor, "_client", None)
    if client is not None:
        try:
            threads = client.nthreads()
        except Exception:  # a client that cannot answer: fall back to the cores
            threads = None
        if isinstance(threads, dict) and threads:
            return max(1, sum(int(n) for n in threads.values()))
    return os.cpu_count() or 1


# --------------------------------------------------------------------------------------
# The fold
# --------------------------------------------------------------------------------------

P = TypeVar("P", bound=Mergeable)


def run_operation(
    tasks: Sequence[T],
    run_task: Callable[[T], P],
    *,
    start: Callable[[], P] | None = None,
    executor: concurrent.futures.Executor | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | threading.Event | None = None,
    weight: Callable[[T], int] | None = None,
    known: Callable[[T], P | None] | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> P:
    """Run ``run_task`` on every task and fold the partials in task order.

    Args:
        tasks: The operation's tasks, in the order their partials are folded. With an
            executor each task and each partial must pickle (top-level classes and
            functions, plain data).
        run_task: Returns a new partial of one task (a top-level function when an
            executor runs it).
        start: Builds the empty accumulator the partials are merged into; ``None`` folds
            into the first partial (which ``run_task`` made for this call alone).
        executor: ``None`` runs the tasks here, in order; any
            ``concurrent.futures.Executor`` runs them there (checked by
            :func:`check_executor`).
        progress: ``progress(done, total)``, on the calling thread: ``(0, total)`` first,
            then after each task of non-zero weight finishes (in finishing order), with
            the weights finished so far; ``total`` is the sum of all weights.
        cancel: A :class:`CancelToken` or ``threading.Event``; once set, no task is
            submitted, queued ones are cancelled and :class:`OperationCancelled` raises.
        weight: Units of progress of a task (rows, bytes); 1 per task by default.
        known: A partial already known in this process (a cache) or ``None``; known
            tasks are not run and count as done at once. Needs ``start``, so that no known
            partial is mutated by the fold.
        max_in_flight: Tasks submitted to the executor but not yet folded, at most.

    Returns:
        The folded accumulator (call its ``finish()`` for the record).

    An exception raised by a task, by ``progress`` or by a cancel stops the operation:
    queued tasks are cancelled, running ones are waited for (so that no task of this
    operation still runs when the call returns), and the exception propagates.
    """
    executor = check_executor(executor)
    token = as_cancel_token(cancel)
    _check_run_arguments(tasks, start, known, max_in_flight)
    weights = [1 if weight is None else int(weight(task)) for task in tasks]
    if any(w < 0 for w in weights):
        raise ValueError(f"task weights must be >= 0, got {min(weights)}")
    results: list[P | None] = [None if known is None else known(task) for task in tasks]
    counter = _Progress(progress, weights, results)
    if token is not None:
        token.raise_if_cancelled()
    counter.begin()
    todo = [index for index, r in enumerate(results) if r is None]
    if isinstance(executor, BoundedProcessPool):
        executor.reserve(len(todo))
    folder: _Fold[P] = _Fold(results, start)
    if executor is None:
        for index in todo:
            if token is not None:
                token.raise_if_cancelled()
            results[index] = run_task(tasks[index])
            folder.advance()
            counter.finished(index)
    else:
        _run_on_executor(executor, tasks, run_task, todo, folder, counter, token, max_in_flight)
    if token is not None:
        token.raise_if_cancelled()
    return folder.result()


def _check_run_arguments(
    tasks: Sequence[Any], start: object, known: object, max_in_flight: int
) -> None:
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    if known is not None and start is None:
        raise ValueError(
            "run_operation(known=...) needs start=, so that known partials stay intact"
        )
    if not tasks and start is None:
        raise ValueError("run_operation() got no tasks and no start= to build an empty result")


class _Progress:
    """``progress(done, total)`` of one operation, in units of task weight."""

    __slots__ = ("_callback", "_weights", "done", "total")

    def __init__(
        self,
        callback: ProgressCallback | None,
        weights: list[int],
        results: Sequence[object | None],
    ) -> None:
        self._callback = callback
        self._weights = weights
        self.total = sum(weights)
        # Known partials count as done before any task runs.
        self.done = sum(w for w, r in zip(weights, results, strict=True) if r is not None)

    def begin(self) -> None:
        """Report ``(0, total)``, then what the known partials already did."""
        if self._callback is not None:
            self._callback(0, self.total)
            if self.done:
                self._callback(self.done, self.total)

    def finished(self, index: int) -> None:
        """Task ``index`` finished: report it unless its weight is zero."""
        step = self._weights[index]
        if step:
            self.done += step
            if self._callback is not None:
                self._callback(self.done, self.total)


def _run_on_executor(
    executor: concurrent.futures.Executor,
    tasks: Sequence[T],
    run_task: Callable[[T], P],
    todo: list[int],
    folder: _Fold[P],
    counter: _Progress,
    token: CancelToken | None,
    max_in_flight: int,
) -> None:
    """Run the ``todo`` tasks on ``executor``, at most ``max_in_flight`` submitted and not
    yet folded, folding each partial as soon as every earlier one is there."""
    pending: dict[concurrent.futures.Future[P], int] = {}
    next_submit = 0
    try:
        while next_submit < len(todo) or pending:
            if token is not None:
                token.raise_if_cancelled()
            while next_submit < len(todo) and len(pending) + folder.held() < max_in_flight:
                index = todo[next_submit]
                pending[executor.submit(run_task, tasks[index])] = index
                next_submit += 1
            # A timeout only so that a cancel from another thread is seen while tasks run.
            finished, _ = concurrent.futures.wait(
                pending,
                timeout=None if token is None else 0.1,
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
            for future in finished:
                index = pending.pop(future)
                folder.arrived(index, future.result())
                counter.finished(index)
            folder.advance()
        if token is not None:
            token.raise_if_cancelled()
    finally:
        _drain(pending)


def _drain(pending: dict[concurrent.futures.Future[Any], int]) -> None:
    """Cancel queued futures and wait for the running ones (their results are dropped)."""
    running = [future for future in pending if not future.cancel()]
    if running:
        concurrent.futures.wait(running)


class _Fold(Generic[P]):
    """Merges ``results[i]`` in index order as soon as every earlier one is there."""

    __slots__ = ("_acc", "_held", "_next", "_results")

    def __init__(self, results: list[P | None], start: Callable[[], P] | None) -> None:
        self._results = results
        self._acc: P | None = start() if start is not None else None
        self._next = 0
        self._held: set[int] = set()
        self.advance()

    def arrived(self, index: int, partial: P) -> None:
        """An executor's partial arrived (it counts as in flight until it is merged)."""
        self._results[index] = partial
        self._held.add(index)

    def held(self) -> int:
        """Executor partials that finished but wait for an earlier one to be merged."""
        return len(self._held)

    def advance(self) -> None:
        results = self._results
        while self._next < len(results) and results[self._next] is not None:
            partial = results[self._next]
            assert partial is not None
            self._acc = partial if self._acc is None else self._acc.merge(partial)
            # Folded partials are dropped at once: the coordinator holds only the unfolded.
            results[self._next] = _FOLDED
            self._held.discard(self._next)
            self._next += 1

    def result(self) -> P:
        assert self._next == len(self._results) and self._acc is not None
        return self._acc


_FOLDED: Any = object()
