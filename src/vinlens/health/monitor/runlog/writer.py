"""The writing side of a run log: one :class:`RunLogWriter` per process (rank).

Records are buffered in memory and reach the directory at least every
``flush_interval`` seconds (events at once). On a local path the writer appends whole
records to its current segment and rotates it past ``segment_bytes``; on object storage
(an fsspec URL: no append) every flush writes one new segment object, so each object is
whole when it appears. A killed writer leaves whole records and at most one torn tail.
Every segment (and object) a writer starts begins with its run identity
(:mod:`~vinlens.health.monitor.runlog.runs`).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import threading
import time
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

from vinlens.errors import VinlensError
from vinlens.health.monitor._records import RunMeta
from vinlens.health.monitor.runlog.fingerprints import fingerprint_payload
from vinlens.health.monitor.runlog.format import (
    EVENT,
    FINGERPRINTS,
    META,
    ORDER,
    RUN,
    STEPS,
    encode_json,
    encode_record,
    encode_samples,
)
from vinlens.health.monitor.runlog.location import (
    rank_dir_name,
    segment_name,
    segment_seq,
    split_log_dir,
)

__all__ = [
    "DEFAULT_FLUSH_INTERVAL",
    "RunLogError",
    "RunLogWriter",
    "rank_dir_name",
    "segment_name",
    "split_log_dir",
]

#: Seconds a record may wait in the writer's buffer before it reaches the directory.
DEFAULT_FLUSH_INTERVAL = 2.0
#: A local segment is closed and a new one started past this size.
DEFAULT_SEGMENT_BYTES = 64 << 20
#: The buffer is written out early past this size (the writer's memory stays flat).
_BUFFER_BYTES = 8 << 20
#: Replay bundles written per rank and run (a NaN flood keeps the first ones).
MAX_REPLAY_BUNDLES = 16


class RunLogError(VinlensError, OSError):
    """The run log's destination refused a write (full, gone, no permission).

    The monitor's in-memory history and events are kept; the writer stops writing.
    """


@dataclass
class _Pending:
    records: bytearray
    steps: list[int]
    norms: list[float]
    losses: list[float]
    sample_steps: list[int] = field(default_factory=list)
    samples: list[np.ndarray[Any, np.dtype[np.float64]]] = field(default_factory=list)
    sample_bytes: int = 0
    deferred: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    prints: list[tuple[int, Any, torch.Tensor]] = field(default_factory=list)


class RunLogWriter:
    """Append a monitor's records to ``log_dir/rank-RRRRR/seg-NNNNNNNN.vlr``.

    Raises:
        RunLogError: the destination cannot be written (on the call that wrote).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None,
        rank: int,
        meta: Mapping[str, object],
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        first_step: int = 0,
    ) -> None:
        if not (isinstance(flush_interval, int | float) and 0 < flush_interval <= 3600):
            raise ValueError(f"flush_interval must be seconds in (0, 3600], got {flush_interval!r}")
        self._fs, root = split_log_dir(log_dir, storage_options)
        self.log_dir = log_dir
        self.rank = rank
        self.flush_interval = float(flush_interval)
        self._segment_bytes = segment_bytes
        self._dir = f"{root}/{rank_dir_name(rank)}"
        self._lock = threading.RLock()
        self._pending = _Pending(bytearray(), [], [], [])
        paths = meta.get("module_paths", ())
        self.modules = len(paths) if isinstance(paths, Sized) else 0  # a fingerprint's width
        self._last_flush = time.monotonic()
        self._closed = False
        self.error: RunLogError | None = None
        self._raised = False
        self._bundles = 0
        self._file: Any = None
        self._file_size = 0
        self._start: Any = None
        #: The number the monitor's first step gets (after the last one of a resumed run).
        self.first_step = first_step
        identity = {"run_id": meta.get("run_id"), "paths_digest": meta.get("paths_digest")}
        run_id = identity["run_id"]
        self.run_id = run_id if isinstance(run_id, str) else None
        self._stamp = encode_record(RUN, encode_json(identity))
        try:
            if self._fs is None:
                os.makedirs(self._dir, exist_ok=True)
                names = os.listdir(self._dir)
            else:
                self._fs.makedirs(self._dir, exist_ok=True)
                try:
                    listed = self._fs.ls(self._dir, detail=False)
                except FileNotFoundError:  # object storage: no prefix until an object
                    listed = []
                names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listed]
        except OSError as error:
            raise RunLogError(
                f"cannot create the run log directory {self._dir!r}: {error!r}"
            ) from error
        seqs = [s for s in map(segment_seq, names) if s is not None]
        # A new writer never appends to an old segment: its torn tail stays the end.
        self._seq = max(seqs, default=-1) + 1
        self._pending.records += encode_record(META, encode_json(dict(meta)))
        self.flush()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flusher, name="vinlens-runlog", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ records

    def step(self, step: int, grad_norm: float, loss: object) -> None:
        """One step's global gradient norm and loss: what ``step_fn`` returned, a scalar
        tensor or a number (NaN for anything else). A loss on an accelerator is read when
        the buffer is written (on the flushing thread), so the step does not wait for it."""
        value = math.nan
        deferred = None
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            if loss.device.type == "cpu":
                value = float(loss.detach())
            else:
                deferred = loss.detach().clone()
        elif isinstance(loss, int | float) and not isinstance(loss, bool):
            value = float(loss)
        with self._lock:
            pending = self._pending
            if deferred is not None:
                pending.deferred.append((len(pending.losses), deferred))
            pending.steps.append(step)
            pending.norms.append(grad_norm)
            pending.losses.append(value)
        self._maybe_flush()

    def sample(self, step: int, block: np.ndarray[Any, np.dtype[np.float64]]) -> None:
        """One sampled step's ``(modules, fields)`` rows (a flush writes its sampled steps as
        one :data:`~vinlens.health.monitor.runlog.format.SAMPLES` record)."""
        rows = np.array(block, dtype=np.float64)
        with self._lock:
            pending = self._pending
            pending.sample_steps.append(step)
            pending.samples.append(rows)
            pending.sample_bytes += rows.nbytes
        self._maybe_flush()

    def fingerprint(self, step: int, signature: Any, values: torch.Tensor) -> None:
        """One step's fingerprint (see :mod:`~vinlens.health.monitor.runlog.fingerprints`):
        float64 ``values`` left where they were computed and read when the buffer is written
        (on the flushing thread), so the step does not wait for them."""
        with self._lock:
            self._pending.prints.append((step, signature, values))
        self._maybe_flush()

    def order(self, step: int, outputs: list[str], grads: list[str]) -> None:
        """The order of a sampled step's module outputs and parameter gradients."""
        record = {"step": step, "outputs": outputs, "grads": grads}
        with self._lock:
            self._pending.records += encode_record(ORDER, encode_json(record))

    def event(self, fields: dict[str, object]) -> None:
        """One non-finite event: written at once."""
        with self._lock:
            self._pending.records += encode_record(EVENT, encode_json(fields))
        self.flush()

    def start_state(self, model: Any) -> Any:
        """The buffers of ``model`` as the step starts (a
        :class:`~vinlens.health.monitor.runlog.replay.StartState`, refilled in place each step)."""
        from vinlens.health.monitor.runlog.replay import StartState

        start = self._start
        if start is None or start.model is not model:
            start = self._start = StartState(model)
        return start.capture()

    def capture(self, model: Any, start_buffers: Any) -> Any:
        """A :class:`~vinlens.health.monitor.runlog.replay.ReplayCapture` for a step's replay."""
        from vinlens.health.monitor.runlog.replay import ReplayCapture

        return ReplayCapture(model, start_buffers)

    def nonfinite(self, event: Any, capture: Any, rng: Any, max_bytes: int) -> None:
        """Record a non-finite step's :class:`~vinlens.health.NonFiniteEvent` (every field):
        its replay bundle (the first :data:`MAX_REPLAY_BUNDLES` of the run), then the
        event, both at once."""
        from vinlens.health.monitor.runlog.replay import bundle_name

        step, rank, origin = event.step, event.rank, event.origin
        name = digest = None
        if self._bundles < MAX_REPLAY_BUNDLES and self.error is None:
            data = capture.bundle(step, rank, origin, rng, max_bytes)
            if data is not None:
                name = bundle_name(step)
                digest = hashlib.sha256(data).hexdigest()
                self._bundles += 1
                try:
                    self.bundle(name, data)
                except RunLogError as error:
                    self.error = error
                    self._raised = True
                    raise
        record = {f.name: getattr(event, f.name) for f in fields(event)}
        extra = {"replay": name, "replay_sha256": digest, "note": capture.inputs_error}
        self.event(record | extra)

    def bundle(self, name: str, data: bytes) -> str:
        """Write one replay bundle whole (a local temporary file renamed into place, or one
        object); returns its path.

        Raises:
            RunLogError: the destination refused it.
        """
        path = f"{self._dir}/{name}"
        try:
            if self._fs is not None:
                self._fs.pipe_file(path, data)
            else:
                temporary = f"{path}.partial"
                with open(temporary, "wb") as f:
                    f.write(data)
                os.replace(temporary, path)
        except OSError as error:
            raise RunLogError(
                f"run log {self.log_dir!r}: writing the replay bundle {path!r} failed ({error})"
            ) from error
        return path

    # ------------------------------------------------------------------ output

    def _maybe_flush(self) -> None:
        if self.error is not None:
            return
        due = time.monotonic() - self._last_flush >= self.flush_interval
        pending = self._pending
        size = len(pending.records) + pending.sample_bytes
        size += 8 * len(pending.prints) * (2 * self.modules + 2)
        if due or size >= _BUFFER_BYTES or len(pending.steps) >= 65536:
            self.flush()

    def _take(self) -> bytes:
        pending = self._pending
        data = pending.records
        if pending.samples:
            data = data + encode_samples(pending.sample_steps, pending.samples)
        for index, tensor in pending.deferred:
            pending.losses[index] = float(tensor)
        if pending.prints:
            data = data + encode_record(
                FINGERPRINTS, fingerprint_payload(pending.prints, self.modules)
            )
        if pending.steps:
            n = len(pending.steps)
            payload = (
                struct.pack("<I", n)
                + np.asarray(pending.steps, dtype="<i8").tobytes()
                + np.asarray(pending.norms, dtype="<f8").tobytes()
                + np.asarray(pending.losses, dtype="<f8").tobytes()
            )
            data = data + encode_record(STEPS, payload)
        self._pending = _Pending(bytearray(), [], [], [])
        return bytes(data)

    def flush(self) -> None:
        """Write what is buffered (whole records only).

        Raises:
            RunLogError: the destination refused it; the writer stops writing after that.
        """
        with self._lock:
            if self.error is not None or self._closed:
                return
            data = self._take()
            self._last_flush = time.monotonic()
            if not data:
                return
            try:
                self._write(data)
            except OSError as error:
                self.error = RunLogError(
                    f"run log {self.log_dir!r}: writing {len(data)} bytes to {self._dir!r}"
                    f" failed ({error}); the monitor keeps its history in memory and stops"
                    " writing the log"
                )
                if threading.current_thread() is not getattr(self, "_thread", None):
                    self._raised = True
                raise self.error from error

    def check(self) -> None:
        """Raise, once, a failure the background flush met (on the training side).

        Raises:
            RunLogError: the destination refused a background flush.
        """
        if self.error is not None and not self._raised:
            self._raised = True
            raise self.error

    def _write(self, data: bytes) -> None:
        if self._fs is not None:
            # Object storage: one whole object per flush, each naming its run.
            self._fs.pipe_file(f"{self._dir}/{segment_name(self._seq)}", self._stamp + data)
            self._seq += 1
            return
        if self._file is None or self._file_size >= self._segment_bytes:
            if self._file is not None:
                self._file.close()
                self._file = None
            while self._file is None:
                # Exclusive: a second writer on the directory (another monitor, another
                # run) takes the next number instead of appending into this one's segment.
                try:
                    name = f"{self._dir}/{segment_name(self._seq)}"
                    self._file = open(name, "xb")  # noqa: SIM115
                except FileExistsError:
                    pass
                self._seq += 1
            self._file.write(self._stamp)
            self._file_size = len(self._stamp)
        # One write of whole records: a reader sees each record whole or not yet.
        self._file.write(data)
        self._file.flush()
        self._file_size += len(data)

    def _flusher(self) -> None:
        while not self._stop.wait(self.flush_interval / 2):
            if time.monotonic() - self._last_flush >= self.flush_interval:
                try:
                    self.flush()
                except RunLogError:
                    return  # raised again on the training side through ``error``

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._closed:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
                if self._file is not None:
                    self._file.close()
                    self._file = None


