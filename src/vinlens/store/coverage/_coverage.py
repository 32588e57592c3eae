"""Raw-dataset coverage: the raw tars' snippets against a store's sample index, per scene.

Behind the :mod:`vinlens.store.coverage` door (its docstring states the rules).
"""

from __future__ import annotations

import heapq
import io
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from vinlens.operations import CancelToken, check_executor, run_operation
from vinlens.store.access import FileStat, FsspecStoreAccess, StoreAccess, open_store_access
from vinlens.store.coverage._tarscan import list_tar_member_names
from vinlens.store.errors import StoreAccessError, VinOfflineStoreError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader, as_store_config

__all__ = [
    "MAX_COVERAGE_EXAMPLES",
    "SMALL_TAR_BYTES",
    "TAR_CACHE_ENTRIES",
    "VinOfflineCoverageSceneDiagnostic",
    "VinOfflineCoverageStats",
    "clear_coverage_cache",
    "collect_vin_offline_dataset_coverage",
    "display_name",
    "find_raw_tar_shards",
    "is_webdataset_meta",
    "parse_webdataset_key",
    "raw_snippets_by_scene",
    "snippet_pairs_from_member_names",
    "webdataset_key",
]

#: Length bound of every example list in a coverage record.
MAX_COVERAGE_EXAMPLES = 20

SnippetPair = tuple[str, str]


@dataclass(frozen=True)
class VinOfflineCoverageSceneDiagnostic:
    """Per-scene raw-dataset coverage against one immutable offline store.

    ``missing_in_store`` and ``outside_dataset`` are snippet counts; ``coverage`` is
    ``covered_snippets / dataset_snippets``, ``None`` for a scene absent from the raw data.
    """

    scene_id: str
    dataset_snippets: int
    store_snippets: int
    covered_snippets: int
    missing_in_store: int
    outside_dataset: int
    coverage: float | None


@dataclass(frozen=True)
class VinOfflineCoverageStats:
    """Raw-dataset coverage summary for one immutable VIN offline store.

    The seed's fields come first, unchanged. Added at the end (with defaults):
    ``tar_shards_found`` (tars under the raw directory before the ``max_tars`` cap),
    ``members_scanned`` (regular-file members read from the scanned headers),
    ``unparseable_members`` and ``unparseable_examples`` (``"<tar>: <member>"``, bounded),
    ``raw_dataset_dir`` (a path, or the URL for object storage),
    ``meta_members_skipped`` (WebDataset metadata members such as ``__meta__/info.json``,
    skipped as WebDataset skips them), ``non_utf8_members`` and ``non_utf8_examples``
    (``"<tar>: <member>"``, bounded) for member names that are not valid UTF-8.

    Every string in the record is valid UTF-8 text: tar member names are bytes, and bytes
    that do not decode (a Latin-1 ``\xe9``) are shown as the escape ``\xe9`` (see
    :func:`display_name`) in ``per_scene[].scene_id``, the example lists and
    ``non_utf8_examples``; matching against the store uses the undamaged names.
    """

    store_dir: str
    tar_shards_scanned: int
    dataset_scenes: int
    store_scenes: int
    dataset_snippets: int
    store_snippets: int
    covered_snippets: int
    missing_in_store: int
    outside_dataset: int
    coverage: float | None
    per_scene: list[VinOfflineCoverageSceneDiagnostic] = field(default_factory=list)
    missing_examples: list[tuple[str, str]] = field(default_factory=list)
    outside_examples: list[tuple[str, str]] = field(default_factory=list)
    tar_shards_found: int = 0
    members_scanned: int = 0
    unparseable_members: int = 0
    unparseable_examples: list[str] = field(default_factory=list)
    raw_dataset_dir: str = ""
    meta_members_skipped: int = 0
    non_utf8_members: int = 0
    non_utf8_examples: list[str] = field(default_factory=list)


# WebDataset's ``base_plus_ext``: the key is everything before the first "." that is followed
# only by non-"/" characters, after at least one non-"." character.
_WDS_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
# WebDataset's ``skip_meta`` default: members such as ``__meta__/info.json`` or
# ``__index__`` are metadata, never samples.
_WDS_META = re.compile(r"__[^/]*__($|/)")


def webdataset_key(member_name: str) -> str | None:
    """The WebDataset key of a member name, or ``None`` where WebDataset finds none.

    Usually the path up to the basename's first ``.`` (``a/b.rgb.jpg`` -> ``a/b``). A basename
    that *starts* with ``.`` does not make the name keyless: WebDataset's rule then takes
    the directory part with its slash as the key (``scene/.hidden`` -> ``"scene/"``), which
    has no snippet component and so counts as unparseable here.
    """
    slash = member_name.rfind("/") + 1
    dot = member_name.find(".", slash)
    if dot > slash:
        return member_name[:dot]
    if dot < 0:
        return None
    match = _WDS_BASE_PLUS_EXT.match(member_name)
    return None if match is None else match.group(1)


