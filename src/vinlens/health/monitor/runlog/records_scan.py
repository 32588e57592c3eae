"""Reading a segment's records past damage: what was skipped, and where.

A record that fails its checksum (or whose header is not a record header) with whole
records after it was damaged after it was written: one flipped bit must not end the
segment there and drop everything after it. The scan skips to the next whole record, by
the damaged header's length when that lands on a whole record, else by the next magic
that starts one (a false resync needs a CRC-32 match on bytes the writer did not frame),
and reports the bytes skipped. What is not whole at the end of a rank's last segment is a
torn tail (a writer killed mid-write, or a write a reader sees before it ends): left for
the next read. At the end of a segment that another segment follows (a closed one), bytes
that could be the start of a record cut short are the torn tail of a writer that was
killed; anything else there is damage too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vinlens.health.monitor.runlog.format import (
    _HEADER,
    HEADER_SIZE,
    KIND_NAMES,
    MAGIC,
    iter_records,
)

__all__ = ["DAMAGED", "RunDamage", "Scan", "damaged_kind", "scan_segment"]

#: The kind of a :class:`Scan` item that is damage: ``(DAMAGED, offset, end)``.
DAMAGED = -1


@dataclass(frozen=True)
class RunDamage:
    """Bytes of a run log segment that fail their checksum, skipped by the reader.

    Attributes:
        rank: The rank whose segment it is.
        segment: The segment's path.
        offset: Where the damaged bytes start (a byte offset into the segment).
        length: How many bytes were skipped.
        record: The kind of the damaged record as its header reads (``"steps"``,
            ``"sampled steps"``, ``"event"``, ``"metadata"``, ...), ``"unknown"`` when the
            header itself is damaged.
        steps: The steps missing from the every-step series because of it (empty when the
            damaged bytes held no steps), None while no later step was read to bound it.
    """

    rank: int
    segment: str
    offset: int
    length: int
    record: str
    steps: range | None

    def describe(self) -> str:
        """One line: where, how much, and which steps are missing."""
        if self.steps is None:
            lost = "the steps missing are not known (no later step was read)"
        elif len(self.steps):
            lost = f"steps {self.steps.start}..{self.steps.stop - 1} missing"
        else:
            lost = "no step missing"
        return (
            f"rank {self.rank}: {self.segment} bytes {self.offset}..{self.offset + self.length}"
            f" ({self.record} record) fail their checksum and were skipped; {lost}"
        )


@dataclass(frozen=True)
class Scan:
    """What one pass over a segment found, in segment order: whole records
    ``(kind, payload, end)`` and damaged stretches ``(DAMAGED, offset, end)``; and where
    the next pass starts."""

    items: list[tuple[int, int, int]]
    read: int


def _whole_at(data: Any, offset: int) -> bool:
    return next(iter_records(data, offset), None) is not None


def damaged_kind(data: Any, offset: int) -> str:
    """The kind of the damaged record at ``offset`` as its header reads, or ``"unknown"``."""
    if offset + HEADER_SIZE <= len(data):
        magic, kind, _, _ = _HEADER.unpack_from(data, offset)
        if magic == MAGIC:
            return KIND_NAMES.get(kind, "unknown")
    return "unknown"


def _next_whole(data: Any, offset: int) -> int | None:
    """The offset of the first whole record after a damaged one at ``offset``."""
    size = len(data)
    if offset + HEADER_SIZE <= size:
        magic, _, length, _ = _HEADER.unpack_from(data, offset)
        end = offset + HEADER_SIZE + length
        if magic == MAGIC and end < size and _whole_at(data, end):
            return int(end)
    position = offset + 1
    while True:
        position = data.find(MAGIC, position)
        if position < 0:
            return None
        if _whole_at(data, position):
            return int(position)
        position += 1


def _torn(data: Any, offset: int) -> bool:
    """Whether the bytes from ``offset`` to the end are a record cut short (a prefix of one
    whose header is as written): what a writer killed mid-write leaves."""
    rest = bytes(data[offset : offset + HEADER_SIZE])
    if not MAGIC.startswith(rest[: len(MAGIC)]):
        return False
    if len(rest) < HEADER_SIZE:
        return True
    _, _, length, _ = _HEADER.unpack_from(rest)
    return bool(offset + HEADER_SIZE + length > len(data))


def scan_segment(data: Any, start: int, *, closed: bool) -> Scan:
    """The records of ``data`` from ``start``, skipping damage (see the module's text);
    ``closed``: another segment of the rank follows this one."""
    items: list[tuple[int, int, int]] = []
    offset = start
    size = len(data)
    while offset < size:
        for record in iter_records(data, offset):
            items.append(record)
            offset = record[2]
        if offset >= size:
            break
        resume = _next_whole(data, offset)
        if resume is None:
            if closed and not _torn(data, offset):
                items.append((DAMAGED, offset, size))
                offset = size
            break
        items.append((DAMAGED, offset, resume))
        offset = resume
    return Scan(items, offset)
