"""The raw side of coverage: the ``*.tar`` shards of a raw dataset, scanned per tar into
cached partials (on an executor when one is given).

Part of :mod:`vinlens.store.coverage` (its docstring states the rules).
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from vinlens.operations import CancelToken, check_executor, run_operation
from vinlens.store.access import FileStat, FsspecStoreAccess, StoreAccess, open_store_access
from vinlens.store.coverage._keys import (
    display_name,
    is_utf8,
    is_webdataset_meta,
    snippet_pairs_from_member_names,
)
from vinlens.store.coverage._records import MAX_COVERAGE_EXAMPLES, SnippetPair
from vinlens.store.coverage._tarscan import list_tar_member_names
from vinlens.store.errors import StoreAccessError, VinOfflineStoreError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import as_store_config


def find_raw_tar_shards(
    raw_dataset_dir: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """Relative paths of every ``*.tar`` below ``raw_dataset_dir`` (a path or URL), sorted."""
    access = open_store_access(raw_dataset_dir, storage_options)
    try:
        return [rel for rel, _ in _tar_shards(access)]
    finally:
        access.close()


def _tar_shards(access: StoreAccess) -> list[tuple[str, FileStat]]:
    """:func:`find_raw_tar_shards` with each tar's stat, on an access object the caller holds."""
    try:
        root = access.stat("")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{access.root}: raw dataset directory does not exist "
            "(expected a directory holding WebDataset *.tar shards)"
        ) from None
    if not root.is_dir:
        raise NotADirectoryError(
            f"{access.root}: raw dataset path is not a directory "
            "(expected a directory holding WebDataset *.tar shards)"
        )
    try:
        return list(access.walk_file_stats("", suffix=".tar"))
    except (VinOfflineStoreError, StoreAccessError):
        raise
    except OSError as exc:  # a dangling *.tar link, a directory that vanished: name it
        raise _unreadable(str(exc.filename or access.root), exc) from exc


# --------------------------------------------------------------------------------------
# Per-tar partials: computed by any worker, cached, folded in sorted tar order
# --------------------------------------------------------------------------------------

#: Remote tars up to this size are fetched whole in one request; larger ones are walked
#: header to header with ranged reads (member data is never transferred).
SMALL_TAR_BYTES = 8 << 20
#: Tar partials kept in this process's cache (each holds one tar's snippet pairs).
TAR_CACHE_ENTRIES = 4096


@dataclass(frozen=True)
class _TarTask:
    """What a worker needs to scan one tar: a location, options and ids, never a handle."""

    location: str
    storage_options: dict[str, Any] | None
    rel: str
    stat: FileStat


@dataclass(frozen=True)
class _TarPartial:
    """One tar's contribution to a coverage record (bounded examples, exact counts)."""

    pairs: frozenset[SnippetPair]
    members: int
    meta_members: int
    unparseable: int
    unparseable_examples: tuple[str, ...]
    non_utf8: int
    non_utf8_examples: tuple[str, ...]


_cache: OrderedDict[tuple[Any, ...], _TarPartial] = OrderedDict()
_cache_lock = threading.Lock()


def _cache_key(task: _TarTask) -> tuple[Any, ...]:
    st = task.stat
    # Object stores: URL, size, ETag (and version id); local files: path, size and inode times.
    return (st.path, st.size, st.etag, st.version, st.mtime_ns, st.ctime_ns, st.device, st.inode)


def clear_coverage_cache() -> None:
    """Forget every cached per-tar partial of this process."""
    with _cache_lock:
        _cache.clear()


def _member_names(access: StoreAccess, rel: str, stat: FileStat) -> list[str]:
    # Every read is pinned to the listing's stat: a tar replaced while its headers are
    # walked is a StoreReplacedError, never a record mixing two objects.
    name = access.describe(rel)
    if isinstance(access, FsspecStoreAccess) and stat.size <= SMALL_TAR_BYTES:
        data = access.read_pinned(rel, stat)
        return list_tar_member_names(io.BytesIO(data), name=name, regular_only=True)
    with access.open_pinned(rel, stat) as handle:
        return list_tar_member_names(handle, name=name, regular_only=True)


def _unreadable(name: str, exc: OSError) -> StoreAccessError:
    reason = exc.strerror or str(exc)
    return StoreAccessError(f"{name}: cannot be read as a tar ({type(exc).__name__}: {reason})")


