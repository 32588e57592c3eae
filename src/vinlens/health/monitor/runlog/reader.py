"""The reading side of a run log: :func:`open_run` and :class:`TrainingRun`.

Local segments are memory-mapped, and the reader keeps only offsets into them (the
sampled steps' records, the events, the every-step series): reading one field of the
module x step matrix touches that field's bytes only. Segment objects on object storage
are fetched once, whole, and held.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
import threading
import types
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import nn

from vinlens.health.monitor._records import (
    HistoryMatrix,
    ModuleHistory,
    NonFiniteEvent,
    StepSeries,
    TrainingHistory,
)
from vinlens.health.monitor.runlog.fingerprints import (
    FingerprintBlock,
    Fingerprints,
    decode_fingerprints,
    join_fingerprints,
)
from vinlens.health.monitor.runlog.format import (
    EVENT,
    FINGERPRINTS,
    HEADER_SIZE,
    META,
    ORDER,
    RUN,
    SAMPLE,
    SAMPLES,
    STEPS,
    decode_json,
    field_checksum,
    sample_index,
)
from vinlens.health.monitor.runlog.location import segment_seq, split_log_dir
from vinlens.health.monitor.runlog.records_scan import (
    DAMAGED,
    RunDamage,
    damaged_kind,
    scan_segment,
)
from vinlens.health.monitor.runlog.replay import Replay, load_replay
from vinlens.health.monitor.runlog.runs import RunInfo, run_infos
from vinlens.health.monitor.runlog.view import RankView
from vinlens.model_inspection import SummaryAccumulator, TensorSummary

__all__ = ["RankView", "RunDamage", "RunInfo", "StepSeries", "TrainingRun", "open_run"]

_COUNTS = ("count", "nan_count", "posinf_count", "neginf_count")


@dataclass
class _Segment:
    path: str
    data: Any = b""  # the bytes read so far: a read-only memory map of a local file
    read: int = 0  # where the first record not yet taken starts
    run: str | None = None  # the key of the run it belongs to, once its first record is read
    closed: bool = False  # read to its end knowing another segment follows it


@dataclass
class _Damage:
    segment: str
    offset: int
    end: int
    record: str
    after: int  # the last step read before it (-1: none)
    before: int | None = None  # the first step read after it


@dataclass(frozen=True)
class _Block:
    """Sampled steps in one record: field ``f``'s ``(n, modules)`` values start at
    ``values + f * n * modules * 8`` of ``segment.data``; ``sums`` are their checksums
    (None for a first-format record, whose CRC covered the values when it was read)."""

    segment: _Segment
    n: int
    values: int
    sums: tuple[int, ...] | None


@dataclass
class _Rank:
    meta: dict[str, Any] = field(default_factory=dict)
    segments: dict[str, _Segment] = field(default_factory=dict)
    steps: list[np.ndarray[Any, Any]] = field(default_factory=list)
    norms: list[np.ndarray[Any, Any]] = field(default_factory=list)
    losses: list[np.ndarray[Any, Any]] = field(default_factory=list)
    sample_steps: list[int] = field(default_factory=list)
    blocks: list[_Block] = field(default_factory=list)
    events: list[NonFiniteEvent] = field(default_factory=list)
    bundles: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    path: str = ""
    prints: list[FingerprintBlock] = field(default_factory=list)
    orders: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    first_step: int | None = None
    last_step: int = -1
    damage: list[_Damage] = field(default_factory=list)


@dataclass
class _Dir:
    """One rank directory: its segments and, per run key, that run's records."""

    path: str
    segments: dict[str, _Segment] = field(default_factory=dict)
    runs: dict[str, _Rank] = field(default_factory=dict)


