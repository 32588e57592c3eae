"""Records of a run log: length-prefixed, checksummed, in append-only segments.

A segment is a sequence of records. Each record is a 16-byte header (magic ``VLR1``, a
kind byte, three zero bytes, the payload length and the CRC-32 of kind and payload, all
little-endian) followed by its payload. A record is whole when the header is whole, the
magic matches, the payload is all there and its checksum agrees. A record that is not
whole at the end of a rank's last segment is a torn tail (a writer killed mid-write, or a
write not finished yet); one with whole records after it is damage, which the reader skips
and reports (:mod:`~vinlens.health.monitor.runlog.records_scan`).

A :data:`SAMPLES` record (the sampled steps of one flush) is the exception to "CRC of the
whole payload": its CRC covers its index (counts, steps and one checksum per field), and
each field's values carry their own 64-bit additive checksum, verified when that field is
read. So a reader opens a run, and reads one field of it, without touching the bytes of
the other fields (see :func:`sample_index`).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from vinlens.health.gradient import GradientOrigin
from vinlens.health.origin import NonFiniteOrigin
from vinlens.health.summaries import TensorTrace
from vinlens.model_inspection import TensorSummary

__all__ = [
    "EVENT",
    "FINGERPRINTS",
    "KIND_NAMES",
    "META",
    "ORDER",
    "RUN",
    "SAMPLE",
    "SAMPLES",
    "STEPS",
    "decode_json",
    "encode_json",
    "encode_record",
    "encode_samples",
    "field_checksum",
    "iter_records",
    "sample_index",
]

MAGIC = b"VLR1"
_HEADER = struct.Struct("<4sB3xII")
HEADER_SIZE = _HEADER.size

#: Run metadata (JSON): module paths, fields, ``every``, versions, rank, world size.
META = 1
#: Every-step series (a batch): count, then int64 steps, float64 grad norms and losses.
STEPS = 2
#: One sampled step: int64 step, then float64 ``(fields, modules)``, field-major (read;
#: written by the first format only, superseded by :data:`SAMPLES`).
SAMPLE = 3
#: One :class:`~vinlens.health.NonFiniteEvent` (JSON).
EVENT = 4
#: The sampled steps of one flush: uint32 ``n``, ``fields``, ``modules`` and a zero word,
#: int64 steps (``n``), uint64 checksums (one per field, see :func:`field_checksum`),
#: then float64 values ``(fields, n, modules)``: each field's ``n x modules`` block is
#: contiguous. The header's CRC covers the payload up to the values.
SAMPLES = 5
#: Every-step fingerprints of a batch of steps: inputs, weight and gradient norms per module
#: (see :mod:`~vinlens.health.monitor.runlog.fingerprints`).
FINGERPRINTS = 6
#: The order of a sampled step's module outputs and parameter gradients (JSON).
ORDER = 7
#: The run identity (JSON: ``run_id``, ``paths_digest``), first in every segment a writer
#: starts, so each segment names its run even when it holds no metadata record.
RUN = 10
#: A name per record kind, for messages.
KIND_NAMES = {
    META: "metadata",
    STEPS: "steps",
    SAMPLE: "sampled step",
    EVENT: "event",
    SAMPLES: "sampled steps",
    FINGERPRINTS: "fingerprints",
    ORDER: "output and gradient order",
    RUN: "run identity",
}
_SAMPLES_HEAD = struct.Struct("<IIII")


def field_checksum(values: np.ndarray[Any, Any]) -> int:
    """The sum, modulo 2**64, of a float64 block's little-endian 64-bit words."""
    words = np.ascontiguousarray(values, dtype="<f8").view("<u8")
    return int(words.sum(dtype=np.uint64))


def encode_samples(steps: list[int], blocks: list[np.ndarray[Any, Any]]) -> bytes:
    """A :data:`SAMPLES` record of ``blocks`` (each ``(modules, fields)``) at ``steps``."""
    values = np.ascontiguousarray(np.stack(blocks).transpose(2, 0, 1), dtype="<f8")
    fields, n, modules = values.shape
    sums = np.array([field_checksum(v) for v in values], dtype="<u8")
    head = _SAMPLES_HEAD.pack(n, fields, modules, 0) + np.asarray(steps, "<i8").tobytes()
    index = head + sums.tobytes()
    crc = zlib.crc32(index, zlib.crc32(bytes((SAMPLES,))))
    header = _HEADER.pack(MAGIC, SAMPLES, len(index) + values.nbytes, crc)
    return header + index + values.tobytes()


def sample_index(data: bytes | memoryview | Any, offset: int) -> tuple[int, int, int, int]:
    """``(n, fields, modules, values_offset)`` of the :data:`SAMPLES` payload at ``offset``:
    the steps are ``n`` int64 at ``offset + 16``, the checksums ``fields`` uint64 after
    them; the CRC-covered index ends at ``values_offset``."""
    n, fields, modules, _ = _SAMPLES_HEAD.unpack_from(data, offset)
    return n, fields, modules, offset + _SAMPLES_HEAD.size + 8 * n + 8 * fields


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
        covered = end
        if kind == SAMPLES:
            if length < _SAMPLES_HEAD.size:
                return
            n, fields, modules, covered = sample_index(data, payload)
            if covered + 8 * fields * n * modules != end:
                return
        if zlib.crc32(data[payload:covered], zlib.crc32(bytes((kind,)))) != crc:
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
