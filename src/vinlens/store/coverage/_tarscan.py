"""Fast tar header scanner: list the members of a tar file without extracting anything.

Coverage over raw ASE WebDataset shards only needs member *names*, and a raw dataset
holds hundreds of tars with thousands of members each. ``tarfile`` builds a ``TarInfo``
per member (about 66k members/s here); GNU ``tar -tf`` manages about 1M/s. This module
reads headers in large batches with ``os.pread`` into one buffer, decodes the few fields
it needs with one precompiled :class:`struct.Struct` call per header, jumps over member
data (rounded up to 512 bytes) without reading it, and verifies all header checksums of a
buffer at once with NumPy. The result matches ``tarfile``'s member list, name for name.

Formats: v7, ustar (``prefix`` + ``name``), GNU (``L`` long names, ``K`` long link names,
``S`` old sparse files with extension blocks, base-256 sizes) and pax (``x``/``X`` per-file
and ``g`` global headers; ``path``, ``size`` and ``GNU.sparse.name`` records).

Hostile input: an extended header (pax or GNU long name) larger than
``max_extended_header_bytes`` is refused *before* anything is allocated for it, a header
with a bad checksum or an unparsable number, a malformed pax record, member data that runs
past the end of the file and a file that ends without the end-of-archive marker each raise
a :class:`TarScanError` subclass naming the tar file and the byte offset of the header.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import numpy as np

from vinlens.store.access import open_regular_fd
from vinlens.store.errors import (
    TarExtendedHeaderTooLargeError,
    TarHeaderChecksumError,
    TarHeaderFormatError,
    TarScanError,
    TruncatedTarError,
)

__all__ = [
    "DEFAULT_MAX_EXTENDED_HEADER_BYTES",
    "TarExtendedHeaderTooLargeError",
    "TarHeaderChecksumError",
    "TarHeaderFormatError",
    "TarMemberHeader",
    "TarScanError",
    "TruncatedTarError",
    "list_tar_member_names",
    "scan_tar_headers",
]

BLOCK = 512
#: Largest pax / GNU long-name payload accepted. PATH_MAX is 4 KiB; pax headers with
#: extended attributes can be larger, but nothing legitimate comes near a mebibyte.
DEFAULT_MAX_EXTENDED_HEADER_BYTES = 1 << 20
#: Most GNU sparse extension blocks followed before a header is declared hostile.
_MAX_SPARSE_EXTENSION_BLOCKS = 4096

_BIG_READ = 1 << 20
_SMALL_READ = 16 << 10
_DENSE_BUFFER_HEADERS = 8
# Runs of plain headers up to this length are decoded in Python, longer ones with NumPy.
_SHORT_RUN = 40

# name(100) skip(24) size(12) skip(12) chksum(8) typeflag(1) skip(100) magic+version(8)
# skip(80) prefix(155)
_HEADER = struct.Struct("100s24x12s12x8sc100x8s80x155s")
_USTAR_MAGIC = b"ustar\x0000"
_ZERO_BLOCK = bytes(BLOCK)
_ZERO_CHKSUM = bytes(8)

_EXTENDED_TYPES = frozenset((b"x", b"X", b"g", b"L", b"K"))
# Types that never carry data blocks, whatever their size field says (tarfile agrees).
_NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))
# tarfile's REGULAR_TYPES: what WebDataset (``TarInfo.isreg()``) treats as a file.
_REGULAR_TYPES = frozenset((b"0", b"\x00", b"7", b"S"))
_REGULAR_TYPE_LUT = np.zeros(256, dtype=bool)
_REGULAR_TYPE_LUT[[0x30, 0x00, 0x37, 0x53]] = True
# Headers the batched walk leaves to the one-at-a-time path.
_SPECIAL_TYPE_LUT = np.zeros(256, dtype=bool)
_SPECIAL_TYPE_LUT[[ord(c) for c in "xXgLKS"]] = True
_OCTAL_WEIGHTS = 8.0 ** np.arange(11, -1, -1)
_USTAR_MAGIC_CODES = np.frombuffer(b"ustar\x0000", dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class TarMemberHeader:
    """One archive member as its headers describe it.

    ``size`` is the number of data bytes stored in the archive (for GNU sparse files the
    stored size, not the expanded one); ``typeflag`` is the POSIX type character with the
    old ``"\\0"`` regular-file flag reported as ``"0"``.
    """

    name: str
    typeflag: str
    size: int
    header_offset: int
    data_offset: int

    @property
    def is_regular(self) -> bool:
        """True for regular files, as ``TarInfo.isreg()`` decides."""
        return self.typeflag in ("0", "7", "S")


TarSource = str | os.PathLike[str] | IO[bytes]


def scan_tar_headers(
    source: TarSource,
    *,
    name: str | None = None,
    max_extended_header_bytes: int = DEFAULT_MAX_EXTENDED_HEADER_BYTES,
) -> list[TarMemberHeader]:
    """Return every member of a tar in archive order, reading headers only.

    ``source`` is a path or a seekable binary file object (e.g. from
    :meth:`vinlens.store.access.StoreAccess.open_binary`, left open); ``name`` is what
    errors call it (default: the path, or the file object's ``name``).
    """
    scan = _Scan(
        _source_name(source, name), max_extended_header_bytes, regular_only=False, detailed=True
    )
    scan.run(source)
    return [
        TarMemberHeader(name, typ, size, hoff, doff)
        for name, typ, size, hoff, doff in zip(
            scan.names, scan.types, scan.sizes, scan.header_offsets, scan.data_offsets, strict=True
        )
    ]


def list_tar_member_names(
    source: TarSource,
    *,
    name: str | None = None,
    regular_only: bool = False,
    max_extended_header_bytes: int = DEFAULT_MAX_EXTENDED_HEADER_BYTES,
) -> list[str]:
    """Return member names in archive order, as ``tarfile.TarFile.getnames()`` would.

    ``regular_only`` keeps regular files only (what a WebDataset reader iterates).
    ``source`` and ``name`` are as in :func:`scan_tar_headers`.
    """
    scan = _Scan(
        _source_name(source, name),
        max_extended_header_bytes,
        regular_only=regular_only,
        detailed=False,
    )
    scan.run(source)
    return scan.names


def _source_name(source: TarSource, name: str | None) -> str:
    if name is not None:
        return name
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", "<tar stream>"))


def _no_source(size: int, offset: int) -> bytes:
    raise RuntimeError("tar scan has no source")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _round_up(size: int) -> int:
    return (size + (BLOCK - 1)) & ~(BLOCK - 1)


def _parse_number(field: bytes) -> int:
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


def _header_checksums(block: bytes) -> tuple[int, int]:
    """Unsigned and signed checksums of one header with its checksum field as spaces."""
    unsigned = sum(block[:148]) + 256 + sum(block[156:512])
    signed = unsigned - 256 * sum(1 for c in block[:148] + block[156:512] if c > 127)
    return unsigned, signed


class _Scan:
    """State of one scan; a class so the hot loop keeps everything in fast locals."""

    def __init__(
        self, path: str, max_extended_header_bytes: int, *, regular_only: bool, detailed: bool
    ) -> None:
        if max_extended_header_bytes < BLOCK:
            raise ValueError(
                f"max_extended_header_bytes must be at least {BLOCK}, got {max_extended_header_bytes}"
            )
        self.path = path
        self.max_ext = max_extended_header_bytes
        self.regular_only = regular_only
        self.detailed = detailed
        self.names: list[str] = []
        self.types: list[str] = []
        self.sizes: list[int] = []
        self.header_offsets: list[int] = []
        self.data_offsets: list[int] = []
        # Headers of the current buffer whose checksums are still to be verified.
        self._pread: Callable[[int, int], bytes] = _no_source
        self._buf: bytes = b""
        self._buf_start = 0
        self._pending_rows: list[int] = []
        # Per-block classification of the current buffer (see _load).
        self._blocks = np.zeros((0, BLOCK), dtype=np.uint8)
        self._sizes = np.zeros(0, dtype=np.int64)
        self._no_data = np.zeros(0, dtype=bool)
        self._next: list[int] = []
        self._special: list[bool] = []

    # -- checksum verification, batched per buffer -------------------------------------
    def _verify_pending(self) -> None:
        rows = self._pending_rows
        if not rows:
            return
        self._pending_rows = []
        buf = self._buf
        usable = (len(buf) // BLOCK) * BLOCK
        blocks = np.frombuffer(buf, dtype=np.uint8, count=usable).reshape(-1, BLOCK)
        headers = blocks[np.asarray(rows, dtype=np.intp)]
        field = headers[:, 148:156]
        computed = _byte_sums(headers) - field.sum(axis=1, dtype=np.int64) + 8 * 32
        stored, simple = _checksum_fields(field)
        ok = simple & (stored == computed)
        if bool(ok.all()):
            return
        # Rare layouts, signed checksums (old Sun tars) and real corruption: one by one.
        for i in np.flatnonzero(~ok).tolist():
            offset = self._buf_start + rows[i] * BLOCK
            block = headers[i].tobytes()
            try:
                value = _parse_number(block[148:156])
            except ValueError:
                raise TarHeaderChecksumError(
                    self.path,
                    offset,
                    f"unreadable header checksum field {block[148:156]!r}; "
                    "the file is corrupt or not a tar archive",
                ) from None
            if value in _header_checksums(block):
                continue
            raise TarHeaderChecksumError(
                self.path,
                offset,
                f"header checksum mismatch (stored {value}, computed "
                f"{_header_checksums(block)[0]}); the file is corrupt or not a tar archive",
            )

    def _error_after_verifying(self, error: TarScanError) -> TarScanError:
        """A checksum failure explains a garbled header better than the symptom does."""
        self._verify_pending()
        return error

    # -- extended header payloads ----------------------------------------------------
    def _read_payload(self, header_offset: int, size: int, file_size: int) -> bytes:
        if size > self.max_ext:
            raise self._error_after_verifying(
                TarExtendedHeaderTooLargeError(
                    self.path,
                    header_offset,
                    f"extended header declares {size} bytes, more than the "
                    f"{self.max_ext}-byte limit for pax/GNU long-name headers",
                )
            )
        start = header_offset + BLOCK
        if start + size > file_size:
            raise self._error_after_verifying(
                TruncatedTarError(
                    self.path,
                    header_offset,
                    f"extended header declares {size} bytes but the file ends at byte {file_size}",
                )
            )
        rel = start - self._buf_start
        if rel + size <= len(self._buf):
            return self._buf[rel : rel + size]
        data = self._pread(size, start)
        if len(data) != size:
            raise TruncatedTarError(
                self.path, header_offset, f"short read of {len(data)}/{size} extended-header bytes"
            )
        return data

    def _parse_pax(self, data: bytes, header_offset: int) -> dict[str, bytes]:
        records: dict[str, bytes] = {}
        pos = 0
        end = len(data)
        while pos < end:
            space = data.find(b" ", pos, min(end, pos + 21))
            if space < 0:
                if not data[pos:].strip(b"\x00"):
                    break
                raise self._error_after_verifying(
                    TarHeaderFormatError(
                        self.path, header_offset, f"malformed pax record at payload byte {pos}"
                    )
                )
            length_text = data[pos:space]
            if not length_text.isdigit() or int(length_text) <= space - pos + 1:
                raise self._error_after_verifying(
                    TarHeaderFormatError(
                        self.path,
                        header_offset,
                        f"invalid pax record length {length_text!r} at payload byte {pos}",
                    )
                )
            record_end = pos + int(length_text)
            if record_end > end or data[record_end - 1] != 0x0A:
                raise self._error_after_verifying(
                    TarHeaderFormatError(
                        self.path,
                        header_offset,
                        f"pax record at payload byte {pos} overruns its header or lacks a newline",
                    )
                )
            key, eq, value = data[space + 1 : record_end - 1].partition(b"=")
            if not eq:
                raise self._error_after_verifying(
                    TarHeaderFormatError(
                        self.path, header_offset, f"pax record without '=' at payload byte {pos}"
                    )
                )
            records[_decode(key)] = value
            pos = record_end
        return records

    def _pax_size(self, value: bytes, header_offset: int) -> int:
        if not value.isdigit():
            raise self._error_after_verifying(
                TarHeaderFormatError(self.path, header_offset, f"invalid pax size {value!r}")
            )
        return int(value)

    # -- the scan ----------------------------------------------------------------------
    def run(self, source: TarSource) -> None:
        if isinstance(source, (str, os.PathLike)):
            # A FIFO or device named like a tar is refused from its fstat, never read.
            with open(open_regular_fd(source), "rb", buffering=0) as handle:
                self._run_on(handle)
        else:
            self._run_on(source)

    def _run_on(self, handle: IO[bytes]) -> None:
        """Positional reads on the handle's descriptor, or seek + read for other streams."""
        try:
            fd = handle.fileno()
            file_size = os.fstat(fd).st_size
        except (AttributeError, OSError, io.UnsupportedOperation):
            fd = -1
            file_size = handle.seek(0, io.SEEK_END)
        if fd >= 0:

            def pread(size: int, offset: int) -> bytes:
                return os.pread(fd, size, offset)

        else:

            def pread(size: int, offset: int) -> bytes:
                handle.seek(offset)
                return handle.read(size)

        self._pread = pread
        self._run(file_size)

    def _load(self, pos: int, file_size: int) -> None:
        """Read the buffer that starts at header offset ``pos`` and classify its blocks.

        Every complete block is decoded *as if* it were a header (size, type, next-header
        index), so that runs of plain headers can be followed by index hops alone; data
        blocks get garbage values that the walk never visits.
        Buffers that held many headers are followed by big reads; after one that held few
        (large members), small reads fetch little more than the next header.
        """
        dense = not self._buf or len(self._pending_rows) >= _DENSE_BUFFER_HEADERS
        self._verify_pending()
        if pos >= file_size:
            raise TruncatedTarError(
                self.path,
                pos,
                f"file ends at byte {file_size} without the end-of-archive marker "
                "(truncated or incompletely copied)",
            )
        buf = self._pread(_BIG_READ if dense else _SMALL_READ, pos)
        self._buf = buf
        self._buf_start = pos
        if len(buf) < BLOCK:
            raise TruncatedTarError(
                self.path, pos, f"file ends at byte {pos + len(buf)} inside a 512-byte header"
            )
        nblocks = len(buf) // BLOCK
        blocks = np.frombuffer(buf, dtype=np.uint8, count=nblocks * BLOCK).reshape(nblocks, BLOCK)
        typeflag = blocks[:, 156]
        size, simple = _size_fields(blocks[:, 124:136])
        no_data = (typeflag >= 0x31) & (typeflag <= 0x36)
        special = (
            ~simple
            | _SPECIAL_TYPE_LUT[typeflag]
            | ~blocks[:, 148:156].any(axis=1)  # zero checksum field: end marker or garbage
        )
        # A v7 directory is an AREGTYPE whose name ends in '/': tarfile skips no data for
        # it, so such a block (with a non-zero size) takes the careful path.
        v7 = np.flatnonzero((typeflag == 0) & (size != 0))
        if v7.size:
            names = blocks[v7, :100]
            last = 99 - np.argmax(names[:, ::-1] != 0, axis=1)
            special[v7[names[np.arange(v7.size), last] == 0x2F]] = True
        data_blocks = np.where(no_data, 0, (size + (BLOCK - 1)) // BLOCK)
        self._blocks = blocks
        self._sizes = size
        self._no_data = no_data
        self._next = (np.arange(1, nblocks + 1) + data_blocks).tolist()
        self._special = special.tolist()

    def _short_run(self, rows: list[int], file_size: int) -> None:
        """The plain headers of a short run, one by one (cheaper than NumPy's call overhead)."""
        buf = self._buf
        buf_start = self._buf_start
        sizes = self._sizes
        for r in rows:
            o = r << 9
            name_f, _size_f, _chk_f, typ, magic, prefix_f = _HEADER.unpack_from(buf, o)
            size = int(sizes[r])
            data_pos = buf_start + o + BLOCK
            raw = name_f.partition(b"\x00")[0]
            if magic == _USTAR_MAGIC and prefix_f[0]:
                raw = prefix_f.partition(b"\x00")[0] + b"/" + raw
            name = _decode(raw)
            if typ == b"\x00" and name.endswith("/"):
                typ = b"5"
            if typ == b"5":
                name = name.rstrip("/")
            if typ not in _NO_DATA_TYPES and data_pos + size > file_size:
                raise self._error_after_verifying(
                    TruncatedTarError(
                        self.path,
                        data_pos - BLOCK,
                        f"member declares {size} data bytes but the file ends at byte {file_size}",
                    )
                )
            if self.regular_only and typ not in _REGULAR_TYPES:
                continue
            self.names.append(name)
            if self.detailed:
                self.types.append("0" if typ == b"\x00" else typ.decode("latin-1"))
                self.sizes.append(size)
                self.header_offsets.append(data_pos - BLOCK)
                self.data_offsets.append(data_pos)

    def _fast_run(self, start: int, file_size: int) -> int:
        """Consume consecutive plain headers from block ``start``; return the next block index.

        Plain means: octal size, not an extended/sparse header, no pending overrides. The
        walk stops at the first special header or at the end of the buffer.
        """
        nxt = self._next
        special = self._special
        nblocks = len(nxt)
        rows: list[int] = []
        append = rows.append
        i = start
        while i < nblocks and not special[i]:
            append(i)
            i = nxt[i]
        if not rows:
            return i
        self._pending_rows.extend(rows)
        if len(rows) <= _SHORT_RUN:
            self._short_run(rows, file_size)
            return i
        r = np.asarray(rows, dtype=np.intp)
        headers = self._blocks[r]
        sizes = self._sizes[r]
        no_data = self._no_data[r]
        buf_start = self._buf_start
        data_pos = buf_start + (r + 1) * BLOCK
        over = (data_pos + np.where(no_data, 0, sizes)) > file_size
        if over.any():
            k = int(np.flatnonzero(over)[0])
            raise self._error_after_verifying(
                TruncatedTarError(
                    self.path,
                    buf_start + rows[k] * BLOCK,
                    f"member declares {int(sizes[k])} data bytes but the file ends "
                    f"at byte {file_size}",
                )
            )
        name_fields = np.ascontiguousarray(headers[:, :100])
        raw_names: list[bytes] = name_fields.view("S100").ravel().tolist()
        # numpy strips trailing NULs only; tarfile cuts at the first NUL.
        if b"\x00".join(raw_names).count(b"\x00") != len(raw_names) - 1:
            raw_names = [raw.partition(b"\x00")[0] for raw in raw_names]
        ustar_prefixed = (headers[:, 257:265] == _USTAR_MAGIC_CODES).all(axis=1) & (
            headers[:, 345] != 0
        )
        for k in np.flatnonzero(ustar_prefixed).tolist():
            prefix = headers[k, 345:500].tobytes().partition(b"\x00")[0]
            raw_names[k] = prefix + b"/" + raw_names[k]
        names = b"\x00".join(raw_names).decode("utf-8", "surrogateescape").split("\x00")
        typeflag = headers[:, 156]
        for k in np.flatnonzero((typeflag == 0x35) | (typeflag == 0)).tolist():
            if typeflag[k] == 0x35 or names[k].endswith("/"):
                names[k] = names[k].rstrip("/")
                typeflag[k] = 0x35
        if self.regular_only:
            keep = _REGULAR_TYPE_LUT[typeflag]
            if not keep.all():
                kept = np.flatnonzero(keep).tolist()
                self.names.extend([names[k] for k in kept])
                return i
        self.names.extend(names)
        if self.detailed:
            self.types.extend(["0" if t == 0 else chr(t) for t in typeflag.tolist()])
            self.sizes.extend(sizes.tolist())
            self.header_offsets.extend((data_pos - BLOCK).tolist())
            self.data_offsets.extend(data_pos.tolist())
        return i

    def _run(self, file_size: int) -> None:
        path = self.path
        if file_size == 0:
            raise TruncatedTarError(path, 0, "file is empty; expected tar headers")
        pread = self._pread
        names = self.names
        self._load(0, file_size)
        pos = 0
        # Overrides announced by extended headers for the next member only.
        long_name: str | None = None
        pax_path: str | None = None
        pax_size: int | None = None
        global_path: str | None = None
        member_start: int | None = None  # offset of the first extended header of a member

        while True:
            buf_start = self._buf_start
            if pos + BLOCK > buf_start + len(self._buf):
                self._load(pos, file_size)
                buf_start = pos
            plain = long_name is None and pax_path is None and pax_size is None
            if plain and global_path is None and member_start is None:
                i = self._fast_run((pos - buf_start) >> 9, file_size)
                pos = buf_start + i * BLOCK
                if pos + BLOCK > buf_start + len(self._buf):
                    continue
            buf = self._buf
            o = pos - buf_start
            name_f, size_f, chk_f, typ, magic, prefix_f = _HEADER.unpack_from(buf, o)
            if chk_f == _ZERO_CHKSUM and buf[o : o + BLOCK] == _ZERO_BLOCK:
                break  # end-of-archive marker
            self._pending_rows.append(o >> 9)
            try:
                size = _parse_number(size_f)
            except ValueError:
                raise self._error_after_verifying(
                    TarHeaderFormatError(path, pos, f"unreadable size field {size_f!r}")
                ) from None
            if size < 0:
                raise self._error_after_verifying(
                    TarHeaderFormatError(path, pos, f"negative member size {size}")
                )

            if typ in _EXTENDED_TYPES:
                if member_start is None and typ != b"g":
                    member_start = pos
                payload = self._read_payload(pos, size, file_size)
                if typ == b"L":
                    long_name = _decode(payload.partition(b"\x00")[0])
                elif typ != b"K":
                    records = self._parse_pax(payload, pos)
                    new_path = records.get("GNU.sparse.name", records.get("path"))
                    if typ == b"g":
                        if new_path is not None:
                            global_path = _decode(new_path).rstrip("/") or None
                    else:
                        if new_path is not None:
                            pax_path = _decode(new_path).rstrip("/") or None
                        if "size" in records:
                            pax_size = self._pax_size(records["size"], pos)
                pos += BLOCK + _round_up(size)
                continue

            own_pos = pos
            header_pos = pos if member_start is None else member_start
            member_start = None
            data_pos = pos + BLOCK
            if typ == b"S" and buf[o + 482]:
                # Old GNU sparse: extension blocks follow until one clears its flag.
                for _ in range(_MAX_SPARSE_EXTENSION_BLOCKS):
                    ext = pread(BLOCK, data_pos)
                    if len(ext) < BLOCK:
                        raise self._error_after_verifying(
                            TruncatedTarError(
                                path, own_pos, "file ends inside GNU sparse extension blocks"
                            )
                        )
                    data_pos += BLOCK
                    if not ext[504]:
                        break
                else:
                    raise self._error_after_verifying(
                        TarHeaderFormatError(
                            path, pos, "endless chain of GNU sparse extension blocks"
                        )
                    )

            if pax_size is not None:
                size = pax_size
                pax_size = None
            if pax_path is not None:
                name = pax_path
            elif long_name is not None:
                name = long_name
            elif global_path is not None:
                name = global_path
            else:
                raw = name_f.partition(b"\x00")[0]
                if magic == _USTAR_MAGIC and prefix_f[0]:
                    raw = prefix_f.partition(b"\x00")[0] + b"/" + raw
                name = _decode(raw)
            if typ == b"\x00" and name.endswith("/"):
                typ = b"5"
            if typ == b"5":
                name = name.rstrip("/")
            pax_path = None
            long_name = None

            if typ in _NO_DATA_TYPES:
                pos = data_pos
            else:
                pos = data_pos + _round_up(size)
                if data_pos + size > file_size:
                    raise self._error_after_verifying(
                        TruncatedTarError(
                            path,
                            own_pos,
                            f"member {name!r} declares {size} data bytes but the file ends "
                            f"at byte {file_size}",
                        )
                    )
            if self.regular_only and typ not in _REGULAR_TYPES:
                continue
            names.append(name)
            if self.detailed:
                self.types.append("0" if typ == b"\x00" else typ.decode("latin-1"))
                self.sizes.append(size)
                self.header_offsets.append(header_pos)
                self.data_offsets.append(data_pos)

        if long_name is not None or pax_path is not None or pax_size is not None:
            raise self._error_after_verifying(
                TruncatedTarError(
                    path, pos, "extended header is followed by the end-of-archive marker"
                )
            )
        self._verify_pending()


def _octal_digits(fields: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Value of the first ``count`` characters of each row as octal, and where they all are digits."""
    digits = fields[:, :count] - np.uint8(0x30)  # wraps below '0' to large values
    valid = np.asarray((digits < 8).all(axis=1), dtype=bool)
    values = np.asarray(digits.astype(np.float64) @ _OCTAL_WEIGHTS[-count:]).astype(np.int64)
    return values, valid


def _is_terminator(column: np.ndarray) -> np.ndarray:
    return np.asarray((column == 0) | (column == 0x20), dtype=bool)


def _size_fields(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sizes of (n, 12) size fields in the usual ``%011o`` + NUL/space layout, and where that holds."""
    values, valid = _octal_digits(fields, 11)
    return values, valid & _is_terminator(fields[:, 11])


def _checksum_fields(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stored checksums in the ``%06o\\0 `` or ``%07o\\0`` layouts, and where one holds."""
    six, six_digits = _octal_digits(fields, 6)
    six_ok = six_digits & (
        (fields[:, 6] == 0) | ((fields[:, 6] == 0x20) & _is_terminator(fields[:, 7]))
    )
    seven_digit = fields[:, 6] - np.uint8(0x30)
    seven_ok = six_digits & (seven_digit < 8) & _is_terminator(fields[:, 7])
    seven = six * 8 + seven_digit.astype(np.int64)
    return np.where(six_ok, six, seven), six_ok | seven_ok


def _byte_sums(blocks: np.ndarray) -> np.ndarray:
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
