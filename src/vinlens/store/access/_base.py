"""The contract of the access layer: :class:`FileStat`, :class:`StoreAccess`, regular-file opens.

A read can be *pinned* to the :class:`FileStat` a listing gave (``read_pinned``,
``read_pinned_into``, ``open_pinned``): the bytes are served only while the file is still
the one listed (local files: device, inode, size and ``mtime_ns`` re-checked around the
read; object stores: the ETag / version id sent with every GET). A file that changed is a
:class:`~vinlens.store.errors.StoreReplacedError`; one that vanished is
``FileNotFoundError``, which the reader lists as damage. That is what keeps a scan of a
store that changes under it from mixing two generations' bytes.
"""

from __future__ import annotations

import os
import stat as stat_module
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from vinlens.store.errors import DirectoryInsteadOfFileError, SpecialFileError, StoreReplacedError

__all__ = [
    "FileStat",
    "StoreAccess",
    "changed_since_listing",
    "check_relative",
    "file_kind",
    "open_regular_fd",
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
    #: Object stores: the object's ETag and version id (``""`` where none is offered, and
    #: always for local files, whose device/inode/ctime identify them instead).
    etag: str = ""
    version: str = ""

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

    def pin_mismatch(self, now: FileStat) -> str | None:
        """How ``now`` differs from this (listed) stat as a file's identity, or ``None``.

        Local files compare device, inode, size and ``mtime_ns``; objects compare size and
        the ETag / version id where the listing had one.
        """
        changes: list[str] = []
        if now.size != self.size:
            changes.append(f"size {self.size} -> {now.size}")
        if self.etag or self.version:
            if self.etag and now.etag and now.etag != self.etag:
                changes.append(f"ETag {self.etag} -> {now.etag}")
            if self.version and now.version and now.version != self.version:
                changes.append(f"version {self.version} -> {now.version}")
        else:
            if (now.device, now.inode) != (self.device, self.inode):
                changes.append(f"inode {self.device}:{self.inode} -> {now.device}:{now.inode}")
            if now.mtime_ns != self.mtime_ns:
                changes.append(f"mtime_ns {self.mtime_ns} -> {now.mtime_ns}")
        return ", ".join(changes) or None


def changed_since_listing(path: str, what: str) -> StoreReplacedError:
    """The error for a file that is no longer the one its listing saw."""
    return StoreReplacedError(
        f"changed while the scan read it ({what}); its bytes would mix two generations",
        path=path,
        expected="files of a published store to stay as listed (rerun on an unchanging store)",
    )


def file_kind(mode: int) -> str:
    if stat_module.S_ISFIFO(mode):
        return "a FIFO"
    if stat_module.S_ISCHR(mode):
        return "a character device"
    if stat_module.S_ISBLK(mode):
        return "a block device"
    if stat_module.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular_fd(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path``, which must be a regular file; never blocks.

    ``O_NONBLOCK`` makes opening a FIFO return at once instead of waiting for a writer;
    ``fstat`` on the opened descriptor (not the path) decides, so a swap between a check
    and the open cannot slip a special file through.
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    path = os.fspath(path)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat_module.S_ISDIR(mode):
            raise DirectoryInsteadOfFileError(
                "is a directory", path=path, expected="a regular file"
            )
        if not stat_module.S_ISREG(mode):
            raise SpecialFileError(
                f"is {file_kind(mode)}; refused without reading it",
                path=path,
                expected="a regular file",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


class StoreAccess(ABC):
    """Read-only access to the files below one root (a store, or a raw dataset directory)."""

    @property
    @abstractmethod
    def root(self) -> str:
        """The root as shown to users (an absolute path, or a URL)."""

    @property
    def is_remote(self) -> bool:
        """True for object storage and other fsspec locations (not a local directory)."""
        return False

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

    def walk_file_stats(
        self, rel: str = "", *, suffix: str | None = None
    ) -> Iterator[tuple[str, FileStat]]:
        """:meth:`walk_files` with each file's stat (object stores get them from the listing)."""
        for path in self.walk_files(rel, suffix=suffix):
            yield path, self.stat(path)

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """The whole content of a (small) file."""

    @abstractmethod
    def read_bytes_with_stat(self, rel: str) -> tuple[bytes, FileStat]:
        """The content of a file and the stat of the very handle it was read from.

        Comparing this stat (not a later ``stat`` of the path) with a generation tells
        whether the bytes came from the store generation the caller expects.
        """

    def read_bytes_limited(self, rel: str, limit: int) -> tuple[bytes, FileStat]:
        """Like :meth:`read_bytes_with_stat`, but never more than ``limit`` + 1 bytes.

        Callers that bound a file's size (the manifest) learn that it is too large from the
        extra byte without ever holding more of it.
        """
        st = self.stat(rel)
        if st.size > limit:
            return self.read_range(rel, 0, limit + 1), st
        return self.read_bytes_with_stat(rel)

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
    def read_pinned(
        self, rel: str, pin: FileStat, start: int = 0, length: int | None = None
    ) -> bytes:
        """Bytes ``start:start + length`` (to the end for ``None``) of the file ``pin`` lists.

        Served only from the file the listing saw: ``StoreReplacedError`` when it changed,
        ``FileNotFoundError`` when it vanished. Shorter than asked only at end of file.
        """

    def read_pinned_into(self, rel: str, pin: FileStat, start: int, buffer: memoryview) -> int:
        """:meth:`read_pinned` into ``buffer``; returns the bytes read (short at EOF)."""
        data = self.read_pinned(rel, pin, start, buffer.nbytes)
        flat = buffer.cast("B")
        flat[: len(data)] = data
        return len(data)

    @abstractmethod
    def open_pinned(self, rel: str, pin: FileStat) -> IO[bytes]:
        """:meth:`open_binary` whose every read is pinned to ``pin`` (see :meth:`read_pinned`)."""

    @abstractmethod
    def zarr_store(self, rel: str = "", *, pins: Mapping[str, FileStat] | None = None) -> Any:
        """A read-only zarr v3 store rooted at ``rel``, reading through this access object.

        ``pins`` (chunk keys relative to ``rel`` -> listed stat) pin each chunk read; a
        chunk key outside ``pins``, or one whose file vanished, raises
        :class:`~vinlens.store.errors.MissingChunksError` instead of letting zarr fill it.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release cached handles (safe to call twice)."""


def check_relative(rel: str) -> str:
    if rel in ("", "."):
        return ""
    if rel.startswith("/") or "\\" in rel:
        raise ValueError(f"store path {rel!r} must be relative and '/'-separated")
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"store path {rel!r} may not contain empty, '.' or '..' components")
    return rel
