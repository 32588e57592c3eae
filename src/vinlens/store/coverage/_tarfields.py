"""The tar header layout and the decoding of its fields, one header or a buffer at a time.

The NumPy decoders handle the usual layouts (``%011o`` sizes, ``%06o``/``%07o`` checksums)
for a whole buffer of 512-byte blocks; anything else falls back to :func:`parse_number`,
which decodes a field as ``tarfile.nti`` does.
"""

from __future__ import annotations

import struct

import numpy as np

BLOCK = 512
# name(100) skip(24) size(12) skip(12) chksum(8) typeflag(1) skip(100) magic+version(8)
# skip(80) prefix(155)
HEADER = struct.Struct("100s24x12s12x8sc100x8s80x155s")
USTAR_MAGIC = b"ustar\x0000"
ZERO_BLOCK = bytes(BLOCK)
ZERO_CHKSUM = bytes(8)

EXTENDED_TYPES = frozenset((b"x", b"X", b"g", b"L", b"K"))
# Types that never carry data blocks, whatever their size field says (tarfile agrees).
NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))
# tarfile's REGULAR_TYPES: what WebDataset (``TarInfo.isreg()``) treats as a file.
REGULAR_TYPES = frozenset((b"0", b"\x00", b"7", b"S"))
REGULAR_TYPE_LUT = np.zeros(256, dtype=bool)
REGULAR_TYPE_LUT[[0x30, 0x00, 0x37, 0x53]] = True
# Headers the batched walk leaves to the one-at-a-time path.
SPECIAL_TYPE_LUT = np.zeros(256, dtype=bool)
SPECIAL_TYPE_LUT[[ord(c) for c in "xXgLKS"]] = True
_OCTAL_WEIGHTS = 8.0 ** np.arange(11, -1, -1)
USTAR_MAGIC_CODES = np.frombuffer(b"ustar\x0000", dtype=np.uint8)


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def round_up(size: int) -> int:
    return (size + (BLOCK - 1)) & ~(BLOCK - 1)


def parse_pax_records(data: bytes) -> dict[str, bytes]:
    """The ``key=value`` records of a pax header payload; ``ValueError`` names a bad one."""
    records: dict[str, bytes] = {}
    pos = 0
    end = len(data)
    while pos < end:
        space = data.find(b" ", pos, min(end, pos + 21))
        if space < 0:
            if not data[pos:].strip(b"\x00"):
                break
            raise ValueError(f"malformed pax record at payload byte {pos}")
        length_text = data[pos:space]
        if not length_text.isdigit() or int(length_text) <= space - pos + 1:
            raise ValueError(f"invalid pax record length {length_text!r} at payload byte {pos}")
        record_end = pos + int(length_text)
        if record_end > end or data[record_end - 1] != 0x0A:
            raise ValueError(
                f"pax record at payload byte {pos} overruns its header or lacks a newline"
            )
        key, eq, value = data[space + 1 : record_end - 1].partition(b"=")
        if not eq:
            raise ValueError(f"pax record without '=' at payload byte {pos}")
        records[decode(key)] = value
        pos = record_end
    return records


def parse_number(field: bytes) -> int:
    """Decode a numeric header field like ``tarfile.nti``: octal text or GNU base-256."""
    if field and field[0] & 0x80:
        if field[0] not in (0x80, 0xFF):
            raise ValueError(f"invalid base-256 field {field!r}")
        value = int.from_bytes(field[1:], "big")
        if field[0] == 0xFF:
            value -= 256 ** (len(field) - 1)
        return value
    text = field.partition(b"\x00")[0].strip()
    if not text:
        return 0
    if text.translate(None, b"01234567"):
        raise ValueError(f"invalid octal field {field!r}")
    return int(text, 8)


def header_checksums(block: bytes) -> tuple[int, int]:
    """Unsigned and signed checksums of one header with its checksum field as spaces."""
    unsigned = sum(block[:148]) + 256 + sum(block[156:512])
    signed = unsigned - 256 * sum(1 for c in block[:148] + block[156:512] if c > 127)
    return unsigned, signed


def _octal_digits(fields: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Value of the first ``count`` characters of each row as octal, and where they all are digits."""
    digits = fields[:, :count] - np.uint8(0x30)  # wraps below '0' to large values
    valid = np.asarray((digits < 8).all(axis=1), dtype=bool)
    values = np.asarray(digits.astype(np.float64) @ _OCTAL_WEIGHTS[-count:]).astype(np.int64)
    return values, valid


def _is_terminator(column: np.ndarray) -> np.ndarray:
    return np.asarray((column == 0) | (column == 0x20), dtype=bool)


def size_fields(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sizes of (n, 12) size fields in the usual ``%011o`` + NUL/space layout, and where that holds."""
    values, valid = _octal_digits(fields, 11)
    return values, valid & _is_terminator(fields[:, 11])


def checksum_fields(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stored checksums in the ``%06o\\0 `` or ``%07o\\0`` layouts, and where one holds."""
    six, six_digits = _octal_digits(fields, 6)
    six_ok = six_digits & (
        (fields[:, 6] == 0) | ((fields[:, 6] == 0x20) & _is_terminator(fields[:, 7]))
    )
    seven_digit = fields[:, 6] - np.uint8(0x30)
    seven_ok = six_digits & (seven_digit < 8) & _is_terminator(fields[:, 7])
    seven = six * 8 + seven_digit.astype(np.int64)
    return np.where(six_ok, six, seven), six_ok | seven_ok


def byte_sums(blocks: np.ndarray) -> np.ndarray:
    """Sum of the bytes of each contiguous (n, 512) row, eight bytes at a time (SWAR)."""
    words = blocks.view(np.uint64)
    mask = np.uint64(0x00FF00FF00FF00FF)
    lanes = ((words & mask) + ((words >> np.uint64(8)) & mask)).sum(axis=1, dtype=np.uint64)
    # Four 16-bit lanes, each at most 64 * 510 < 65536: no carries between lanes.
    lane = np.uint64(0xFFFF)
    total = (
        (lanes & lane)
        + ((lanes >> np.uint64(16)) & lane)
        + ((lanes >> np.uint64(32)) & lane)
        + (lanes >> np.uint64(48))
    )
    return np.asarray(total, dtype=np.int64)