def _scan_tar(task: _TarTask) -> _TarPartial:
    """The partial of one tar (runs in a worker: opens its own access from the task)."""
    access = open_store_access(task.location, task.storage_options)
    try:
        names = _member_names(access, task.rel, task.stat)
    except (VinOfflineStoreError, StoreAccessError):
        raise
    except OSError as exc:  # vanished, dangling link, permissions: name the tar
        raise _unreadable(access.describe(task.rel), exc) from exc
    finally:
        access.close()
    meta = sum(1 for name in names if name.startswith("__") and is_webdataset_meta(name))
    pairs, bad = snippet_pairs_from_member_names(names)
    odd = [name for name in names if not is_utf8(name)]
    return _TarPartial(
        pairs=frozenset(pairs),
        members=len(names) - meta,
        meta_members=meta,
        unparseable=len(bad),
        unparseable_examples=tuple(
            f"{display_name(task.rel)}: {display_name(n)}" for n in bad[:MAX_COVERAGE_EXAMPLES]
        ),
        non_utf8=len(odd),
        non_utf8_examples=tuple(
            f"{display_name(task.rel)}: {display_name(n)}" for n in odd[:MAX_COVERAGE_EXAMPLES]
        ),
    )


def _cached(task: _TarTask) -> _TarPartial | None:
    with _cache_lock:
        partial = _cache.get(_cache_key(task))
        if partial is not None:
            _cache.move_to_end(_cache_key(task))
        return partial


def _remember(task: _TarTask, partial: _TarPartial) -> None:
    with _cache_lock:
        _cache[_cache_key(task)] = partial
        while len(_cache) > TAR_CACHE_ENTRIES:
            _cache.popitem(last=False)


class _TarPartials:
    """Per-tar partials in task order (what the coverage fold accumulates)."""

    __slots__ = ("items",)

    def __init__(self, items: list[_TarPartial] | None = None) -> None:
        self.items: list[_TarPartial] = [] if items is None else items

    def merge(self, other: _TarPartials) -> _TarPartials:
        self.items.extend(other.items)
        return self


def _scan_tar_task(task: _TarTask) -> _TarPartials:
    """What an executor runs for one tar (top level, so it pickles)."""
    return _TarPartials([_scan_tar(task)])


def _known_tar(task: _TarTask) -> _TarPartials | None:
    partial = _cached(task)
    return None if partial is None else _TarPartials([partial])


def _tar_partials(
    tasks: Sequence[_TarTask],
    executor: Executor | None,
    progress_cb: Callable[[int, int], None] | None,
    cancel: CancelToken | threading.Event | None,
) -> list[_TarPartial]:
    """Partials of ``tasks`` in task order, from the cache, in process or on ``executor``."""
    folded = run_operation(
        tasks,
        _scan_tar_task,
        start=_TarPartials,
        executor=executor,
        progress=progress_cb,
        cancel=cancel,
        known=_known_tar,
    )
    for task, partial in zip(tasks, folded.items, strict=True):
        _remember(task, partial)
    return folded.items


@dataclass(frozen=True)
class _RawScan:
    root: str
    found: int
    partials: list[_TarPartial]


def raw_partials(
    config: VinOfflineStoreConfig,
    max_tars: int | None,
    progress_cb: Callable[[int, int], None] | None,
    executor: Executor | None,
    cancel: CancelToken | threading.Event | None,
) -> _RawScan:
    """The per-tar partials of the raw dataset (listing, cap, cache, executor)."""
    assert config.raw_dataset_dir is not None
    raw_access = open_store_access(config.raw_dataset_dir, config.storage_options)
    try:
        tars = _tar_shards(raw_access)
        raw_root = raw_access.root
    finally:
        raw_access.close()
    found = len(tars)
    if max_tars is not None:
        tars = tars[:max_tars]
    options = config.storage_options if raw_access.is_remote else None
    tasks = [_TarTask(raw_root, options, rel, st) for rel, st in tars]
    return _RawScan(raw_root, found, _tar_partials(tasks, executor, progress_cb, cancel))


def raw_snippets_by_scene(
    store: VinOfflineStoreConfig,
    *,
    max_tars: int | None = None,
    progress_cb: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> dict[str, frozenset[str]]:
    """Raw snippet ids per scene id of ``store.raw_dataset_dir`` (names as records show them).

    The same per-tar partials as :func:`collect_vin_offline_dataset_coverage` (cached, so
    right after a coverage scan this costs only the listing); for views that show which
    snippets of a scene are missing. Arguments as there; the store itself is not read.
    """
    check_executor(executor)
    config = as_store_config(store)
    if config.raw_dataset_dir is None:
        raise ValueError(f"{config.store_dir}: no raw_dataset_dir to list snippets from")
    by_scene: dict[str, set[str]] = {}
    for partial in raw_partials(config, max_tars, progress_cb, executor, cancel).partials:
        for scene, snippet in partial.pairs:
            by_scene.setdefault(display_name(scene), set()).add(display_name(snippet))
    return {scene: frozenset(snippets) for scene, snippets in sorted(by_scene.items())}
