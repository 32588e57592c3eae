"""Msgpack record blocks of a store: offsets validated against the data file, records decoded."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from vinlens.store.errors import CorruptRecordError, MissingBlockError, RecordDecodeError
from vinlens.store.format import BlockKind, decode_record, decode_records, record_paths
from vinlens.store.reader._core import DEFAULT_BATCH_BYTES, ReaderCore, RecordBlock

__all__ = ["RecordBlockReads"]


class RecordBlockReads(ReaderCore):
    """The reader's record-block part: validated offsets and decoded msgpack records."""

    def _open_records(self, shard_id: str, name: str) -> RecordBlock:
        key = (shard_id, name)
        with self._lock:
            cached = self._records.get(key)
            if cached is not None:
                return cached
        spec = self._require_block(shard_id, name, BlockKind.MSGPACK_INDEXED_RECORDS)
        self._check_shard_dir(shard_id)
        msgpack_rel, offsets_rel = record_paths(shard_id, name)
        for rel in (msgpack_rel, offsets_rel):
            if not self._is_file(rel):
                raise MissingBlockError(
                    f"record block {name!r} of shard {shard_id!r} is missing a file",
                    path=self.access.describe(rel),
                    expected=f"{name}.msgpack and {name}.offsets",
                )
        offsets_path = self.access.describe(offsets_rel)
        msgpack_path = self.access.describe(msgpack_rel)
        expected_size = (spec.num_rows + 1) * 8
        offsets_size = self.access.stat(offsets_rel).size
        if offsets_size != expected_size:
            raise CorruptRecordError(
                f"offsets file has {offsets_size} bytes",
                path=offsets_path,
                expected=f"{expected_size} bytes (num_rows + 1 = {spec.num_rows + 1} little-endian uint64)",
            )
        offsets = np.frombuffer(self.access.read_range(offsets_rel, 0, expected_size), dtype="<u8")
        if offsets.size != spec.num_rows + 1:
            raise CorruptRecordError("offsets file shrank while reading", path=offsets_path)
        msgpack_pin = self.access.stat(msgpack_rel)
        data_size = msgpack_pin.size
        if int(offsets[0]) != 0:
            raise CorruptRecordError(
                f"first offset is {int(offsets[0])}", path=offsets_path, expected="first offset 0"
            )
        decreasing: np.ndarray = (
            np.flatnonzero(np.diff(offsets.astype(np.int64, copy=False)) < 0)
            if offsets.size > 1
            else np.zeros(0, dtype=np.int64)
        )
        huge = np.flatnonzero(offsets > np.uint64(data_size))
        if (
            len(huge)
            and (not len(decreasing) or huge[0] <= decreasing[0])
            and huge[0] < spec.num_rows
        ):
            i = int(huge[0])
            raise CorruptRecordError(
                f"offset {i} is {int(offsets[i])}, out of range of {name}.msgpack ({data_size} bytes)",
                path=offsets_path,
                expected=f"offsets within 0..{data_size}, never decreasing",
            )
        if len(decreasing):
            i = int(decreasing[0]) + 1
            raise CorruptRecordError(
                f"offset {i} ({int(offsets[i])}) is smaller than offset {i - 1} ({int(offsets[i - 1])})",
                path=offsets_path,
                expected="offsets that never decrease",
            )
        last = int(offsets[-1])
        if last > data_size:
            raise CorruptRecordError(
                f"file is truncated: {data_size} bytes but the offsets end at {last}",
                path=msgpack_path,
                expected=f"{last} bytes (the last offset)",
            )
        if last < data_size:
            raise CorruptRecordError(
                f"file has {data_size - last} bytes after the last record (offset {last})",
                path=msgpack_path,
                expected=f"file size equal to the last offset {last}",
            )
        block = RecordBlock(spec, msgpack_rel, offsets.astype(np.int64), msgpack_pin)
        with self._lock:
            self._records[key] = block
        return block

    def _record_bytes(self, block: RecordBlock, start: int, length: int) -> bytes:
        if block.msgpack_pin is None:
            return self.access.read_range(block.msgpack_rel, start, length)
        try:
            return self.access.read_pinned(block.msgpack_rel, block.msgpack_pin, start, length)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise MissingBlockError(
                f"record block {block.spec.name!r}: the msgpack file vanished after the block "
                "was opened",
                path=self.access.describe(block.msgpack_rel),
                expected="the files the block's opening saw (a published store does not change)",
            ) from exc

    def record_offsets(self, shard_id: str, name: str) -> np.ndarray:
        """The validated ``num_rows + 1`` byte offsets of a record block (int64 copy)."""
        return self._open_records(shard_id, name).offsets.copy()

    def _decode(self, block: RecordBlock, row: int, data: bytes | memoryview) -> dict[str, Any]:
        try:
            return decode_record(data)
        except RecordDecodeError as exc:
            raise CorruptRecordError(
                str(exc),
                path=self.access.describe(block.msgpack_rel),
                location=f"record {row} (bytes {int(block.offsets[row])}:{int(block.offsets[row + 1])})",
                expected="one msgpack map per record",
            ) from exc

    def read_record(self, shard_id: str, name: str, row: int) -> dict[str, Any]:
        """Record ``row`` of a record block, decoded (ndarray maps become numpy arrays)."""
        block = self._open_records(shard_id, name)
        if not 0 <= row < block.spec.num_rows:
            raise IndexError(
                f"{self.access.describe(block.msgpack_rel)}: record {row} outside 0:{block.spec.num_rows}"
            )
        start, stop = int(block.offsets[row]), int(block.offsets[row + 1])
        data = self._record_bytes(block, start, stop - start)
        if len(data) != stop - start:
            raise CorruptRecordError(
                f"short read: got {len(data)} of {stop - start} bytes of record {row}",
                path=self.access.describe(block.msgpack_rel),
                expected="a file as long as its offsets say",
            )
        return self._decode(block, row, data)

    def iter_records(
        self,
        shard_id: str,
        name: str,
        start: int = 0,
        stop: int | None = None,
        *,
        max_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(row, record)`` for rows ``start:stop``, read in bounded contiguous batches."""
        block = self._open_records(shard_id, name)
        stop = block.spec.num_rows if stop is None else stop
        if not 0 <= start <= stop <= block.spec.num_rows:
            raise IndexError(
                f"{self.access.describe(block.msgpack_rel)}: records {start}:{stop} "
                f"outside 0:{block.spec.num_rows}"
            )
        offsets: list[int] = block.offsets[start : stop + 1].tolist()
        row = start
        while row < stop:
            end = row + 1
            limit = offsets[row - start] + max_bytes
            while end < stop and offsets[end + 1 - start] <= limit:
                end += 1
            base = offsets[row - start]
            length = offsets[end - start] - base
            data = self._record_bytes(block, base, length)
            if len(data) != length:
                raise CorruptRecordError(
                    f"short read at records {row}:{end}",
                    path=self.access.describe(block.msgpack_rel),
                    expected="a file as long as its offsets say",
                )
            try:
                yield from enumerate(
                    decode_records(data, offsets[row - start : end - start + 1]), start=row
                )
            except RecordDecodeError as exc:
                bad = row + (exc.index or 0)
                raise CorruptRecordError(
                    str(exc),
                    path=self.access.describe(block.msgpack_rel),
                    location=f"record {bad} (bytes {int(block.offsets[bad])}:{int(block.offsets[bad + 1])})",
                    expected="one msgpack map per record",
                ) from exc
            row = end

    def read_vin_points(self, shard_id: str, row: int) -> np.ndarray:
        """The ``points`` float32 ``[n, 3]`` array of a ``vin_points`` record."""
        record = self.read_record(shard_id, "vin_points", row)
        return self._vin_points_from(record, shard_id, row)

    def _vin_points_from(self, record: Mapping[str, Any], shard_id: str, row: int) -> np.ndarray:
        points = record.get("points")
        if (
            not isinstance(points, np.ndarray)
            or points.dtype != np.float32
            or points.ndim != 2
            or points.shape[1] != 3
        ):
            described = (
                f"{points.dtype.name} {list(points.shape)}"
                if isinstance(points, np.ndarray)
                else type(points).__name__
            )
            raise CorruptRecordError(
                f"vin_points record has points {described}",
                path=self.access.describe(record_paths(shard_id, "vin_points")[0]),
                location=f"record {row}",
                expected='{"points": ndarray float32 [n, 3]}',
            )
        return points

    def iter_vin_points(
        self, shard_id: str, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(row, points)`` over a shard's ``vin_points`` records, streamed in batches."""
        for row, record in self.iter_records(shard_id, "vin_points", start, stop):
            yield row, self._vin_points_from(record, shard_id, row)
