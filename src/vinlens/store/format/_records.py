"""Msgpack encoding of record-block rows, with the spec's ndarray maps and safe, bounded decoding.

A record is one msgpack map. An ndarray inside it is the map
``{"dtype": "<numpy name>", "shape": [...], "data": <bin, C order, little endian>}``.
Decoding never executes or unpickles anything: no extension types (timestamps included),
only numeric dtypes, every size bounded by the bytes actually given, and a byte count
that must match ``shape`` and ``dtype`` exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack
import numpy as np

from vinlens.store.errors import RecordDecodeError
from vinlens.store.format._contract import NUMERIC_DTYPES

__all__ = [
    "RecordDecodeError",
    "decode_ndarray",
    "decode_record",
    "decode_records",
    "encode_ndarray",
    "encode_record",
]


def encode_ndarray(array: np.ndarray) -> dict[str, Any]:
    """The spec's ndarray map for a numeric array (bytes little endian, C order)."""
    arr = np.asarray(array)
    name = arr.dtype.name
    if name not in NUMERIC_DTYPES:
        raise ValueError(
            f"cannot store dtype {arr.dtype} in a record; expected one of {sorted(NUMERIC_DTYPES)}"
        )
    little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {
        "dtype": name,
        "shape": [int(n) for n in arr.shape],
        "data": np.ascontiguousarray(little).tobytes(),
    }


