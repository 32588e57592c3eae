"""The reading side of a run log: :func:`open_run` and :class:`TrainingRun`."""

from __future__ import annotations

import os
import struct
import threading
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from torch import nn

from vinlens.health.monitor import (
    HistoryMatrix,
    ModuleHistory,
    NonFiniteEvent,
    TrainingHistory,
)
from vinlens.health.runlog.format import (
    EVENT,
    META,
    SAMPLE,
    STEPS,
    decode_json,
    iter_records,
)
from vinlens.health.runlog.location import split_log_dir
from vinlens.health.runlog.replay import Replay, load_replay
from vinlens.health.runlog.writer import segment_seq
from vinlens.model_inspection import SummaryAccumulator, TensorSummary

__all__ = ["StepSeries", "TrainingRun", "open_run"]

_COUNTS = ("count", "nan_count", "posinf_count", "neginf_count")


class StepSeries(NamedTuple):
    """The every-step series of one rank: ``steps`` (int64), ``grad_norm`` (float64, the
    global L2 norm of the parameters' gradients), ``loss`` (float64, NaN where ``step_fn``
    returned no scalar)."""

    steps: np.ndarray[Any, np.dtype[np.int64]]
    grad_norm: np.ndarray[Any, np.dtype[np.float64]]
    loss: np.ndarray[Any, np.dtype[np.float64]]


@dataclass
class _Segment:
    read: int = 0  # bytes of the file read so far
    tail: bytes = b""  # read but not yet a whole record


@dataclass
class _Rank:
    meta: dict[str, Any] = field(default_factory=dict)
    segments: dict[str, _Segment] = field(default_factory=dict)
    steps: list[np.ndarray[Any, Any]] = field(default_factory=list)
    norms: list[np.ndarray[Any, Any]] = field(default_factory=list)
    losses: list[np.ndarray[Any, Any]] = field(default_factory=list)
    sample_steps: list[int] = field(default_factory=list)
    samples: list[tuple[bytes, int]] = field(default_factory=list)
    events: list[NonFiniteEvent] = field(default_factory=list)
    bundles: dict[int, str] = field(default_factory=dict)
    path: str = ""


