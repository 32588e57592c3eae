"""The one small, read-only file-access layer under the store reader and the diagnostics.

Every byte the reader, the dataset and the diagnostics take from a store (or from a raw
dataset directory of tar shards) comes through a :class:`StoreAccess`: ``stat``, ``list``,
``read`` a whole small file, ``read_range`` of a large one, ``open_binary`` for streaming
headers, and ``zarr_store`` for zarr's own reads. Keeping it this narrow is what lets an
fsspec-backed implementation (object storage) or per-shard Dask tasks be added later
without touching any statistic: they only need these few calls.

Paths given to an access object are relative, ``/``-separated and may not escape its root.
Nothing here writes; the zarr store handed out is opened ``read_only=True``.
"""

from __future__ import annotations

import contextlib
import os
import stat as stat_module
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "FileStat",
    "LocalStoreAccess",
    "StoreAccess",
    "open_store_access",
]


@dataclass(frozen=True)
class FileStat:
    """What the generation check and the diagnostics need to know about one file or directory."""

    path: str
    size: int
    is_dir: bool
    mtime_ns: int
    ctime_ns: int
    device: int
    inode: int

    @classmethod
    def from_os(cls, path: str, st: os.stat_result) -> FileStat:
        return cls(
            path=path,
            size=int(st.st_size),
            is_dir=stat_module.S_ISDIR(st.st_mode),
            mtime_ns=int(st.st_mtime_ns),
            ctime_ns=int(st.st_ctime_ns),
            device=int(st.st_dev),
            inode=int(st.st_ino),
        )


class StoreAccess(ABC):
    """Read-only access to the files below one root (a store, or a raw dataset directory)."""

    @property
    @abstractmethod
    def root(self) -> str:
        """The root as shown to users (an absolute path, later possibly a URL)."""

    @abstractmethod
    def describe(self, rel: str) -> str:
        """The full name of ``rel`` for error messages."""

    @abstractmethod
    def stat(self, rel: str = "") -> FileStat:
        """Stat ``rel`` (``""`` is the root); raises ``FileNotFoundError`` when absent."""

    def exists(self, rel: str = "") -> bool:
        try:
            self.stat(rel)
        except FileNotFoundError:
            return False
        return True

    @abstractmethod
    def list_dir(self, rel: str = "") -> tuple[str, ...]:
        """Sorted entry names of directory ``rel``; raises ``FileNotFoundError`` when absent."""

    @abstractmethod
    def walk_files(self, rel: str = "", *, suffix: str | None = None) -> Iterator[str]:
        """Relative paths of all files below ``rel``, recursively, in sorted order."""

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """The whole content of a (small) file."""

    @abstractmethod
    def read_bytes_with_stat(self, rel: str) -> tuple[bytes, FileStat]:
        """The content of a file and the stat of the very handle it was read from.

        Comparing this stat (not a later ``stat`` of the path) with a generation tells
        whether the bytes came from the store generation the caller expects.
        """

    @abstractmethod
    def read_range(self, rel: str, start: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``start``; shorter only at end of file."""

    def read_range_into(self, rel: str, start: int, buffer: memoryview) -> int:
        """Fill ``buffer`` from byte ``start`` of ``rel``; returns the bytes read (short at EOF).

        Lets readers decode straight into their output arrays without an extra copy.
        """
        data = self.read_range(rel, start, buffer.nbytes)
        flat = buffer.cast("B")
        flat[: len(data)] = data
        return len(data)

    @abstractmethod
    def open_binary(self, rel: str) -> IO[bytes]:
        """A read-only, seekable binary file object (caller closes it)."""

    @abstractmethod
    def zarr_store(self, rel: str = "") -> Any:
        """A read-only zarr v3 store rooted at ``rel``."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release cached handles (safe to call twice)."""


def _entry_name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _check_relative(rel: str) -> str:
    if rel in ("", "."):
        return ""
    if rel.startswith("/") or "\\" in rel:
        raise ValueError(f"store path {rel!r} must be relative and '/'-separated")
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"store path {rel!r} may not contain empty, '.' or '..' components")
    return rel


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
        rel = _check_relative(rel)
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
        with open(self._path(rel), "rb") as handle:
            return handle.read()

    def read_bytes_with_stat(self, rel: str) -> tuple[bytes, FileStat]:
        path = self._path(rel)
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            data = handle.read()
        return data, FileStat.from_os(str(path), st)

    def _fd(self, rel: str) -> int:
        with self._lock:
            if self._pid != os.getpid():
                # A forked child must not share the parent's cache bookkeeping.
                self._fds = {}
                self._pid = os.getpid()
            fd = self._fds.get(rel)
            if fd is None:
                if len(self._fds) >= self._MAX_CACHED_FDS:
                    _, old = self._fds.popitem()
                    os.close(old)
                fd = os.open(self._path(rel), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                self._fds[rel] = fd
            return fd

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(
                f"{self.describe(rel)}: invalid byte range start={start} length={length}"
            )
        if length == 0:
            return b""
        fd = self._fd(rel)
        chunks: list[bytes] = []
        remaining = length
        offset = start
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
        fd = self._fd(rel)
        done = 0
        while done < flat.nbytes:
            n = os.preadv(fd, [flat[done:]], start + done)
            if n == 0:
                break
            done += n
        return done

    def open_binary(self, rel: str) -> IO[bytes]:
        return open(self._path(rel), "rb")

    def zarr_store(self, rel: str = "") -> Any:
        from zarr.storage import LocalStore

        return LocalStore(self._path(rel), read_only=True)

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
            same_process = self._pid == os.getpid()
        if same_process:
            for fd in fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into DataLoader workers (spawn): descriptors do not travel.
        return {"_root": self._root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_root"])  # type: ignore[misc]


def open_store_access(location: str | os.PathLike[str]) -> StoreAccess:
    """The access object for ``location``; today a local directory.

    URLs (``scheme://...``) are refused with a clear message until an fsspec-backed
    :class:`StoreAccess` exists.
    """
    text = os.fspath(location)
    if "://" in text:
        raise ValueError(
            f"store location {text!r} is a URL; only local directories are supported so far"
        )
    return LocalStoreAccess(text)
