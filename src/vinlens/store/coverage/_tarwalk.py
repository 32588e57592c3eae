"""The walk over a tar's headers: batched reads, a NumPy fast path and one-by-one special headers.

Plain headers (octal size, no extended header pending) are followed by index hops over a
buffer whose blocks were all decoded at once; extended headers, sparse files and anything
unusual take the one-header-at-a-time path. Checksums are verified per buffer.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import IO

import numpy as np

from vinlens.store.access import open_regular_fd
from vinlens.store.coverage._tarfields import (
    BLOCK,
    EXTENDED_TYPES,
    HEADER,
    NO_DATA_TYPES,
    REGULAR_TYPE_LUT,
    REGULAR_TYPES,
    SPECIAL_TYPE_LUT,
    USTAR_MAGIC,
    USTAR_MAGIC_CODES,
    ZERO_BLOCK,
    ZERO_CHKSUM,
    byte_sums,
    checksum_fields,
    decode,
    header_checksums,
    parse_number,
    parse_pax_records,
    round_up,
    size_fields,
)
from vinlens.store.errors import (
    TarExtendedHeaderTooLargeError,
    TarHeaderChecksumError,
    TarHeaderFormatError,
    TarScanError,
    TruncatedTarError,
)

TarSource = str | os.PathLike[str] | IO[bytes]

#: Most GNU sparse extension blocks followed before a header is declared hostile.
_MAX_SPARSE_EXTENSION_BLOCKS = 4096

_BIG_READ = 1 << 20
_SMALL_READ = 16 << 10
_DENSE_BUFFER_HEADERS = 8
# Runs of plain headers up to this length are decoded in Python, longer ones with NumPy.
_SHORT_RUN = 40


def _no_source(size: int, offset: int) -> bytes:
    raise RuntimeError("tar scan has no source")


class HeaderScan:
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
        # Overrides announced by extended headers for the next member only.
        self._long_name: str | None = None
        self._pax_path: str | None = None
        self._pax_size: int | None = None
        self._global_path: str | None = None
        # Offset of the first extended header of the member being read.
        self._member_start: int | None = None

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
        computed = byte_sums(headers) - field.sum(axis=1, dtype=np.int64) + 8 * 32
        stored, simple = checksum_fields(field)
        ok = simple & (stored == computed)
        if bool(ok.all()):
            return
        # Rare layouts, signed checksums (old Sun tars) and real corruption: one by one.
        for i in np.flatnonzero(~ok).tolist():
            offset = self._buf_start + rows[i] * BLOCK
            block = headers[i].tobytes()
            try:
                value = parse_number(block[148:156])
            except ValueError:
                raise TarHeaderChecksumError(
                    self.path,
                    offset,
                    f"unreadable header checksum field {block[148:156]!r}; "
                    "the file is corrupt or not a tar archive",
                ) from None
            if value in header_checksums(block):
                continue
            raise TarHeaderChecksumError(
                self.path,
                offset,
                f"header checksum mismatch (stored {value}, computed "
                f"{header_checksums(block)[0]}); the file is corrupt or not a tar archive",
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
        try:
            return parse_pax_records(data)
        except ValueError as exc:
            raise self._error_after_verifying(
                TarHeaderFormatError(self.path, header_offset, str(exc))
            ) from None

    def _parse_pax_size(self, value: bytes, header_offset: int) -> int:
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
        size, simple = size_fields(blocks[:, 124:136])
        no_data = (typeflag >= 0x31) & (typeflag <= 0x36)
        special = (
            ~simple
            | SPECIAL_TYPE_LUT[typeflag]
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
            name_f, _size_f, _chk_f, typ, magic, prefix_f = HEADER.unpack_from(buf, o)
            size = int(sizes[r])
            data_pos = buf_start + o + BLOCK
            raw = name_f.partition(b"\x00")[0]
            if magic == USTAR_MAGIC and prefix_f[0]:
                raw = prefix_f.partition(b"\x00")[0] + b"/" + raw
            name = decode(raw)
            if typ == b"\x00" and name.endswith("/"):
                typ = b"5"
            if typ == b"5":
                name = name.rstrip("/")
            if typ not in NO_DATA_TYPES and data_pos + size > file_size:
                raise self._error_after_verifying(
                    TruncatedTarError(
                        self.path,
                        data_pos - BLOCK,
                        f"member declares {size} data bytes but the file ends at byte {file_size}",
                    )
                )
            if self.regular_only and typ not in REGULAR_TYPES:
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
        ustar_prefixed = (headers[:, 257:265] == USTAR_MAGIC_CODES).all(axis=1) & (
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
            keep = REGULAR_TYPE_LUT[typeflag]
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
        if file_size == 0:
            raise TruncatedTarError(self.path, 0, "file is empty; expected tar headers")
        self._load(0, file_size)
        pos = 0
        while True:
            buf_start = self._buf_start
            if pos + BLOCK > buf_start + len(self._buf):
                self._load(pos, file_size)
                buf_start = pos
            if self._no_overrides():
                i = self._fast_run((pos - buf_start) >> 9, file_size)
                pos = buf_start + i * BLOCK
                if pos + BLOCK > buf_start + len(self._buf):
                    continue
            o = pos - buf_start
            header = HEADER.unpack_from(self._buf, o)
            if header[2] == ZERO_CHKSUM and self._buf[o : o + BLOCK] == ZERO_BLOCK:
                break  # end-of-archive marker
            self._pending_rows.append(o >> 9)
            size = self._header_size(header[1], pos)
            if header[3] in EXTENDED_TYPES:
                self._extended_header(header[3], pos, size, file_size)
                pos += BLOCK + round_up(size)
            else:
                pos = self._member(header, pos, size, file_size)
        if self._long_name is not None or self._pax_path is not None or self._pax_size is not None:
            raise self._error_after_verifying(
                TruncatedTarError(
                    self.path, pos, "extended header is followed by the end-of-archive marker"
                )
            )
        self._verify_pending()

    # -- one header at a time: extended headers and the members they describe ----------
    def _no_overrides(self) -> bool:
        """True when no extended header is pending, so the batched walk may go on."""
        return (
            self._long_name is None
            and self._pax_path is None
            and self._pax_size is None
            and self._global_path is None
            and self._member_start is None
        )

    def _header_size(self, size_field: bytes, pos: int) -> int:
        try:
            size = parse_number(size_field)
        except ValueError:
            raise self._error_after_verifying(
                TarHeaderFormatError(self.path, pos, f"unreadable size field {size_field!r}")
            ) from None
        if size < 0:
            raise self._error_after_verifying(
                TarHeaderFormatError(self.path, pos, f"negative member size {size}")
            )
        return size

    def _extended_header(self, typ: bytes, pos: int, size: int, file_size: int) -> None:
        """Record what a pax, GNU long-name or global header overrides for what follows."""
        if self._member_start is None and typ != b"g":
            self._member_start = pos
        payload = self._read_payload(pos, size, file_size)
        if typ == b"L":
            self._long_name = decode(payload.partition(b"\x00")[0])
            return
        if typ == b"K":
            return
        records = self._parse_pax(payload, pos)
        new_path = records.get("GNU.sparse.name", records.get("path"))
        if typ == b"g":
            if new_path is not None:
                self._global_path = decode(new_path).rstrip("/") or None
            return
        if new_path is not None:
            self._pax_path = decode(new_path).rstrip("/") or None
        if "size" in records:
            self._pax_size = self._parse_pax_size(records["size"], pos)

    def _member(self, header: tuple[bytes, ...], pos: int, size: int, file_size: int) -> int:
        """Record the member whose own header is at ``pos``; return the next header's offset."""
        name_f, _size_f, _chk_f, typ, magic, prefix_f = header
        header_pos = pos if self._member_start is None else self._member_start
        self._member_start = None
        data_pos = pos + BLOCK
        if typ == b"S" and self._buf[pos - self._buf_start + 482]:
            data_pos = self._skip_sparse_extensions(pos)
        if self._pax_size is not None:
            size = self._pax_size
            self._pax_size = None
        name = self._member_name(name_f, magic, prefix_f)
        if typ == b"\x00" and name.endswith("/"):
            typ = b"5"
        if typ == b"5":
            name = name.rstrip("/")
        if typ in NO_DATA_TYPES:
            next_pos = data_pos
        else:
            next_pos = data_pos + round_up(size)
            if data_pos + size > file_size:
                raise self._error_after_verifying(
                    TruncatedTarError(
                        self.path,
                        pos,
                        f"member {name!r} declares {size} data bytes but the file ends "
                        f"at byte {file_size}",
                    )
                )
        if not self.regular_only or typ in REGULAR_TYPES:
            self.names.append(name)
            if self.detailed:
                self.types.append("0" if typ == b"\x00" else typ.decode("latin-1"))
                self.sizes.append(size)
                self.header_offsets.append(header_pos)
                self.data_offsets.append(data_pos)
        return next_pos

    def _skip_sparse_extensions(self, pos: int) -> int:
        """Old GNU sparse: extension blocks follow until one clears its flag; return data offset."""
        data_pos = pos + BLOCK
        for _ in range(_MAX_SPARSE_EXTENSION_BLOCKS):
            ext = self._pread(BLOCK, data_pos)
            if len(ext) < BLOCK:
                raise self._error_after_verifying(
                    TruncatedTarError(
                        self.path, pos, "file ends inside GNU sparse extension blocks"
                    )
                )
            data_pos += BLOCK
            if not ext[504]:
                return data_pos
        raise self._error_after_verifying(
            TarHeaderFormatError(self.path, pos, "endless chain of GNU sparse extension blocks")
        )

    def _member_name(self, name_f: bytes, magic: bytes, prefix_f: bytes) -> str:
        """The name an extended header set for this member, else its header's own name."""
        if self._pax_path is not None:
            name = self._pax_path
        elif self._long_name is not None:
            name = self._long_name
        elif self._global_path is not None:
            name = self._global_path
        else:
            raw = name_f.partition(b"\x00")[0]
            if magic == USTAR_MAGIC and prefix_f[0]:
                raw = prefix_f.partition(b"\x00")[0] + b"/" + raw
            name = decode(raw)
        self._pax_path = None
        self._long_name = None
        return name
