"""Export a run log to TensorBoard (the ``vinlens[tensorboard]`` extra).

One TensorBoard run per rank (``LOGDIR/rank0``, ``LOGDIR/rank1``, ...), so ``tensorboard
--logdir LOGDIR`` overlays the ranks:

- ``vinlens/grad_norm`` and ``vinlens/loss``: the every-step series (a step whose
  ``step_fn`` returned no scalar has no loss point);
- ``vinlens/grad_norm/<module path>``: each watched module's gradient norm at every sampled
  step logged;
- ``vinlens/events``: one text entry per non-finite event, at its step.

Each sampled step is one TensorBoard event holding every module's value (not one event per
value), so a run of 1,000 modules by 10,000 sampled steps writes 10,000 events. The log
records no per-step wall time: every point carries the run's start time, and TensorBoard's
"step" axis is the one to read. TensorBoard stores scalars as float32.

Each call writes the whole run as new event files: export into a fresh directory (or delete
the previous export), or TensorBoard shows every point twice.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vinlens.health.monitor._records import HistoryMatrix, NonFiniteEvent


class _Run(Protocol):
    """What the export reads of a :class:`~vinlens.health.monitor.runlog.reader.TrainingRun`."""

    @property
    def ranks(self) -> tuple[int, ...]: ...
    @property
    def events(self) -> tuple[NonFiniteEvent, ...]: ...
    def meta(self, rank: int = 0) -> Mapping[str, Any]: ...
    def step_series(self, rank: int = 0) -> Any: ...  # a StepSeries
    def history_matrix(self, field: str = "grad_norm", rank: int = 0) -> HistoryMatrix: ...


__all__ = ["export_tensorboard"]

#: Tag prefix of every exported value.
TAG = "vinlens"


def _require_tensorboard() -> tuple[Any, Any, Any]:
    try:
        importlib.import_module("tensorboard")
        summary_pb2 = importlib.import_module("tensorboard.compat.proto.summary_pb2")
        writer = importlib.import_module("torch.utils.tensorboard.writer")
        summary = importlib.import_module("torch.utils.tensorboard.summary")
    except ImportError as exc:
        raise ImportError(
            "TrainingRun.export_tensorboard needs the tensorboard package, which is not"
            " installed; install the optional extra with `pip install 'vinlens[tensorboard]'`"
        ) from exc
    return summary_pb2.Summary, writer.FileWriter, summary.text


def event_text(event: NonFiniteEvent) -> str:
    """One event as TensorBoard markdown (paths in code spans, so ``_`` stays literal)."""
    origin = event.origin
    if origin is None:
        where = (
            "the replay stayed finite (no origin)" if event.replayed else "not replayed (counted)"
        )
    else:
        params = ", ".join(f"`{p}`" for p in origin.parameter_paths) or "none"
        where = f"origin `{origin.module_path}` (call {origin.call_index}), parameters {params}"
    parts = [f"step {event.step}, rank {event.rank}: {where}"]
    if event.made_on_ranks:
        parts.append("made on ranks " + ", ".join(map(str, event.made_on_ranks)))
    if event.replayed_eagerly:
        parts.append("replayed eagerly (the model runs compiled code)")
    return "; ".join(parts)


def export_tensorboard(run: _Run, logdir: str | os.PathLike[str]) -> tuple[str, ...]:
    """Write ``run`` as TensorBoard event files under ``logdir``; returns the run directories
    written (one per rank).

    Raises:
        ImportError: the ``tensorboard`` extra is not installed.
        ValueError: ``logdir`` is a URL (export writes a local directory) or an existing file.
    """
    text = os.fspath(logdir)
    if "://" in text:
        raise ValueError(
            f"export_tensorboard writes a local directory, got the URL {text!r};"
            " export locally and copy the directory"
        )
    root = Path(text)
    if root.exists() and not root.is_dir():
        raise ValueError(f"export_tensorboard: {text!r} is a file, expected a directory")
    summary_cls, file_writer, text_summary = _require_tensorboard()
    value_cls = summary_cls.Value
    events_by_rank: dict[int, list[NonFiniteEvent]] = {}
    for event in run.events:
        events_by_rank.setdefault(event.rank, []).append(event)
    written = []
    for rank in run.ranks:
        directory = root / f"rank{rank}"
        started = float(run.meta(rank).get("started", time.time()))
        writer = file_writer(str(directory), max_queue=1024, flush_secs=3600)
        try:
            series = run.step_series(rank)
            for step, norm, loss in zip(
                series.steps.tolist(), series.grad_norm.tolist(), series.loss.tolist(), strict=True
            ):
                values = [value_cls(tag=f"{TAG}/grad_norm", simple_value=norm)]
                if not math.isnan(loss):
                    values.append(value_cls(tag=f"{TAG}/loss", simple_value=loss))
                writer.add_summary(summary_cls(value=values), step, started)
            matrix = run.history_matrix("grad_norm", rank)
            tags = [f"{TAG}/grad_norm/{path}" for path in matrix.module_paths]
            for column, step in enumerate(matrix.steps):
                norms = matrix.values[:, column].tolist()
                values = [
                    value_cls(tag=tag, simple_value=v) for tag, v in zip(tags, norms, strict=True)
                ]
                writer.add_summary(summary_cls(value=values), step, started)
            for event in events_by_rank.get(rank, ()):
                summary = text_summary(f"{TAG}/events", event_text(event))
                summary.value[0].tag = f"{TAG}/events"  # torch appends "/text_summary"
                writer.add_summary(summary, event.step, started)
        finally:
            writer.close()
        written.append(str(directory))
    return tuple(written)
