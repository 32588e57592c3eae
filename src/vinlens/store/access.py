"""The one small, read-only file-access layer under the store reader and the diagnostics.

Every byte the reader, the dataset and the diagnostics take from a store (or from a raw
dataset directory of tar shards) comes through a :class:`StoreAccess`: ``stat``, ``list``,
``read`` a whole small file, ``read_range`` of a large one, ``open_binary`` for streaming
headers, and ``zarr_store`` for zarr's own reads. Keeping it this narrow is what lets the
fsspec-backed :class:`FsspecStoreAccess` (object storage: ``s3://``, ``gs://``,
``memory://``) and per-shard worker tasks serve every statistic unchanged.

Only regular files are ever read: a FIFO, device or socket where a store or raw-dataset file
belongs is refused from its ``stat`` (descriptors are opened ``O_NONBLOCK`` and checked with
``S_ISREG`` before any read), so a hostile directory can neither block a read forever nor feed
it ``/dev/zero``.

Paths given to an access object are relative, ``/``-separated and may not escape its root.
Nothing here writes; the zarr store handed out is opened ``read_only=True``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import io
import os
import stat as stat_module
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from vinlens.store.errors import DirectoryInsteadOfFileError, SpecialFileError, StoreAccessError
from vinlens.store.format import is_url

__all__ = [
    "DEFAULT_S3_OPTIONS",
    "S3FS_RETRIES",
    "FileStat",
    "FsspecStoreAccess",
    "LocalStoreAccess",
    "StoreAccess",
    "StoreAccessError",
    "open_regular_fd",
    "open_store_access",
]

_T = TypeVar("_T")

#: Defaults given to s3fs under the caller's ``storage_options`` (which win key by key):
#: connect/read timeouts and few botocore attempts, so an unreachable endpoint or missing
#: credentials fail with an error in seconds instead of minutes of retrying. s3fs's own
#: retry loop is set to :data:`S3FS_RETRIES` attempts on the filesystem object.
DEFAULT_S3_OPTIONS: dict[str, Any] = {
    "config_kwargs": {
        "connect_timeout": 5,
        "read_timeout": 10,
        # botocore's standard mode backs off on throttling (SlowDown) within these attempts.
        "retries": {"max_attempts": 3, "mode": "standard"},
    },
}
#: s3fs's own retry loop on top of botocore's; worst case of one request:
#: S3FS_RETRIES x max_attempts x (connect + read timeout) = 45 s.
S3FS_RETRIES = 1


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


def _file_kind(mode: int) -> str:
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
                f"is {_file_kind(mode)}; refused without reading it",
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
                fd = open_regular_fd(self._path(rel))
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
        return open(open_regular_fd(self._path(rel)), "rb", closefd=True)

    def zarr_store(self, rel: str = "") -> Any:
        return _regular_file_local_store(self._path(rel))

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


def _check_regular(path: Any) -> None:
    """Refuse a special file at ``path`` from its ``stat`` (a missing path is left to the caller)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not (stat_module.S_ISREG(mode) or stat_module.S_ISDIR(mode)):
        raise SpecialFileError(
            f"is {_file_kind(mode)}; refused without reading it",
            path=str(path),
            expected="a regular file",
        )


def _regular_file_local_store(root: str) -> Any:
    """zarr's read-only ``LocalStore`` at ``root`` that never opens a FIFO or device.

    zarr reads chunk files itself (compressed arrays); a chunk that is a FIFO would block
    its read forever, so every key is stat'ed first.
    """
    from zarr.storage import LocalStore

    class RegularFileLocalStore(LocalStore):
        async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
            _check_regular(self.root / key)
            return await super().get(key, prototype, byte_range)

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
            key_ranges = list(key_ranges)
            for key, _ in key_ranges:
                _check_regular(self.root / key)
            return cast(list[Any], await super().get_partial_values(prototype, key_ranges))

    return RegularFileLocalStore(root, read_only=True)


def _to_ns(value: Any) -> int:
    """Nanoseconds since the epoch of an fsspec ``info`` timestamp (datetime, number or text)."""
    if isinstance(value, datetime):
        return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * 1_000_000_000)
    if isinstance(value, str) and value:
        with contextlib.suppress(ValueError):
            return _to_ns(datetime.fromisoformat(value.replace("Z", "+00:00")))
    return 0


def _missing_extra(url: str, protocol: str, exc: BaseException) -> ImportError:
    if protocol in ("s3", "s3a"):
        return ImportError(
            f"{url}: reading s3:// URLs needs fsspec and s3fs: pip install 'vinlens[s3]' ({exc})"
        )
    return ImportError(
        f"{url}: the fsspec backend for {protocol}:// is not installed ({exc}); "
        "install it (for S3: pip install 'vinlens[s3]')"
    )