def open_monitor_log(
    run: RunMeta,
    log_dir: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None,
    *,
    resume: bool = False,
) -> RunLogWriter:
    """The writer of a :class:`~vinlens.health.TrainingMonitor` (its metadata record first):
    a new run ``run.run_id``, or with ``resume`` the latest run of ``log_dir`` continued
    (see :mod:`~vinlens.health.monitor.runlog.runs`).

    Raises:
        ValueError: ``resume`` onto a run that watched other module paths.
        RunLogError: the destination cannot be written.
    """
    import torch
    import torch.distributed as dist

    import vinlens
    from vinlens.health.monitor.runlog.resume import resume_point
    from vinlens.health.monitor.runlog.runs import paths_digest

    run_id, first_step = run.run_id, 0
    if resume:
        point = resume_point(log_dir, storage_options, run.module_paths)
        if point is not None:
            run_id, first_step = point
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    meta = {
        "format": 1,
        "run_id": run_id,
        "paths_digest": paths_digest(run.module_paths),
        "module_paths": list(run.module_paths),
        "fields": list(run.fields),
        "every": run.every,
        "rank": run.rank,
        "world_size": world,
        "vinlens_version": getattr(vinlens, "__version__", "unknown"),
        "torch_version": torch.__version__,
        "started": time.time(),
    }
    return RunLogWriter(
        log_dir, storage_options=storage_options, rank=run.rank, meta=meta, first_step=first_step
    )