def open_run(
    log_dir: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> TrainingRun:
    """Open a run directory written by ``TrainingMonitor(log_dir=...)`` (live or finished).

    Raises:
        FileNotFoundError: ``log_dir`` holds no rank directory with a whole metadata record.
        ValueError: ``storage_options`` given for a local path.
    """
    return TrainingRun(log_dir, storage_options=storage_options)


class TrainingRun:
    """A run log as records: every rank's steps, sampled steps and events.

    It reads whole records only (a torn tail is left for a later :meth:`refresh`, which
    reads what was appended since).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.log_dir = os.fspath(log_dir) if isinstance(log_dir, os.PathLike) else log_dir
        self.storage_options = dict(storage_options or {})
        self._fs, self._root = split_log_dir(log_dir, storage_options)
        self._ranks: dict[int, _Rank] = {}
        self._lock = threading.Lock()
        self.refresh()
        if not self._ranks:
            raise FileNotFoundError(
                f"{self.log_dir!r} is not a vinlens run log (no rank-NNNNN directory with a"
                " whole metadata record)"
            )

    # ------------------------------------------------------------------ reading

    def _list(self, path: str) -> list[str]:
        try:
            if self._fs is None:
                return sorted(os.listdir(path))
            self._fs.invalidate_cache(path)  # listings are cached; the log grows
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self._fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    def _read(self, path: str, start: int) -> bytes:
        if self._fs is None:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read()
        data: bytes = self._fs.cat_file(path, start=start or None)
        return data

    def refresh(self) -> TrainingRun:
        """Read what was appended since the last read; returns ``self``."""
        with self._lock:
            for name in self._list(self._root):
                if not name.startswith("rank-") or not name[5:].isdigit():
                    continue
                rank = int(name[5:])
                state = self._ranks.get(rank) or _Rank(path=f"{self._root}/{name}")
                self._refresh_rank(state, f"{self._root}/{name}")
                if state.meta:
                    self._ranks[rank] = state
        return self

    def _refresh_rank(self, state: _Rank, path: str) -> None:
        names = [n for n in self._list(path) if segment_seq(n) is not None]
        for name in sorted(names, key=lambda n: segment_seq(n) or 0):
            segment = state.segments.setdefault(name, _Segment())
            if self._fs is not None and segment.read and not segment.tail:
                continue  # an object is whole once it is listed
            fresh = self._read(f"{path}/{name}", segment.read)
            if not fresh:
                continue
            segment.read += len(fresh)
            data = segment.tail + fresh if segment.tail else fresh
            consumed = 0
            for kind, offset, end in iter_records(data):
                self._take(state, kind, data, offset, end)
                consumed = end
            segment.tail = data[consumed:]

    def _take(self, state: _Rank, kind: int, data: bytes, offset: int, end: int) -> None:
        if kind == META:
            if not state.meta:
                state.meta = decode_json(data[offset:end])
        elif kind == STEPS:
            (n,) = struct.unpack_from("<I", data, offset)
            base = offset + 4
            state.steps.append(np.frombuffer(data, "<i8", n, base))
            state.norms.append(np.frombuffer(data, "<f8", n, base + 8 * n))
            state.losses.append(np.frombuffer(data, "<f8", n, base + 16 * n))
        elif kind == SAMPLE:
            (step,) = struct.unpack_from("<q", data, offset)
            state.sample_steps.append(step)
            state.samples.append((data, offset + 8))
        elif kind == EVENT:
            fields = decode_json(data[offset:end])
            if fields.get("replay"):
                state.bundles[int(fields["step"])] = f"{state.path}/{fields['replay']}"
            state.events.append(
                NonFiniteEvent(int(fields["step"]), fields.get("origin"), rank=int(fields["rank"]))
            )

    def _rank(self, rank: int) -> _Rank:
        state = self._ranks.get(rank)
        if state is None:
            raise ValueError(
                f"{self.log_dir!r} has no rank {rank!r}; its ranks are {list(self.ranks)}"
            )
        return state

    # ------------------------------------------------------------------ records

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks that wrote to the directory, ascending."""
        return tuple(sorted(self._ranks))

    @property
    def module_paths(self) -> tuple[str, ...]:
        """The watched module paths (of the lowest rank)."""
        return tuple(self._rank(self.ranks[0]).meta["module_paths"])

    def meta(self, rank: int = 0) -> Mapping[str, Any]:
        """The rank's metadata: ``module_paths``, ``fields``, ``every``, ``rank``,
        ``world_size``, ``vinlens_version``, ``torch_version``."""
        return types.MappingProxyType(self._rank(rank).meta)

    @property
    def events(self) -> tuple[NonFiniteEvent, ...]:
        """Every rank's non-finite events, in step order (then rank)."""
        found = [e for r in self.ranks for e in self._ranks[r].events]
        return tuple(sorted(found, key=lambda e: (e.step, e.rank)))

    def step_series(self, rank: int = 0) -> StepSeries:
        """Every step's number, global gradient norm and loss."""
        state = self._rank(rank)

        def join(parts: list[np.ndarray[Any, Any]], dtype: str) -> np.ndarray[Any, Any]:
            return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)

        return StepSeries(
            join(state.steps, "int64"), join(state.norms, "float64"), join(state.losses, "float64")
        )

    def sampled_steps(self, rank: int = 0) -> tuple[int, ...]:
        """The sampled steps logged, in order."""
        return tuple(self._rank(rank).sample_steps)

    def history_matrix(self, field: str = "grad_norm", rank: int = 0) -> HistoryMatrix:
        """One statistic of every module over every sampled step logged."""
        state = self._rank(rank)
        fields: list[str] = state.meta["fields"]
        if field not in fields:
            raise ValueError(f"field must be one of {', '.join(sorted(fields))}, got {field!r}")
        paths = tuple(state.meta["module_paths"])
        m = len(paths)
        column = fields.index(field) * m
        samples = list(state.samples)
        values = np.empty((m, len(samples)))
        for j, (data, offset) in enumerate(samples):
            values[:, j] = np.frombuffer(data, "<f8", m, offset + 8 * column)
        steps = tuple(state.sample_steps[: len(samples)])
        return HistoryMatrix(field, steps, paths, values)

    def history(self, rank: int = 0) -> TrainingHistory:
        """Every sampled step logged, as the monitor's :class:`TrainingHistory` (its totals
        are recomputed from the logged per-step summaries)."""
        state = self._rank(rank)
        fields: list[str] = state.meta["fields"]
        paths = tuple(state.meta["module_paths"])
        m = len(paths)
        samples = list(state.samples)
        block = np.empty((len(samples), len(fields), m))
        for j, (data, offset) in enumerate(samples):
            block[j] = np.frombuffer(data, "<f8", m * len(fields), offset).reshape(len(fields), m)
        summary_fields = [f for f in fields if f != "grad_norm"]
        columns = [fields.index(f) for f in summary_fields]
        norm_column = fields.index("grad_norm")
        modules: dict[str, ModuleHistory] = {}
        for row, path in enumerate(paths):
            outputs = tuple(
                _summary(summary_fields, block[j, columns, row]) for j in range(len(samples))
            )
            norms = tuple(float(v) for v in block[:, norm_column, row])
            norm_total = SummaryAccumulator()
            output_total = SummaryAccumulator()
            for norm, summary in zip(norms, outputs, strict=True):
                norm_total.update_value(norm)
                output_total.merge(_accumulator(summary))
            modules[path] = ModuleHistory(
                norms, outputs, norm_total.finish(), output_total.finish()
            )
        series = self.step_series(rank)
        steps_run = int(series.steps[-1]) + 1 if len(series.steps) else 0
        return TrainingHistory(
            tuple(state.sample_steps[: len(samples)]),
            types.MappingProxyType(modules),
            steps_run,
            len(samples),
        )

    def replay_steps(self, rank: int = 0) -> tuple[int, ...]:
        """The steps of the rank that have a replay bundle."""
        return tuple(sorted(self._rank(rank).bundles))

    def load_replay(self, step: int, *, model: nn.Module, rank: int = 0) -> Replay:
        """Load the replay bundle of ``step`` (of ``rank``) into ``model``.

        Raises:
            ValueError: no bundle for that step (its event names why, or there was no
                event), or the bundle is refused (see :func:`load_replay`).
        """
        state = self._rank(rank)
        path = state.bundles.get(step)
        if path is None:
            known = ", ".join(map(str, sorted(state.bundles))) or "none"
            raise ValueError(
                f"{self.log_dir!r} rank {rank} has no replay bundle for step {step!r}"
                f" (steps with one: {known})"
            )
        if self._fs is not None:
            path = self._fs.unstrip_protocol(path)
        return load_replay(path, model, storage_options=self.storage_options or None)

    def __repr__(self) -> str:
        return f"TrainingRun({self.log_dir!r}, ranks={list(self.ranks)})"


def _summary(names: list[str], values: np.ndarray[Any, Any]) -> TensorSummary:
    fields: dict[str, Any] = {
        name: int(value) if name in _COUNTS else float(value)
        for name, value in zip(names, values, strict=True)
    }
    return TensorSummary(**fields)


def _accumulator(summary: TensorSummary) -> SummaryAccumulator:
    """Moments equivalent to one summary (std squared back into the sum of squares)."""
    acc = SummaryAccumulator()
    acc.count = summary.count
    acc.nan, acc.posinf, acc.neginf = summary.nan_count, summary.posinf_count, summary.neginf_count
    finite = summary.count - summary.nonfinite_count
    acc.finite = finite
    if finite:
        acc.mean = summary.mean
        acc.m2 = summary.std * summary.std * finite
        acc.minimum, acc.maximum = summary.min, summary.max
        acc.zeros = round(summary.zero_fraction * finite)
    return acc