def is_webdataset_meta(member_name: str) -> bool:
    """True for metadata members WebDataset skips (``__[^/]*__($|/)`` at the name's start)."""
    return member_name.startswith("__") and _WDS_META.match(member_name) is not None


def parse_webdataset_key(member_name: str) -> SnippetPair | None:
    """``(scene_id, snippet_id)`` of a tar member name, or ``None`` when it does not parse."""
    key = webdataset_key(member_name)
    return None if key is None else _pair_of_key(key)


def _pair_of_key(key: str) -> SnippetPair | None:
    parts = key.rsplit("/", 2)
    if len(parts) < 2 or not parts[-1] or not parts[-2]:
        return None
    return parts[-2], parts[-1]


def snippet_pairs_from_member_names(
    names: Sequence[str],
) -> tuple[set[SnippetPair], list[str]]:
    """Snippet pairs of member names, and the names that do not parse (in order).

    Keys are deduplicated before they are split, since a WebDataset sample spreads over
    several consecutive members (``.rgb.jpg``, ``.depth.png``, ...) with one key. Metadata
    members (:func:`is_webdataset_meta`) are neither pairs nor unparseable: WebDataset
    skips them.
    """
    keys: set[str] = set()
    add = keys.add
    irregular = False
    for name in names:  # webdataset_key, inlined: this loop runs once per raw member
        slash = name.rfind("/") + 1
        dot = name.find(".", slash)
        if dot > slash and name[0] != "_":
            add(name[:dot])
        else:
            irregular = True
    if irregular:
        for name in names:
            slash = name.rfind("/") + 1
            dot = name.find(".", slash)
            if dot > slash and name[0] != "_":
                continue
            if is_webdataset_meta(name):
                continue
            key = webdataset_key(name)
            if key is not None:
                add(key)
    pairs: set[SnippetPair] = set()
    bad_keys: set[str] = set()
    for key in keys:
        pair = _pair_of_key(key)
        if pair is None:
            bad_keys.add(key)
        else:
            pairs.add(pair)
    if not irregular and not bad_keys:
        return pairs, []
    bad = []
    for name in names:
        if is_webdataset_meta(name):
            continue
        member_key = webdataset_key(name)
        if member_key is None or member_key in bad_keys:
            bad.append(name)
    return pairs, bad


def display_name(name: str) -> str:
    """A name as records carry it: valid UTF-8 text, readable, for any tar member name.

    Tar member names are bytes; the scanner decodes them as UTF-8 with ``surrogateescape``
    so nothing is lost. Undecodable bytes (a Latin-1 ``\xe9``) become the four characters
    ``\xe9`` here, so widgets, CSV export and terminals can show them.
    """
    if name.isascii():
        return name
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _is_utf8(name: str) -> bool:
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    odd = [name for name in names if not _is_utf8(name)]
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