def _with_defaults(protocol: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's storage options over this module's defaults for the protocol."""
    options = dict(storage_options or {})
    if protocol in ("s3", "s3a"):
        # Deep copies: botocore rewrites the ``retries`` dict it is given in place.
        defaults = copy.deepcopy(DEFAULT_S3_OPTIONS)
        config = {**defaults["config_kwargs"], **copy.deepcopy(options.get("config_kwargs", {}))}
        options = {**defaults, **options, "config_kwargs": config}
    return options


def _filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The fsspec filesystem and the protocol-less root path of ``url``."""
    protocol = url.partition("://")[0].lower()
    try:
        import fsspec
    except ImportError as exc:
        raise _missing_extra(url, protocol, exc) from exc
    try:
        fs_class = fsspec.get_filesystem_class(protocol)
    except ValueError:
        known = ", ".join(sorted(p for p in fsspec.available_protocols() if len(p) > 1)[:24])
        raise ValueError(
            f"{url}: unknown protocol {protocol!r} (expected a local path or an fsspec URL: "
            f"{known}, ...)"
        ) from None
    except ImportError as exc:
        raise _missing_extra(url, protocol, exc) from exc
    try:
        fs = fs_class(**_with_defaults(protocol, storage_options))
        if protocol in ("s3", "s3a"):
            fs.retries = min(int(getattr(fs, "retries", S3FS_RETRIES)), S3FS_RETRIES)
    except Exception as exc:  # backends validate their options in many ways
        raise StoreAccessError(
            f"{url}: cannot set up the {protocol}:// filesystem with the given storage_options "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    return fs, str(fs_class._strip_protocol(url)).rstrip("/")


class _RangeFile(io.RawIOBase):
    """A seekable, read-only file over ranged reads of one object (one request per read).

    The tar header scanner reads large spans where headers are dense and small ones where
    big members sit between them, so each of its reads is one ranged GET and member data is
    never transferred.
    """

    def __init__(self, access: FsspecStoreAccess, rel: str, size: int) -> None:
        super().__init__()
        self._access = access
        self._rel = rel
        self._size = size
        self._pos = 0
        self.name = access.describe(rel)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = max(0, self._size - self._pos)
        data = self._access.read_sized_range(self._rel, self._pos, size, self._size)
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(view.nbytes)
        view[: len(data)] = data
        return len(data)


class FsspecStoreAccess(StoreAccess):
    """:class:`StoreAccess` over an fsspec URL (``s3://bucket/prefix``, ``gs://``, ``memory://``).

    ``storage_options`` go to the filesystem as pandas, xarray and Dask pass them; for S3,
    :data:`DEFAULT_S3_OPTIONS` bound every request in time. Object stores have no inode or
    ctime: a :class:`FileStat` carries the object's ETag, version id, size and last-modified
    time instead, which with the manifest's SHA-256 make up a remote store's generation.

    Top-level files (``manifest.json``, ``sample_index.jsonl``) are asked fresh every time,
    because they carry the generation; files below them (chunks, records) belong to one
    immutable published generation, so their listing and sizes are cached per access object.
    Every failure other than a missing object is a :class:`StoreAccessError` naming the URL.
    ``get_requests`` / ``head_requests`` count the requests made (for benchmarks).
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self._url = url.rstrip("/") if url.rstrip("/").partition("://")[2] else url
        self._options: dict[str, Any] = dict(storage_options or {})
        self._fs, self._base = _filesystem(self._url, self._options)
        self._stats: dict[str, FileStat] = {}
        self._lock = threading.Lock()
        self.get_requests = 0
        self.head_requests = 0

    @property
    def root(self) -> str:
        return self._url

    @property
    def is_remote(self) -> bool:
        return True

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self._options)

    @property
    def filesystem(self) -> Any:
        return self._fs

    def _full(self, rel: str) -> str:
        rel = _check_relative(rel)
        return f"{self._base}/{rel}" if rel else self._base

    def describe(self, rel: str) -> str:
        rel = _check_relative(rel)
        return f"{self._url}/{rel}" if rel else self._url

    def _call(self, rel: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, "no such file or object", self.describe(rel)
            ) from None
        except IsADirectoryError:
            raise IsADirectoryError(errno.EISDIR, "is a directory", self.describe(rel)) from None
        except SpecialFileError:
            raise
        except Exception as exc:  # network, credentials, permissions: name the URL
            raise StoreAccessError(
                f"{self.describe(rel)}: cannot read ({type(exc).__name__}: {exc})"
            ) from exc

    def _file_stat(self, rel: str, info: Mapping[str, Any]) -> FileStat:
        when = info.get("LastModified") or info.get("mtime") or info.get("updated")
        return FileStat(
            path=self.describe(rel),
            size=int(info.get("size") or 0),
            is_dir=info.get("type") == "directory",
            mtime_ns=_to_ns(when or info.get("created")),
            ctime_ns=_to_ns(info.get("created")),
            device=0,
            inode=0,
            etag=str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or "").strip('"'),
            version=str(info.get("VersionId") or info.get("generation") or ""),
        )

    def stat(self, rel: str = "") -> FileStat:
        cacheable = "/" in rel
        if cacheable:
            cached = self._stats.get(rel)
            if cached is not None:
                return cached
        with self._lock:
            self.head_requests += 1
        info = self._call(rel, self._fs.info, self._full(rel), refresh=True)
        st = self._file_stat(rel, info)
        if cacheable:
            self._stats[rel] = st
        return st

    def list_dir(self, rel: str = "") -> tuple[str, ...]:
        with self._lock:
            self.head_requests += 1
        entries = self._call(rel, self._fs.ls, self._full(rel), detail=False, refresh=True)
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        names.discard("")
        return tuple(sorted(names))

    def walk_files(self, rel: str = "", *, suffix: str | None = None) -> Iterator[str]:
        for path, _ in self.walk_file_stats(rel, suffix=suffix):
            yield path

    def walk_file_stats(
        self, rel: str = "", *, suffix: str | None = None
    ) -> Iterator[tuple[str, FileStat]]:
        base = self._full(rel)
        with self._lock:
            self.head_requests += 1
        found = self._call(rel, self._fs.find, base, detail=True)
        prefix = f"{rel}/" if rel else ""
        out: list[tuple[str, FileStat]] = []
        for name, info in found.items():
            name = str(name)
            if info.get("type") == "directory" or not name.startswith(base + "/"):
                continue
            sub = f"{prefix}{name[len(base) + 1 :]}"
            st = self._file_stat(sub, info)
            if "/" in sub:
                self._stats[sub] = st
            if suffix is None or sub.endswith(suffix):
                out.append((sub, st))
        yield from sorted(out)

    def _get(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        with self._lock:
            self.get_requests += 1
        data = self._call(rel, self._fs.cat_file, self._full(rel), start=start, end=end)
        return bytes(data)

    def read_bytes(self, rel: str) -> bytes:
        return self._get(rel)

    def read_bytes_with_stat(self, rel: str) -> tuple[bytes, FileStat]:
        # A GET does not report what it served through fsspec's API: stat before and after,
        # and only trust a read both agree on. A file replaced in between gets a stat that no
        # later stat equals, so the generation check reports the replacement.
        before = self.stat(rel)
        for _ in range(3):
            if before.is_dir:
                raise IsADirectoryError(errno.EISDIR, "is a directory", self.describe(rel))
            data = self._get(rel)
            after = self.stat(rel)
            if after == before and len(data) == after.size:
                return data, after
            before = after
        return data, dataclasses.replace(after, etag=f"{after.etag}(changed while read)")

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(
                f"{self.describe(rel)}: invalid byte range start={start} length={length}"
            )
        return self.read_sized_range(rel, start, length, self.stat(rel).size)

    def read_sized_range(self, rel: str, start: int, length: int, size: int) -> bytes:
        """:meth:`read_range` of a file whose size the caller knows (no stat request)."""
        end = min(size, start + length)
        if start >= end:
            return b""
        return self._get(rel, start, end)

    def open_binary(self, rel: str) -> IO[bytes]:
        st = self.stat(rel)
        if st.is_dir:
            raise IsADirectoryError(errno.EISDIR, "is a directory", self.describe(rel))
        return self.open_sized(rel, st.size)

    def open_sized(self, rel: str, size: int) -> IO[bytes]:
        """:meth:`open_binary` of an object whose size a listing gave (no stat request)."""
        return cast(IO[bytes], _RangeFile(self, rel, size))

    def zarr_store(self, rel: str = "") -> Any:
        from zarr.storage import FsspecStore

        options = _with_defaults(self._url.partition("://")[0].lower(), self._options)
        return FsspecStore.from_url(self.describe(rel), storage_options=options, read_only=True)

    def __getstate__(self) -> dict[str, Any]:
        # Worker tasks carry the URL and options; clients and caches are rebuilt there.
        return {"url": self._url, "storage_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["storage_options"])  # type: ignore[misc]


def open_store_access(
    location: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> StoreAccess:
    """The access object for ``location``: a local directory, or an fsspec URL.

    ``file://`` URLs and plain paths are local (``storage_options`` unused); any other
    ``scheme://`` goes through :class:`FsspecStoreAccess`. An unknown protocol raises
    ``ValueError`` and a missing backend ``ImportError``, both naming the URL (and, for S3,
    the extra to install: ``pip install 'vinlens[s3]'``).
    """
    text = os.fspath(location)
    if isinstance(location, str) and is_url(text):
        scheme, _, rest = text.partition("://")
        if scheme.lower() == "file":
            return LocalStoreAccess(rest or "/")
        return FsspecStoreAccess(text, storage_options)
    return LocalStoreAccess(text)
