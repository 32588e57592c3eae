"""Records of a run log: length-prefixed, checksummed, in append-only segments.

A segment is a sequence of records. Each record is a 16-byte header (magic ``VLR1``, a
kind byte, three zero bytes, the payload length and the CRC-32 of kind and payload, all
little-endian) followed by its payload. A reader takes records while the header is whole,
the magic matches, the payload is all there and its checksum agrees; the first record
that fails any of these ends the segment (a torn tail from a killed writer, never data).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from collections.abc import Iterator
from typing import Any

from vinlens.health.gradient import GradientOrigin
from vinlens.health.origin import NonFiniteOrigin
from vinlens.health.summaries import TensorTrace
from vinlens.model_inspection import TensorSummary

__all__ = [
    "EVENT",
    "META",
    "SAMPLE",
    "STEPS",
    "decode_json",
    "encode_json",
    "encode_record",
    "iter_records",
]

MAGIC = b"VLR1"
_HEADER = struct.Struct("<4sB3xII")
HEADER_SIZE = _HEADER.size

#: Run metadata (JSON): module paths, fields, ``every``, versions, rank, world size.
META = 1
#: Every-step series (a batch): count, then int64 steps, float64 grad norms and losses.
STEPS = 2
#: One sampled step: int64 step, then float64 ``(fields, modules)``, field-major.
SAMPLE = 3
#: One :class:`~vinlens.health.NonFiniteEvent` (JSON).
EVENT = 4


def encode_record(kind: int, payload: bytes) -> bytes:
    """One whole record: header and payload."""
    crc = zlib.crc32(payload, zlib.crc32(bytes((kind,))))
    return _HEADER.pack(MAGIC, kind, len(payload), crc) + payload


def iter_records(data: bytes | memoryview, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """``(kind, payload_offset, end)`` of each whole record from ``start``; stops at the
    first torn or corrupt one (the caller resumes from the last ``end``)."""
    offset = start
    size = len(data)
    while offset + HEADER_SIZE <= size:
        magic, kind, length, crc = _HEADER.unpack_from(data, offset)
        payload = offset + HEADER_SIZE
        end = payload + length
        if magic != MAGIC or end > size:
            return
        if zlib.crc32(data[payload:end], zlib.crc32(bytes((kind,)))) != crc:
            return
        yield kind, payload, end
        offset = end


_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls for cls in (GradientOrigin, NonFiniteOrigin, TensorTrace, TensorSummary)
}


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__name__, **fields}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _typed(value: object) -> object:
    if isinstance(value, dict):
        name = value.get("__type__")
        cls = _TYPES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"run log record holds an unknown record type {name!r}")
        return cls(**{k: _typed(v) for k, v in value.items() if k != "__type__"})
    if isinstance(value, list):
        return tuple(_typed(v) for v in value)
    return value


def encode_json(value: dict[str, object]) -> bytes:
    """JSON of a mapping whose values may be the health records (NaN kept as ``NaN``)."""
    return json.dumps({k: _plain(v) for k, v in value.items()}).encode()


def decode_json(payload: bytes | memoryview) -> dict[str, Any]:
    """The mapping :func:`encode_json` wrote, records rebuilt as their classes."""
    raw = json.loads(bytes(payload))
    if not isinstance(raw, dict):
        raise ValueError("run log JSON record is not an object")
    return {k: _typed(v) if isinstance(v, dict) else v for k, v in raw.items()}