def open_run(
    log_dir: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> TrainingRun:
    """Open a run directory written by ``TrainingMonitor(log_dir=...)`` (live or finished).

    A directory may hold several runs (:attr:`TrainingRun.runs`); this reads the latest
    one, or the one whose id is ``run_id``, and never mixes two in one series.

    Raises:
        FileNotFoundError: ``log_dir`` holds no rank directory with a whole metadata record.
        NotADirectoryError: ``log_dir`` is a file.
        ValueError: ``storage_options`` given for a local path, or no run ``run_id`` there.
    """
    return TrainingRun(log_dir, storage_options=storage_options, run_id=run_id)


class TrainingRun:
    """A run log as records: every rank's steps, sampled steps and events.

    It reads whole records only (a torn tail is left for a later :meth:`refresh`, which
    reads what was appended since); damaged records are skipped and reported in
    :attr:`damaged`, with a warning. It reads one run of the directory (:attr:`run_id`,
    chosen when it is opened: a later run appearing meanwhile is listed in :attr:`runs`).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> None:
        self.log_dir = os.fspath(log_dir) if isinstance(log_dir, os.PathLike) else log_dir
        self.storage_options = dict(storage_options or {})
        self._fs, self._root = split_log_dir(log_dir, storage_options)
        if self._fs is None and os.path.exists(self._root) and not os.path.isdir(self._root):
            raise NotADirectoryError(
                f"{self.log_dir!r} is a file, not a vinlens run log (expected the directory"
                " given as TrainingMonitor(log_dir=...), holding rank-NNNNN directories)"
            )
        self._dirs: dict[int, _Dir] = {}
        self._ranks: dict[int, _Rank] = {}
        self._selected: str | None = None
        self._requested = run_id
        self._lock = threading.Lock()
        self.refresh()
        if not self._ranks:
            if run_id is not None and self.runs:
                known = ", ".join(str(r.run_id) for r in self.runs)
                raise ValueError(f"{self.log_dir!r} has no run {run_id!r}; its runs are {known}")
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

    def _load(self, segment: _Segment) -> bool:
        """Bring ``segment.data`` up to the file's end; whether it grew.

        A local segment is memory-mapped (the pages a read touches come from the page
        cache, and the reader holds no copy of the log); an object is fetched once, whole.
        """
        if self._fs is not None:
            if len(segment.data):
                return False  # an object is whole once it is listed
            segment.data = self._fs.cat_file(segment.path)
            return bool(len(segment.data))
        try:
            with open(segment.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size <= len(segment.data):
                    return False
                segment.data = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            return False
        return True

    def refresh(self) -> TrainingRun:
        """Read what was appended since the last read; returns ``self``."""
        found: list[tuple[int, _Damage]] = []
        with self._lock:
            for name in self._list(self._root):
                if not name.startswith("rank-") or not name[5:].isdigit():
                    continue
                rank = int(name[5:])
                directory = self._dirs.setdefault(rank, _Dir(f"{self._root}/{name}"))
                self._refresh_rank(rank, directory, found)
            self._select()
            lines = [_public(rank, damage).describe() for rank, damage in found]
        for line in lines:
            warnings.warn(f"run log {self.log_dir!r}, {line}", RuntimeWarning, stacklevel=2)
        return self

    def _select(self) -> None:
        """Pin the run read (the requested one, else the latest when first found) and
        point each rank at its records of that run."""
        if self._selected is None:
            started: dict[str, float] = {}
            for directory in self._dirs.values():
                for key, state in directory.runs.items():
                    if state.meta:
                        started[key] = max(started.get(key, 0.0), state.started)
            if self._requested is not None:
                if self._requested in started:
                    self._selected = self._requested
            elif started:
                self._selected = max(started, key=lambda k: started[k])
        selected = self._selected
        self._ranks = {
            rank: directory.runs[selected]
            for rank, directory in sorted(self._dirs.items())
            if selected in directory.runs and directory.runs[selected].meta
        }

    def _refresh_rank(self, rank: int, directory: _Dir, found: list[tuple[int, _Damage]]) -> None:
        names = [n for n in self._list(directory.path) if segment_seq(n) is not None]
        names.sort(key=lambda n: segment_seq(n) or 0)
        previous = ""  # a segment that names no run continues the one before it
        for index, name in enumerate(names):
            closed = index + 1 < len(names)
            segment = directory.segments.get(name)
            if segment is None:
                segment = directory.segments[name] = _Segment(f"{directory.path}/{name}")
            grew = self._load(segment)
            if grew or (closed and not segment.closed and segment.read < len(segment.data)):
                segment.closed = closed
                scan = scan_segment(segment.data, segment.read, closed=closed)
                for kind, offset, end in scan.items:
                    if segment.run is None:
                        segment.run = self._run_key(segment, kind, offset, end, previous)
                    state = directory.runs.get(segment.run)
                    if state is None:
                        state = directory.runs[segment.run] = _Rank(path=directory.path)
                    if kind == DAMAGED:
                        kind_name = damaged_kind(segment.data, offset)
                        damage = _Damage(segment.path, offset, end, kind_name, state.last_step)
                        state.damage.append(damage)
                        found.append((rank, damage))
                    else:
                        self._take(state, segment, kind, offset, end)
                segment.read = scan.read
            if segment.run is not None:
                previous = segment.run

    @staticmethod
    def _run_key(segment: _Segment, kind: int, offset: int, end: int, previous: str) -> str:
        """The run a segment belongs to, from its first record: a writer's segments begin
        with their run's identity (a log written without one is the run ``""``)."""
        if offset == HEADER_SIZE and kind in (RUN, META):
            run_id = decode_json(segment.data[offset:end]).get("run_id")
            return run_id if isinstance(run_id, str) else ""
        return previous

    def _take(self, state: _Rank, segment: _Segment, kind: int, offset: int, end: int) -> None:
        data = segment.data
        if kind == META:
            meta = decode_json(data[offset:end])
            if not state.meta:
                state.meta = meta
            state.started = max(state.started, float(meta.get("started", 0.0)))
        elif kind == STEPS:
            (n,) = struct.unpack_from("<I", data, offset)
            base = offset + 4
            steps = np.frombuffer(data, "<i8", n, base).copy()
            if n:
                for damage in state.damage:
                    if damage.before is None:
                        damage.before = int(steps[0])
                state.first_step = int(steps[0]) if state.first_step is None else state.first_step
                state.last_step = max(state.last_step, int(steps.max()))
            state.steps.append(steps)
            state.norms.append(np.frombuffer(data, "<f8", n, base + 8 * n).copy())
            state.losses.append(np.frombuffer(data, "<f8", n, base + 16 * n).copy())
        elif kind == SAMPLES:
            n, width, _, values = sample_index(data, offset)
            state.sample_steps.extend(np.frombuffer(data, "<i8", n, offset + 16).tolist())
            sums = np.frombuffer(data, "<u8", width, offset + 16 + 8 * n)
            state.blocks.append(_Block(segment, n, values, tuple(int(v) for v in sums)))
        elif kind == SAMPLE:
            (step,) = struct.unpack_from("<q", data, offset)
            state.sample_steps.append(step)
            state.blocks.append(_Block(segment, 1, offset + 8, None))
        elif kind == EVENT:
            fields = decode_json(data[offset:end])
            if fields.get("replay"):
                digest = fields.get("replay_sha256")
                where = f"{state.path}/{fields['replay']}"
                state.bundles[int(fields["step"])] = (
                    where,
                    digest if isinstance(digest, str) else None,
                )
            state.events.append(_event(fields))
        elif kind == FINGERPRINTS:
            state.prints.append(decode_fingerprints(data, offset, end))
        elif kind == ORDER:
            state.orders.append(decode_json(data[offset:end]))

    def _field(self, state: _Rank, column: int) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Field ``column`` of every sampled step, ``(steps, modules)``, checksums verified.

        Raises:
            ValueError: a block's values fail their checksum (the file was damaged).
        """
        m = len(state.meta["module_paths"])
        blocks = list(state.blocks)
        out = np.empty((sum(b.n for b in blocks), m))
        row = 0
        for block in blocks:
            start = block.values + 8 * column * block.n * m
            values = np.frombuffer(block.segment.data, "<f8", block.n * m, start)
            if block.sums is not None and field_checksum(values) != block.sums[column]:
                raise ValueError(
                    f"{block.segment.path}: the values of field"
                    f" {state.meta['fields'][column]!r} at byte {start} fail their checksum"
                    " (the file was damaged after it was written)"
                )
            out[row : row + block.n] = values.reshape(block.n, m)
            row += block.n
        return out

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
        """The ranks that wrote to the run read, ascending."""
        return tuple(sorted(self._ranks))

    @property
    def run_id(self) -> str | None:
        """The id of the run read (None for a log written without run identity)."""
        return self._selected or None

    @property
    def runs(self) -> tuple[RunInfo, ...]:
        """Every run in the directory, oldest first, with its ranks and first and last steps
        (open another with ``open_run(log_dir, run_id=...)``)."""
        with self._lock:
            return run_infos(
                (rank, key, state)
                for rank, directory in sorted(self._dirs.items())
                for key, state in directory.runs.items()
            )

    @property
    def damaged(self) -> tuple[RunDamage, ...]:
        """The damaged stretches of the run's segments that the reader skipped (each was
        also warned about when it was first read), in rank and segment order."""
        with self._lock:
            return tuple(
                _public(rank, damage)
                for rank, state in sorted(self._ranks.items())
                for damage in state.damage
            )

    @property
    def module_paths(self) -> tuple[str, ...]:
        """The watched module paths (of the lowest rank)."""
        return tuple(self._rank(self.ranks[0]).meta["module_paths"])

    def rank(self, rank: int) -> RankView:
        """One rank's view of the run: the history API of that rank's live
        :class:`~vinlens.health.TrainingMonitor` (``module_paths``, ``events``, ``history``,
        ``history_matrix(field)``, ``step_series()``), with the same values.

        Raises:
            ValueError: the run has no such rank.
        """
        return RankView(self, rank)

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

    def fingerprints(self, rank: int = 0) -> Fingerprints:
        """Every step's fingerprints: the root's inputs, each module's weight and gradient
        norms, and the order of outputs and gradients of the latest sampled step (all empty
        for a log written without them)."""
        state = self._rank(rank)
        with self._lock:
            return join_fingerprints(state.meta["module_paths"], state.prints, state.orders)

    def sampled_steps(self, rank: int = 0) -> tuple[int, ...]:
        """The sampled steps logged, in order."""
        state = self._rank(rank)
        with self._lock:
            return tuple(state.sample_steps)

    def history_matrix(self, field: str = "grad_norm", rank: int = 0) -> HistoryMatrix:
        """One statistic of every module over every sampled step logged."""
        state = self._rank(rank)
        fields: list[str] = state.meta["fields"]
        if field not in fields:
            raise ValueError(f"field must be one of {', '.join(sorted(fields))}, got {field!r}")
        with self._lock:
            steps = tuple(state.sample_steps)
            values = self._field(state, fields.index(field))
        # (modules, steps): the transpose of the rows read, without a second copy.
        return HistoryMatrix(field, steps, tuple(state.meta["module_paths"]), values.T)

    def history(self, rank: int = 0) -> TrainingHistory:
        """Every sampled step logged, as the monitor's :class:`TrainingHistory` (its totals
        are recomputed from the logged per-step summaries)."""
        state = self._rank(rank)
        fields: list[str] = state.meta["fields"]
        paths = tuple(state.meta["module_paths"])
        with self._lock:
            sample_steps = tuple(state.sample_steps)
            block = np.stack([self._field(state, c) for c in range(len(fields))], axis=1)
        samples = sample_steps
        summary_fields = [f for f in fields if f in _SUMMARY_NAMES]
        columns = [fields.index(f) for f in summary_fields]
        norm_column = fields.index("grad_norm")
        # A run logged before the headroom was a history field has none.
        headroom = fields.index("headroom_bits") if "headroom_bits" in fields else None
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
            bits = () if headroom is None else tuple(float(v) for v in block[:, headroom, row])
            modules[path] = ModuleHistory(
                norms, outputs, norm_total.finish(), output_total.finish(), bits
            )
        series = self.step_series(rank)
        steps_run = int(series.steps[-1]) + 1 if len(series.steps) else 0
        return TrainingHistory(
            sample_steps,
            types.MappingProxyType(modules),
            steps_run,
            len(samples),
        )

    def replay_steps(self, rank: int = 0) -> tuple[int, ...]:
        """The steps of the rank that have a replay bundle."""
        return tuple(sorted(self._rank(rank).bundles))

    def record_counts(self, rank: int = 0) -> tuple[int, int, int]:
        """``(steps, sampled steps, events)`` of ``rank`` read so far, without building an
        array: a cheap check of whether a :meth:`refresh` brought anything new."""
        state = self._rank(rank)
        with self._lock:
            steps = sum(len(part) for part in state.steps)
            return steps, len(state.sample_steps), len(state.events)

    def load_replay(self, step: int, *, model: nn.Module, rank: int = 0) -> Replay:
        """Load the replay bundle of ``step`` (of ``rank``) into ``model``.

        Raises:
            ValueError: no bundle for that step (its event names why, or there was no
                event), or the bundle is refused (see :func:`load_replay`).
        """
        state = self._rank(rank)
        path, digest = state.bundles.get(step, (None, None))
        if path is None:
            known = ", ".join(map(str, sorted(state.bundles))) or "none"
            raise ValueError(
                f"{self.log_dir!r} rank {rank} has no replay bundle for step {step!r}"
                f" (steps with one: {known})"
            )
        if self._fs is not None:
            path = self._fs.unstrip_protocol(path)
        return load_replay(path, model, storage_options=self.storage_options or None, sha256=digest)

    def export_tensorboard(self, logdir: str | os.PathLike[str]) -> tuple[str, ...]:
        """Write the every-step series, the per-module gradient norms (scalars) and the
        events (text) as TensorBoard event files, one run per rank (``logdir/rank0``, ...);
        returns the directories written. Needs the ``vinlens[tensorboard]`` extra; see
        :mod:`vinlens.health.monitor.runlog.tensorboard`."""
        from vinlens.health.monitor.runlog.tensorboard import export_tensorboard

        return export_tensorboard(self, logdir)

    def __repr__(self) -> str:
        return f"TrainingRun({self.log_dir!r}, run_id={self.run_id!r}, ranks={list(self.ranks)})"


def _public(rank: int, damage: _Damage) -> RunDamage:
    steps = None if damage.before is None else range(damage.after + 1, damage.before)
    length = damage.end - damage.offset
    return RunDamage(rank, damage.segment, damage.offset, length, damage.record, steps)


_EVENT_FIELDS = {f.name for f in dataclasses.fields(NonFiniteEvent)}


def _event(record: dict[str, Any]) -> NonFiniteEvent:
    """The logged event; fields a newer writer added are ignored, fields an older one did
    not write keep their defaults."""
    known: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in _EVENT_FIELDS
    }
    return NonFiniteEvent(**known)


_SUMMARY_NAMES = frozenset(f.name for f in dataclasses.fields(TensorSummary))


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
