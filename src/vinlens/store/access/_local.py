"""The access layer over a local directory: positional reads on cached descriptors."""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, cast

from vinlens.store.access._base import (
    FileStat,
    StoreAccess,
    changed_since_listing,
    check_relative,
    open_regular_fd,
)
from vinlens.store.access._zarr import AccessZarrStore
from vinlens.store.errors import StoreReplacedError

__all__ = ["LocalStoreAccess"]


def _entry_name(entry: os.DirEntry[str]) -> str:
    return entry.name


class LocalStoreAccess(StoreAccess):
    """:class:`StoreAccess` over a local directory, with positional reads on cached handles.

    File descriptors opened by :meth:`read_range` are cached (``pread`` does not move a
    shared offset, so a cached descriptor is safe across threads and forked workers) and
    released by :meth:`close`.
    """

    _MAX_CACHED_FDS = 64

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).expanduser().absolute()
        self._root_str = str(self._root)
        self._fds: dict[str, int] = {}
        # Descriptors in use by a read (count per fd) and those evicted meanwhile: an evicted
        # descriptor is closed by its last user, never under a concurrent read (the number
        # would be reused by another file and that read would return its bytes).
        self._users: dict[int, int] = {}
        self._retired: set[int] = set()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def root(self) -> str:
        return str(self._root)

    @property
    def root_path(self) -> Path:
        return self._root

    def _path(self, rel: str) -> str:
        # Plain strings, not Path objects: this runs for every chunk a scan reads.
        rel = check_relative(rel)
        return f"{self._root_str}/{rel}" if rel else self._root_str

    def describe(self, rel: str) -> str:
        return self._path(rel)

    def stat(self, rel: str = "") -> FileStat:
        path = self._path(rel)
        return FileStat.from_os(path, os.stat(path))

    def exists(self, rel: str = "") -> bool:
        # Same answer as the base class, without building a FileStat: the reader asks this
        # for every expected chunk file when it opens a block.
        try:
            os.stat(self._path(rel))
        except FileNotFoundError:
            return False
        return True

    def list_dir(self, rel: str = "") -> tuple[str, ...]:
        return tuple(sorted(os.listdir(self._path(rel))))

    def walk_files(self, rel: str = "", *, suffix: str | None = None) -> Iterator[str]:
        # scandir with plain strings: listing chunk files is on the reader's open path.
        base = self._path(rel)
        prefix = f"{rel}/" if rel else ""
        stack = [("", base)]
        while stack:
            sub, directory = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = sorted(it, key=_entry_name)
            except NotADirectoryError:
                continue
            dirs = []
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    dirs.append((f"{sub}{entry.name}/", entry.path))
                elif suffix is None or entry.name.endswith(suffix):
                    yield f"{prefix}{sub}{entry.name}"
            stack.extend(reversed(dirs))

    def read_bytes(self, rel: str) -> bytes:
        return self.read_bytes_with_stat(rel)[0]

    def read_bytes_with_stat(self, rel: str) -> tuple[bytes, FileStat]:
        path = self._path(rel)
        with open(open_regular_fd(path), "rb", closefd=True) as handle:
            st = os.fstat(handle.fileno())
            # Read what fstat promised, plus one byte to notice a file still growing.
            data = handle.read(st.st_size + 1)
            if len(data) > st.st_size:
                data += handle.read()
        return data, FileStat.from_os(str(path), st)

    def read_bytes_limited(self, rel: str, limit: int) -> tuple[bytes, FileStat]:
        """Like :meth:`read_bytes_with_stat`, but never more than ``limit`` + 1 bytes.

        Callers that bound a file's size (the manifest) learn that it is too large from the
        extra byte without ever holding more of it.
        """
        path = self._path(rel)
        with open(open_regular_fd(path), "rb", closefd=True) as handle:
            st = os.fstat(handle.fileno())
            data = handle.read(limit + 1)
        return data, FileStat.from_os(str(path), st)

    @contextlib.contextmanager
    def _leased_fd(self, rel: str) -> Iterator[int]:
        """A cached descriptor of ``rel`` that stays open until this read is done."""
        with self._lock:
            if self._pid != os.getpid():
                # A forked child must not share the parent's cache bookkeeping.
                self._fds, self._users, self._retired = {}, {}, set()
                self._pid = os.getpid()
            fd = self._fds.get(rel)
            if fd is None:
                if len(self._fds) >= self._MAX_CACHED_FDS:
                    _, old = self._fds.popitem()
                    self._retire(old)
                fd = open_regular_fd(self._path(rel))
                self._fds[rel] = fd
            self._users[fd] = self._users.get(fd, 0) + 1
        try:
            yield fd
        finally:
            with self._lock:
                left = self._users.get(fd, 1) - 1
                if left:
                    self._users[fd] = left
                else:
                    self._users.pop(fd, None)
                    if fd in self._retired:
                        self._retired.discard(fd)
                        with contextlib.suppress(OSError):
                            os.close(fd)

    def _retire(self, fd: int) -> None:
        """Close ``fd`` now, or when its last reader is done (caller holds the lock)."""
        if self._users.get(fd):
            self._retired.add(fd)
        else:
            with contextlib.suppress(OSError):
                os.close(fd)

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(
                f"{self.describe(rel)}: invalid byte range start={start} length={length}"
            )
        if length == 0:
            return b""
        chunks: list[bytes] = []
        remaining = length
        offset = start
        with self._leased_fd(rel) as fd:
            while remaining > 0:
                chunk = os.pread(fd, remaining, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
                offset += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_range_into(self, rel: str, start: int, buffer: memoryview) -> int:
        if start < 0:
            raise ValueError(f"{self.describe(rel)}: invalid byte range start={start}")
        flat = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
        done = 0
        with self._leased_fd(rel) as fd:
            while done < flat.nbytes:
                n = os.preadv(fd, [flat[done:]], start + done)
                if n == 0:
                    break
                done += n
        return done

    def open_binary(self, rel: str) -> IO[bytes]:
        return open(open_regular_fd(self._path(rel)), "rb", closefd=True)

    def zarr_store(self, rel: str = "", *, pins: Mapping[str, FileStat] | None = None) -> Any:
        return AccessZarrStore(self, rel, pins)

    # ---- reads pinned to a listing --------------------------------------------------

    def _check_pin(self, rel: str, fd: int, pin: FileStat) -> None:
        what = pin.pin_mismatch(FileStat.from_os(pin.path, os.fstat(fd)))
        if what is not None:
            raise changed_since_listing(self.describe(rel), what)

    def _forget_fd(self, rel: str) -> None:
        with self._lock:
            fd = self._fds.pop(rel, None)
            if fd is not None:
                self._retire(fd)

    def read_pinned(
        self, rel: str, pin: FileStat, start: int = 0, length: int | None = None
    ) -> bytes:
        if length is None:
            length = max(0, pin.size - start)
        buffer = bytearray(length)
        got = self.read_pinned_into(rel, pin, start, memoryview(buffer))
        return bytes(buffer) if got == length else bytes(buffer[:got])

    def read_pinned_into(self, rel: str, pin: FileStat, start: int, buffer: memoryview) -> int:
        if start < 0:
            raise ValueError(f"{self.describe(rel)}: invalid byte range start={start}")
        flat = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
        for attempt in (1, 2):
            with self._leased_fd(rel) as fd:
                try:
                    self._check_pin(rel, fd, pin)
                except StoreReplacedError:
                    if attempt == 2:
                        raise
                    # A descriptor cached before the listing may name an older file.
                    self._forget_fd(rel)
                    continue
                done = 0
                while done < flat.nbytes:
                    n = os.preadv(fd, [flat[done:]], start + done)
                    if n == 0:
                        break
                    done += n
                # Checked again after the read: a same-size rewrite during it moves mtime.
                self._check_pin(rel, fd, pin)
                return done
        raise AssertionError("unreachable")  # pragma: no cover

    def open_pinned(self, rel: str, pin: FileStat) -> IO[bytes]:
        raw = _PinnedLocalFile(self, rel, pin, open_regular_fd(self._path(rel)))
        return cast(IO[bytes], io.BufferedReader(raw, buffer_size=1 << 16))

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
            if self._pid == os.getpid():
                for fd in fds.values():
                    self._retire(fd)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into DataLoader workers (spawn): descriptors do not travel.
        return {"_root": self._root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_root"])  # type: ignore[misc]


class _PinnedLocalFile(io.RawIOBase):
    """A read-only file whose every read re-checks the listed identity around it."""

    def __init__(self, access: LocalStoreAccess, rel: str, pin: FileStat, fd: int) -> None:
        super().__init__()
        self._access = access
        self._rel = rel
        self._pin = pin
        self._fd = fd
        self._pos = 0
        self.name = access.describe(rel)
        try:
            access._check_pin(rel, fd, pin)
        except BaseException:
            os.close(fd)
            raise

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._pin.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        self._access._check_pin(self._rel, self._fd, self._pin)
        n = os.preadv(self._fd, [view], self._pos)
        self._access._check_pin(self._rel, self._fd, self._pin)
        self._pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        super().close()