def _encode_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return encode_ndarray(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"record keys must be strings, found {key!r}")
            out[key] = _encode_value(item)
        return out
    if isinstance(value, list | tuple):
        return [_encode_value(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    raise ValueError(f"cannot store a {type(value).__name__} in a msgpack record")


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One record (a map with string keys; ndarrays become ndarray maps) as msgpack bytes."""
    payload = _encode_value(record)
    packed: bytes = msgpack.packb(payload, use_bin_type=True, strict_types=False)
    return packed


def _refuse_ext(code: int, data: bytes) -> Any:
    raise RecordDecodeError(f"msgpack extension type {code} is not allowed in v1 records")


# name -> (little-endian dtype as stored, native dtype to convert to on big-endian hosts)
_WIRE_DTYPES: dict[str, tuple[np.dtype[Any], np.dtype[Any] | None]] = {
    name: (
        np.dtype(name).newbyteorder("<"),
        None if np.dtype(name).newbyteorder("<") == np.dtype(name) else np.dtype(name),
    )
    for name in NUMERIC_DTYPES
}


def decode_ndarray(obj: Mapping[str, Any]) -> np.ndarray:
    """The array encoded by an ndarray map; validates dtype, shape and byte count."""
    dtype_name = obj.get("dtype")
    shape = obj.get("shape")
    data = obj.get("data")
    dtypes = _WIRE_DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtypes is None:
        raise RecordDecodeError(
            f"ndarray dtype {dtype_name!r} is not allowed; expected one of {sorted(NUMERIC_DTYPES)}"
        )
    wire, native = dtypes
    count = 1
    if type(shape) is not list:
        raise RecordDecodeError(f"ndarray shape {shape!r} is not a list of non-negative integers")
    for n in shape:
        if type(n) is not int or n < 0:
            raise RecordDecodeError(
                f"ndarray shape {shape!r} is not a list of non-negative integers"
            )
        count *= n
    if type(data) is not bytes:
        raise RecordDecodeError(f"ndarray data is a {type(data).__name__}, expected msgpack bin")
    if count * wire.itemsize != len(data):
        raise RecordDecodeError(
            f"ndarray data has {len(data)} bytes but dtype {dtype_name} and shape {shape} "
            f"need {count * wire.itemsize}"
        )
    try:
        array = np.frombuffer(data, dtype=wire).reshape(shape)
    except ValueError as exc:
        # Zero elements in an extent numpy cannot address ([2**62, 2**62, 0]), or too many
        # dimensions: a declared shape no array can have.
        raise RecordDecodeError(
            f"ndarray shape {shape} is not a valid array shape ({exc})"
        ) from exc
    return array if native is None else array.astype(native)


_SCALARS = (type(None), bool, int, float, str, bytes)


def _decode_value(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        if _is_ndarray_map(value):
            return decode_ndarray(value)
        return {key: _decode_value(item) for key, item in value.items()}
    if kind is list:
        return [_decode_value(item) for item in value]
    if kind in _SCALARS:
        return value
    raise RecordDecodeError(f"msgpack value of type {kind.__name__} is not allowed")


def _is_ndarray_map(value: Any) -> bool:
    return (
        type(value) is dict
        and len(value) == 3
        and type(value.get("data")) is bytes
        and "dtype" in value
        and "shape" in value
    )


def _decode_map(obj: Any) -> dict[str, Any]:
    if type(obj) is not dict:
        raise RecordDecodeError(f"record is a msgpack {type(obj).__name__}, expected a map")
    return {
        key: decode_ndarray(value) if _is_ndarray_map(value) else _decode_value(value)
        for key, value in obj.items()
    }


# ---- fast path for the common record shape --------------------------------------------
# A map of ndarray maps exactly as :func:`encode_record` writes them (fixstr keys; each
# value ``{"dtype", "shape", "data"}`` in that order, shape of non-negative ints, bin data)
# is decoded by walking its headers, with every array a zero-copy view into the batch's
# buffer. Anything else (other layouts, other values, any doubt) returns ``None`` and is
# decoded by the bounded msgpack Unpacker, so both paths give the same records and the
# same errors.

_NDARRAY_DTYPE_KEY = b"\x83\xa5dtype"
_NDARRAY_SHAPE_KEY = b"\xa5shape"
_NDARRAY_DATA_KEY = b"\xa4data"
_UINT_SIZES = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_BIN_SIZES = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_DTYPE_BY_NAME_BYTES = {name.encode("ascii"): name for name in _WIRE_DTYPES}


class _Template(NamedTuple):
    """Header bytes shared by consecutive one-array records (map head through shape head)."""

    head: bytes
    key: str
    wire: np.dtype[Any]
    native: np.dtype[Any] | None
    dims: int


def _fixstr_end(data: bytes, pos: int, stop: int) -> int:
    """End of the fixstr at ``pos`` (-1 when there is none inside ``stop``)."""
    if pos >= stop or not 0xA0 <= data[pos] <= 0xBF:
        return -1
    end = pos + 1 + (data[pos] - 0xA0)
    return end if end <= stop else -1


def _array_tail(
    data: bytes,
    pos: int,
    stop: int,
    dims: int,
    wire: np.dtype[Any],
    native: np.dtype[Any] | None,
) -> tuple[np.ndarray, int] | None:
    """The shape's ``dims`` ints, then ``"data"`` and its bin; the array and the end position."""
    shape: list[int] = []
    count = 1
    for _ in range(dims):
        if pos >= stop:
            return None
        code = data[pos]
        if code <= 0x7F:
            value = code
            pos += 1
        else:
            size = _UINT_SIZES.get(code)
            if size is None or pos + 1 + size > stop:
                return None
            value = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
            pos += 1 + size
        shape.append(value)
        count *= value
    if not data.startswith(_NDARRAY_DATA_KEY, pos):
        return None
    pos += len(_NDARRAY_DATA_KEY)
    if pos >= stop:
        return None
    size = _BIN_SIZES.get(data[pos])
    if size is None or pos + 1 + size > stop:
        return None
    length = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
    pos += 1 + size
    if pos + length > stop or count * wire.itemsize != length:
        return None
    # A read-only view of the batch's bytes (one constructor call; cheaper than frombuffer).
    try:
        array = np.ndarray(tuple(shape), wire, data, pos)
    except ValueError:
        return None  # an impossible shape: the checked path names the error

    return (array if native is None else array.astype(native)), pos + length


def _fast_with_template(
    data: bytes, pos: int, stop: int, template: _Template
) -> dict[str, Any] | None:
    """A one-array record whose header bytes equal the previous record's, or ``None``."""
    if not data.startswith(template.head, pos):
        return None
    tail = _array_tail(
        data, pos + len(template.head), stop, template.dims, template.wire, template.native
    )
    if tail is None or tail[1] != stop:
        return None
    return {template.key: tail[0]}


def _fast_ndarray_record(
    data: bytes, pos: int, stop: int
) -> tuple[dict[str, Any], _Template | None] | None:
    """``data[pos:stop]`` as a map of ndarray maps, or ``None`` if it is not exactly that.

    Also returns the header template of a one-array record, for its successors.
    """
    if stop > len(data) or pos >= stop:
        return None
    head = data[pos]
    if not 0x81 <= head <= 0x8F:
        return None
    entries = head - 0x80
    begin = pos
    pos += 1
    out: dict[str, Any] = {}
    template: _Template | None = None
    for _ in range(entries):
        key_end = _fixstr_end(data, pos, stop)
        if key_end < 0:
            return None
        try:
            key = data[pos + 1 : key_end].decode("utf-8")
        except UnicodeDecodeError:
            return None
        if key in out:
            return None
        pos = key_end
        if not data.startswith(_NDARRAY_DTYPE_KEY, pos):
            return None
        pos += len(_NDARRAY_DTYPE_KEY)
        name_end = _fixstr_end(data, pos, stop)
        if name_end < 0:
            return None
        dtype_name = _DTYPE_BY_NAME_BYTES.get(data[pos + 1 : name_end])
        if dtype_name is None:
            return None
        pos = name_end
        if not data.startswith(_NDARRAY_SHAPE_KEY, pos):
            return None
        pos += len(_NDARRAY_SHAPE_KEY)
        if pos >= stop or not 0x90 <= data[pos] <= 0x9F:
            return None
        dims = data[pos] - 0x90
        pos += 1
        wire, native = _WIRE_DTYPES[dtype_name]
        if entries == 1:
            template = _Template(data[begin:pos], key, wire, native, dims)
        tail = _array_tail(data, pos, stop, dims, wire, native)
        if tail is None:
            return None
        out[key], pos = tail
    return (out, template) if pos == stop else None


def decode_records(data: bytes, bounds: Sequence[int]) -> Iterator[dict[str, Any]]:
    """Decode consecutive records; record ``i`` must be exactly ``data[bounds[i]:bounds[i + 1]]``.

    One bounded :class:`msgpack.Unpacker` walks the batch (every length limit is the
    largest record's size, the buffer limit the batch size, no extension types), and
    after each map its position must equal the next bound, so a record that is not
    exactly one map is caught just as by :func:`decode_record`. On any problem the
    offending record is decoded alone with :func:`decode_record` for a precise message
    (``RecordDecodeError`` carries ``.index``, the position within ``bounds``).
    """
    if len(bounds) < 2:
        return
    if isinstance(data, bytes):
        first = yield from _decode_common_shape(data, bounds)
        if first == len(bounds) - 1:
            return
        if first:
            try:
                yield from decode_records(data[bounds[first] - bounds[0] :], bounds[first:])
            except RecordDecodeError as exc:
                exc.index = first + (exc.index or 0)
                raise
            return
    yield from _decode_unpacked(data, bounds)


def _decode_common_shape(
    data: bytes, bounds: Sequence[int]
) -> Generator[dict[str, Any], None, int]:
    """Records of the common shape, straight from the buffer; returns how many were decoded.

    Stops at the first record that is not of that shape: it and all after it go through
    the bounded msgpack Unpacker.
    """
    base = bounds[0]
    first = 0
    template: _Template | None = None
    # Every byte before the payload of the last one-array record, and its payload size:
    # a record of the same length starting with those bytes has the same key, dtype
    # and shape, and its payload fills the rest (fixed-size records: one compare).
    header = b""
    payload = -1
    shape: tuple[int, ...] = ()
    while first < len(bounds) - 1:
        pos, stop = bounds[first] - base, bounds[first + 1] - base
        if (
            template is not None
            and stop - pos == len(header) + payload
            and data.startswith(header, pos)
        ):
            array = np.ndarray(shape, template.wire, data, pos + len(header))
            native = template.native
            yield {template.key: array if native is None else array.astype(native)}
            first += 1
            continue
        record = _fast_with_template(data, pos, stop, template) if template is not None else None
        if record is None:
            found = _fast_ndarray_record(data, pos, stop)
            if found is None:
                break
            record, template = found
        if template is not None:
            array = record[template.key]
            payload = array.size * template.wire.itemsize
            header = data[pos : stop - payload]
            shape = array.shape
        yield record
        first += 1
    return first


def _decode_unpacked(data: bytes, bounds: Sequence[int]) -> Iterator[dict[str, Any]]:
    """Records through one bounded Unpacker; a record that is not exactly one map is refused."""
    base = bounds[0]
    largest = max(b - a for a, b in itertools.pairwise(bounds))
    unpacker = msgpack.Unpacker(
        None,
        raw=False,
        use_list=True,
        strict_map_key=True,
        ext_hook=_refuse_ext,
        max_buffer_size=max(len(data), 1),
        max_str_len=largest,
        max_bin_len=largest,
        max_array_len=largest,
        max_map_len=largest,
        max_ext_len=0,
    )
    unpacker.feed(data)
    unpack, tell = unpacker.unpack, unpacker.tell
    for i in range(len(bounds) - 1):
        stop = bounds[i + 1] - base
        try:
            obj = unpack()
            ok = tell() == stop
        except Exception:
            ok = False
        if not ok:
            _raise_for_record(data, bounds[i] - base, stop, i)
        try:
            yield _decode_map(obj)
        except RecordDecodeError as exc:
            exc.index = i
            raise


def _raise_for_record(data: bytes, start: int, stop: int, index: int) -> None:
    try:
        decode_record(memoryview(data)[start:stop])
    except RecordDecodeError as exc:
        exc.index = index
        raise
    error = RecordDecodeError("record bytes do not hold exactly one msgpack map")
    error.index = index
    raise error


def decode_record(data: bytes | memoryview) -> dict[str, Any]:
    """Decode exactly one msgpack map; ndarray maps become read-only numpy arrays.

    Every limit is the record's own length, so a forged length prefix inside a record
    cannot make the unpacker allocate more than the bytes it was handed.
    """
    size = len(data)
    try:
        # One C unpacker call; every length bounded by the record's own size, and
        # trailing bytes after the map raise ExtraData.
        obj = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            ext_hook=_refuse_ext,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=size,
            max_map_len=size,
            max_ext_len=0,
        )
    except RecordDecodeError:
        raise
    except msgpack.ExtraData as exc:
        raise RecordDecodeError("more than one msgpack value in the record's bytes") from exc
    except (ValueError, msgpack.OutOfData) as exc:
        if isinstance(exc, msgpack.OutOfData) or "incomplete" in str(exc).lower():
            raise RecordDecodeError(
                f"record is truncated ({size} bytes end inside a msgpack value)"
            ) from exc
        raise RecordDecodeError(f"not one msgpack record ({type(exc).__name__}: {exc})") from exc
    except (TypeError, msgpack.UnpackException) as exc:
        # FormatError, StackError, unhashable keys.
        raise RecordDecodeError(f"not one msgpack record ({type(exc).__name__}: {exc})") from exc
    return _decode_map(obj)
