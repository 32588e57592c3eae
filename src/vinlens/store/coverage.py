"""Raw-dataset coverage: which ASE snippets of the raw WebDataset tars a store contains.

The raw side comes from tar *headers* only (:mod:`vinlens.store.tarscan`): every ``*.tar``
found recursively under ``raw_dataset_dir`` (sorted by relative path, so ``max_tars`` always
picks the same shards) is listed without extracting anything. The store side comes from
``sample_index.jsonl`` through :class:`~vinlens.store.reader.VinOfflineStoreReader`.

Keys follow the WebDataset rule of the spec: a member's key is its path with everything
from the first ``.`` of the basename removed, and the key's last two path components are
``scene_id/snippet_id`` (``a/b/scene_000001/snippet_000004.rgb.jpg`` ->
``("scene_000001", "snippet_000004")``). Only regular files are members in this sense
(directories and links are not samples, as in WebDataset). A member is *unparseable* when
its basename has no ``.`` after its first character (WebDataset finds no key in it) or
its key has fewer than two non-empty path components; such members are counted and
listed, never silently dropped.

Coverage per scene and overall is ``covered / dataset_snippets``; it is ``None`` where
the raw data has no snippet of the scene (the ratio is undefined, not zero).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vinlens.store.access import StoreAccess, open_store_access
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader, as_store_config
from vinlens.store.tarscan import list_tar_member_names

__all__ = [
    "MAX_COVERAGE_EXAMPLES",
    "VinOfflineCoverageSceneDiagnostic",
    "VinOfflineCoverageStats",
    "collect_vin_offline_dataset_coverage",
    "find_raw_tar_shards",
    "parse_webdataset_key",
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
    and ``raw_dataset_dir``.
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


def webdataset_key(member_name: str) -> str | None:
    """The WebDataset key of a member name (path up to the basename's first ``.``), or ``None``."""
    slash = member_name.rfind("/") + 1
    dot = member_name.find(".", slash)
    return member_name[:dot] if dot > slash else None


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
    several consecutive members (``.rgb.jpg``, ``.depth.png``, ...) with one key.
    """
    keys: set[str] = set()
    add = keys.add
    keyless = False
    for name in names:  # webdataset_key, inlined: this loop runs once per raw member
        slash = name.rfind("/") + 1
        dot = name.find(".", slash)
        if dot > slash:
            add(name[:dot])
        else:
            keyless = True
    pairs: set[SnippetPair] = set()
    bad_keys: set[str] = set()
    for key in keys:
        pair = _pair_of_key(key)
        if pair is None:
            bad_keys.add(key)
        else:
            pairs.add(pair)
    if not keyless and not bad_keys:
        return pairs, []
    bad = []
    for name in names:
        member_key = webdataset_key(name)
        if member_key is None or member_key in bad_keys:
            bad.append(name)
    return pairs, bad


def find_raw_tar_shards(raw_dataset_dir: str | os.PathLike[str]) -> list[str]:
    """Relative paths of every ``*.tar`` below ``raw_dataset_dir``, sorted."""
    return _tar_shards(open_store_access(raw_dataset_dir))


def _tar_shards(access: StoreAccess) -> list[str]:
    """:func:`find_raw_tar_shards` on an access object the caller already holds."""
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
    return sorted(access.walk_files("", suffix=".tar"))


def collect_vin_offline_dataset_coverage(
    store: VinOfflineStoreConfig,
    *,
    max_tars: int | None = None,
    progress_cb: Callable[[int, int], None] | None = None,
) -> VinOfflineCoverageStats:
    """Compare raw ASE tar-header coverage against an immutable VIN store.

    ``store.raw_dataset_dir`` names the raw dataset. ``max_tars`` caps the shards scanned
    (the first ones in sorted path order). ``progress_cb(done, total)`` is called with
    ``done=0`` before the first tar and after each tar. A tar that cannot be scanned
    (truncated, corrupt, hostile headers) raises an error naming it; a store replaced
    while coverage was computed raises :class:`~vinlens.store.format.StoreReplacedError`.
    """
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

        raw_access = open_store_access(config.raw_dataset_dir)
        try:
            tars = _tar_shards(raw_access)
            found = len(tars)
            if max_tars is not None:
                tars = tars[:max_tars]
            total = len(tars)
            if progress_cb is not None:
                progress_cb(0, total)
            dataset_pairs: set[SnippetPair] = set()
            unparseable = 0
            unparseable_examples: list[str] = []
            members = 0
            for done, rel in enumerate(tars, start=1):
                with raw_access.open_binary(rel) as handle:
                    names = list_tar_member_names(
                        handle, name=raw_access.describe(rel), regular_only=True
                    )
                members += len(names)
                pairs, bad = snippet_pairs_from_member_names(names)
                dataset_pairs |= pairs
                unparseable += len(bad)
                for name in bad[: MAX_COVERAGE_EXAMPLES - len(unparseable_examples)]:
                    unparseable_examples.append(f"{rel}: {name}")
                if progress_cb is not None:
                    progress_cb(done, total)
        finally:
            raw_access.close()
        # The sample index was read at open; make sure it still is the store at the path.
        reader.check_generation()

    return _coverage_record(
        store_dir=store_dir,
        raw_dataset_dir=str(Path(raw_access.root)),
        tar_shards_scanned=total,
        tar_shards_found=found,
        members_scanned=members,
        dataset_pairs=dataset_pairs,
        store_pairs=store_pairs,
        unparseable=unparseable,
        unparseable_examples=unparseable_examples,
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
            scene_id=scene,
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
        missing_examples=heapq.nsmallest(MAX_COVERAGE_EXAMPLES, missing),
        outside_examples=heapq.nsmallest(MAX_COVERAGE_EXAMPLES, outside),
        tar_shards_found=tar_shards_found,
        members_scanned=members_scanned,
        unparseable_members=unparseable,
        unparseable_examples=unparseable_examples,
        raw_dataset_dir=raw_dataset_dir,
    )
