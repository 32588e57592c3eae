"""The access layer over fsspec URLs (``s3://``, ``gs://``, ``memory://``, ...).

Every request runs under a total deadline (:data:`REQUEST_DEADLINE_S`), not only the
connect and read timeouts, and every read pinned to a listing is a conditional GET on S3
(``If-Match`` with the listed ETag, and the version id where the listing had one).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import io
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import datetime
from typing import IO, Any, TypeVar, cast

from vinlens.errors import VinlensError
from vinlens.store.access._base import (
    FileStat,
    StoreAccess,
    changed_since_listing,
    check_relative,
)
from vinlens.store.access._zarr import AccessZarrStore
from vinlens.store.errors import SpecialFileError, StoreAccessError, StoreReplacedError

__all__ = [
    "DEFAULT_S3_OPTIONS",
    "REQUEST_DEADLINE_S",
    "S3FS_RETRIES",
    "S3_EXTRA_MINIMUMS",
    "FsspecStoreAccess",
    "check_extra_versions",
    "installed_version",
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
#: s3fs's own retry loop on top of botocore's (the connect/read timeouts bound each
#: socket wait only; :data:`REQUEST_DEADLINE_S` bounds the whole request).
S3FS_RETRIES = 1
#: Total deadline of one request in seconds (connect, every byte, botocore's retries):
#: connect/read timeouts alone never end a request whose endpoint trickles bytes.
REQUEST_DEADLINE_S = 45.0


def _to_ns(value: Any) -> int:
    """Nanoseconds since the epoch of an fsspec ``info`` timestamp (datetime, number or text)."""
    if isinstance(value, datetime):
        return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1_000_000_000
    if isinstance(value, float):
        # Microseconds, as for a datetime: one filesystem may report the same time as a
        # float in one call and a datetime in another (memory://), and both must agree.
        return round(value * 1_000_000) * 1000
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


#: The oldest releases the ``s3`` extra accepts (``pyproject.toml``: ``vinlens[s3]``). Older
#: ones fail in ways that blame the store: s3fs 0.4 breaks inside every zarr read and its
#: listing cache hides a newly uploaded store.
S3_EXTRA_MINIMUMS: dict[str, str] = {"fsspec": "2024.6", "s3fs": "2024.6"}
_checked_versions: set[str] = set()


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``None`` when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string ("2024.6.1rc1" -> (2024, 6, 1))."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def check_extra_versions(url: str, protocol: str) -> None:
    """Refuse an fsspec / s3fs older than the ``s3`` extra requires, naming the fix.

    Runs at the first remote access of each protocol in a process (the answer cannot
    change while it runs), before any request is made.
    """
    if protocol in _checked_versions:
        return
    names = ("fsspec", "s3fs") if protocol in ("s3", "s3a") else ("fsspec",)
    too_old = []
    for name in names:
        found = installed_version(name)
        wanted = S3_EXTRA_MINIMUMS[name]
        if found is not None and _release(found) < _release(wanted):
            too_old.append(f"{name} {found} (needs >= {wanted})")
    if too_old:
        raise ImportError(
            f"{url}: {', '.join(too_old)} is older than vinlens supports for {protocol}:// "
            "URLs; reads would fail inside it and be blamed on the store. Upgrade with: "
            "pip install -U 'vinlens[s3]'"
        )
    _checked_versions.add(protocol)


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
    check_extra_versions(url, protocol)
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

    def __init__(
        self, access: FsspecStoreAccess, rel: str, size: int, pin: FileStat | None = None
    ) -> None:
        super().__init__()
        self._access = access
        self._rel = rel
        self._size = size
        self._pin = pin
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
        if self._pin is not None:
            data = self._access.read_pinned(self._rel, self._pin, self._pos, size)
        else:
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
        self._is_s3 = self._url.partition("://")[0].lower() in ("s3", "s3a")
        #: Seconds one request may take in all (connect, every byte, botocore's retries).
        self.request_deadline = REQUEST_DEADLINE_S
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
        rel = check_relative(rel)
        return f"{self._base}/{rel}" if rel else self._base

    def describe(self, rel: str) -> str:
        rel = check_relative(rel)
        return f"{self._url}/{rel}" if rel else self._url

    def _call(self, rel: str, name: str, *args: Any, **kwargs: Any) -> Any:
        """``fs.<name>(*args, **kwargs)`` under the total request deadline, errors naming the URL."""
        fs = self._fs
        if getattr(fs, "async_impl", False) and hasattr(fs, f"_{name}"):
            return self._call_async(rel, getattr(fs, f"_{name}"), *args, **kwargs)
        return self._translate(rel, getattr(fs, name), *args, **kwargs)

    def _call_async(
        self, rel: str, coro_fn: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any
    ) -> _T:
        from fsspec.asyn import sync

        deadline = self.request_deadline
        try:
            return cast(
                _T,
                self._translate(
                    rel, sync, self._fs.loop, coro_fn, *args, timeout=deadline, **kwargs
                ),
            )
        except _Timeout as exc:
            raise StoreAccessError(
                f"{self.describe(rel)}: no complete answer within {deadline:g} s, the total "
                "deadline of one request (connect and read timeouts alone let an endpoint "
                "that trickles bytes hold a request forever)"
            ) from exc.__cause__

    def _translate(self, rel: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, "no such file or object", self.describe(rel)
            ) from None
        except IsADirectoryError:
            raise IsADirectoryError(errno.EISDIR, "is a directory", self.describe(rel)) from None
        except (SpecialFileError, StoreReplacedError):
            raise
        except Exception as exc:  # network, credentials, permissions: name the URL
            if _is_timeout(exc):
                raise _Timeout() from exc
            if _precondition_failed(exc):
                raise changed_since_listing(
                    self.describe(rel), "its ETag no longer matches the listing's"
                ) from exc
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
        info = self._call(rel, "info", self._full(rel), refresh=True)
        st = self._file_stat(rel, info)
        if cacheable:
            self._stats[rel] = st
        return st

    def list_dir(self, rel: str = "") -> tuple[str, ...]:
        with self._lock:
            self.head_requests += 1
        entries = self._call(rel, "ls", self._full(rel), detail=False, refresh=True)
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
        found = self._call(rel, "find", base, detail=True)
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
        data = self._call(rel, "cat_file", self._full(rel), start=start, end=end)
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

    def zarr_store(self, rel: str = "", *, pins: Mapping[str, FileStat] | None = None) -> Any:
        return AccessZarrStore(self, rel, pins)

    # ---- reads pinned to a listing --------------------------------------------------

    def read_pinned(
        self, rel: str, pin: FileStat, start: int = 0, length: int | None = None
    ) -> bytes:
        if start < 0 or (length is not None and length < 0):
            raise ValueError(
                f"{self.describe(rel)}: invalid byte range start={start} length={length}"
            )
        end = pin.size if length is None else min(pin.size, start + length)
        if start >= end:
            return b""
        if self._is_s3 and (pin.etag or pin.version):
            return self._s3_pinned_get(rel, pin, start, end)
        # Backends without conditional GETs: the object must still be the listed one after.
        data = self._get(rel, start, end)
        with self._lock:
            self.head_requests += 1
        now = self._file_stat(rel, self._call(rel, "info", self._full(rel), refresh=True))
        what = pin.pin_mismatch(now)
        if what is not None:
            raise changed_since_listing(self.describe(rel), what)
        return data

    def _s3_pinned_get(self, rel: str, pin: FileStat, start: int, end: int) -> bytes:
        bucket, key, _ = self._fs.split_path(self._full(rel))
        kwargs: dict[str, Any] = {}
        if pin.etag:
            kwargs["IfMatch"] = f'"{pin.etag}"'
        if pin.version:
            kwargs["VersionId"] = pin.version
        if start or end < pin.size:
            kwargs["Range"] = f"bytes={start}-{end - 1}"
        with self._lock:
            self.get_requests += 1
        etag, version, data = self._call_async(rel, _s3_get_object, self._fs, bucket, key, kwargs)
        # A server that ignores If-Match still names what it served.
        if pin.etag and etag and etag != pin.etag:
            raise changed_since_listing(self.describe(rel), f"ETag {pin.etag} -> {etag}")
        if pin.version and version and version != pin.version:
            raise changed_since_listing(self.describe(rel), f"version {pin.version} -> {version}")
        return data

    def open_pinned(self, rel: str, pin: FileStat) -> IO[bytes]:
        return cast(IO[bytes], _RangeFile(self, rel, pin.size, pin))

    def __getstate__(self) -> dict[str, Any]:
        # Worker tasks carry the URL and options; clients and caches are rebuilt there.
        return {"url": self._url, "storage_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["storage_options"])  # type: ignore[misc]


class _Timeout(VinlensError, TimeoutError):
    """A request ran past its total deadline (turned into a StoreAccessError by the caller)."""


def _is_timeout(exc: BaseException) -> bool:
    from fsspec.exceptions import FSTimeoutError

    return isinstance(exc, FSTimeoutError)


def _precondition_failed(exc: BaseException) -> bool:
    """Whether a (translated) botocore error is S3's answer to a failed ``If-Match``."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        response = getattr(seen, "response", None)
        if isinstance(response, Mapping):
            code = str((response.get("Error") or {}).get("Code", ""))
            if code in ("PreconditionFailed", "412"):
                return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _s3_get_object(
    fs: Any, bucket: str, key: str, kwargs: Mapping[str, Any]
) -> tuple[str, str, bytes]:
    """One GET of an object, with the ETag and version id of what was served."""
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **kwargs)
    try:
        body = await response["Body"].read()
    finally:
        response["Body"].close()
    etag = str(response.get("ETag") or "").strip('"')
    return etag, str(response.get("VersionId") or ""), bytes(body)