def _raw_partials(
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
    for partial in _raw_partials(config, max_tars, progress_cb, executor, cancel).partials:
        for scene, snippet in partial.pairs:
            by_scene.setdefault(display_name(scene), set()).add(display_name(snippet))
    return {scene: frozenset(snippets) for scene, snippets in sorted(by_scene.items())}


def collect_vin_offline_dataset_coverage(
    store: VinOfflineStoreConfig,
    *,
    max_tars: int | None = None,
    progress_cb: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
    cancel: CancelToken | threading.Event | None = None,
) -> VinOfflineCoverageStats:
    """Compare raw ASE tar-header coverage against an immutable VIN store.

    ``store.raw_dataset_dir`` names the raw dataset (a directory or an fsspec URL; URLs use
    ``store.storage_options``). ``max_tars`` caps the shards scanned (the first ones in
    sorted path order). ``progress_cb(done, total)`` is called with ``done=0`` before the
    first tar and after each tar finishes (in completion order with an executor).
    ``executor`` is any :class:`concurrent.futures.Executor` (a process pool, or
    ``distributed.Client(...).get_executor()``): each task carries the raw dataset's
    location, storage options and one tar's relative path, never an open handle, and the
    record is equal (``==``) with or without it. Each tar's partial is cached in this process
    by (URL or path, size, ETag/version or inode times), so a rescan of unchanged tars reads
    nothing but the listing. ``cancel`` (a :class:`~vinlens.operations.CancelToken` or a
    ``threading.Event``) stops the scan between tars: queued tars are dropped and
    :class:`~vinlens.operations.OperationCancelled` is raised.

    A tar that cannot be scanned (truncated, corrupt, hostile headers, not a regular file)
    raises an error naming it; a store replaced while coverage was computed raises
    :class:`~vinlens.store.format.StoreReplacedError`; an ``executor`` other than ``None``
    or an ``Executor`` instance is a ``TypeError`` naming what is accepted.
    """
    check_executor(executor)
    config = as_store_config(store)
    if config.raw_dataset_dir is None:
        raise ValueError(
            f"{config.store_dir}: coverage needs the raw dataset directory "
            "(VinOfflineStoreConfig.raw_dataset_dir, or --raw DIR on the command line)"
        )
    if max_tars is not None and max_tars < 0:
        raise ValueError(f"max_tars must be None or >= 0, got {max_tars}")

    with VinOfflineStoreReader(config) as reader:
        store_pairs = {(row.scene_id, row.snippet_id) for row in reader.samples}
        store_dir = str(reader.store_dir)

        raw = _raw_partials(config, max_tars, progress_cb, executor, cancel)
        raw_root, found, partials = raw.root, raw.found, raw.partials
        # The sample index was read at open; make sure it still is the store at the path.
        reader.check_generation()

    dataset_pairs: set[SnippetPair] = set()
    unparseable_examples: list[str] = []
    non_utf8_examples: list[str] = []
    for partial in partials:
        dataset_pairs |= partial.pairs
        room = MAX_COVERAGE_EXAMPLES - len(unparseable_examples)
        unparseable_examples.extend(partial.unparseable_examples[:room])
        room = MAX_COVERAGE_EXAMPLES - len(non_utf8_examples)
        non_utf8_examples.extend(partial.non_utf8_examples[:room])
    return _coverage_record(
        store_dir=store_dir,
        raw_dataset_dir=raw_root,
        tar_shards_scanned=len(partials),
        tar_shards_found=found,
        members_scanned=sum(p.members for p in partials),
        dataset_pairs=dataset_pairs,
        store_pairs=store_pairs,
        unparseable=sum(p.unparseable for p in partials),
        unparseable_examples=unparseable_examples,
        meta_members_skipped=sum(p.meta_members for p in partials),
        non_utf8_members=sum(p.non_utf8 for p in partials),
        non_utf8_examples=non_utf8_examples,
    )


def _ratio(covered: int, total: int) -> float | None:
    return covered / total if total else None


def _coverage_record(
    *,
    store_dir: str,
    raw_dataset_dir: str,
    tar_shards_scanned: int,
    tar_shards_found: int,
    members_scanned: int,
    dataset_pairs: set[SnippetPair],
    store_pairs: set[SnippetPair],
    unparseable: int,
    unparseable_examples: list[str],
    meta_members_skipped: int,
    non_utf8_members: int,
    non_utf8_examples: list[str],
) -> VinOfflineCoverageStats:
    covered = dataset_pairs & store_pairs
    missing = dataset_pairs - store_pairs
    outside = store_pairs - dataset_pairs

    def by_scene(pairs: set[SnippetPair]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for scene, _ in pairs:
            counts[scene] = counts.get(scene, 0) + 1
        return counts

    dataset_by, store_by = by_scene(dataset_pairs), by_scene(store_pairs)
    covered_by, missing_by, outside_by = by_scene(covered), by_scene(missing), by_scene(outside)
    per_scene = [
        VinOfflineCoverageSceneDiagnostic(
            scene_id=display_name(scene),
            dataset_snippets=dataset_by.get(scene, 0),
            store_snippets=store_by.get(scene, 0),
            covered_snippets=covered_by.get(scene, 0),
            missing_in_store=missing_by.get(scene, 0),
            outside_dataset=outside_by.get(scene, 0),
            coverage=_ratio(covered_by.get(scene, 0), dataset_by.get(scene, 0)),
        )
        for scene in sorted(set(dataset_by) | set(store_by))
    ]
    return VinOfflineCoverageStats(
        store_dir=store_dir,
        tar_shards_scanned=tar_shards_scanned,
        dataset_scenes=len(dataset_by),
        store_scenes=len(store_by),
        dataset_snippets=len(dataset_pairs),
        store_snippets=len(store_pairs),
        covered_snippets=len(covered),
        missing_in_store=len(missing),
        outside_dataset=len(outside),
        coverage=_ratio(len(covered), len(dataset_pairs)),
        per_scene=per_scene,
        missing_examples=_display_pairs(heapq.nsmallest(MAX_COVERAGE_EXAMPLES, missing)),
        outside_examples=_display_pairs(heapq.nsmallest(MAX_COVERAGE_EXAMPLES, outside)),
        tar_shards_found=tar_shards_found,
        members_scanned=members_scanned,
        unparseable_members=unparseable,
        unparseable_examples=unparseable_examples,
        raw_dataset_dir=raw_dataset_dir,
        meta_members_skipped=meta_members_skipped,
        non_utf8_members=non_utf8_members,
        non_utf8_examples=non_utf8_examples,
    )


def _display_pairs(pairs: list[SnippetPair]) -> list[SnippetPair]:
    return [(display_name(scene), display_name(snippet)) for scene, snippet in pairs]
