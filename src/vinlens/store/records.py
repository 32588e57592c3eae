"""Old import path of the store's msgpack records: they live in :mod:`vinlens.store.format`.

Kept so that ``from vinlens.store.records import ...`` written against earlier releases
still works; new code imports from :mod:`vinlens.store.format`.
"""

from __future__ import annotations

from vinlens.store.errors import RecordDecodeError
from vinlens.store.format import (
    decode_ndarray,
    decode_record,
    decode_records,
    encode_ndarray,
    encode_record,
)

__all__ = [
    "RecordDecodeError",
    "decode_ndarray",
    "decode_record",
    "decode_records",
    "encode_ndarray",
    "encode_record",
]
