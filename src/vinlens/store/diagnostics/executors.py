"""Executors for the diagnostics scans beyond ``concurrent.futures``: a Dask cluster's."""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

#: Seconds :func:`dask_executor` waits for a scheduler's first worker by default.
DASK_WORKER_TIMEOUT = 30.0


@contextlib.contextmanager
def dask_executor(
    address: str | None = None, *, worker_timeout: float = DASK_WORKER_TIMEOUT, **client_kwargs: Any
) -> Iterator[concurrent.futures.Executor]:
    """A ``concurrent.futures.Executor`` on a Dask cluster, for ``with`` blocks.

    ``address`` is the scheduler's (``None`` starts a local cluster); ``client_kwargs``
    go to ``distributed.Client``. The block starts once the scheduler has a worker: a
    scheduler with none after ``worker_timeout`` seconds raises ``TimeoutError`` naming
    its address and worker count (tasks sent to it would wait forever). The client
    closes when the block ends. Needs the ``vinlens[dask]`` extra.
    """
    if isinstance(worker_timeout, bool) or not isinstance(worker_timeout, int | float):
        raise TypeError(f"worker_timeout must be a number of seconds, got {worker_timeout!r}")
    if not worker_timeout > 0:
        raise ValueError(f"worker_timeout must be > 0 seconds, got {worker_timeout!r}")
    try:
        # Imported by name: distributed ships no type hints, and it is an optional extra.
        distributed: Any = importlib.import_module("distributed")
    except ImportError as exc:
        raise ImportError(
            "Dask executors need the optional dask extra: pip install 'vinlens[dask]'"
        ) from exc
    client = distributed.Client(address, **client_kwargs)
    try:
        try:
            client.wait_for_workers(1, timeout=worker_timeout)
        except TimeoutError:
            raise _no_workers(client, address, worker_timeout) from None
        yield client.get_executor()
    finally:
        client.close()


def _no_workers(client: Any, address: str | None, timeout: float) -> TimeoutError:
    where = address
    try:
        info = client.scheduler_info()
        count = len(info.get("workers", {}))
        where = info.get("address") or address
    except Exception:  # the scheduler went away while we asked: say what we know
        count = 0
    return TimeoutError(
        f"the Dask scheduler at {where} has {count} worker{'s' if count != 1 else ''} after "
        f"waiting {timeout:g} s; start a worker (dask worker {where}) or use a scheduler "
        "that has workers"
    )
