"""Raw-dataset coverage: which ASE snippets of the raw WebDataset tars a store contains.

The raw side comes from tar *headers* only (the package's tar header scanner, ``_tarscan``): every ``*.tar``
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

The package's private modules: ``_coverage`` (the operation), ``_records`` (its records),
``_keys`` (the key rules), ``_rawscan`` (the per-tar scan and its cache), and the tar header
scanner: ``_tarscan`` (its API, whose names and errors this ``__init__`` also exports),
``_tarwalk`` (the header walk) and ``_tarfields`` (the header layout and field decoders).
:mod:`vinlens.store.tarscan` re-exports the scanner's names for code that imports them there.
"""

from __future__ import annotations

from vinlens.store.coverage._coverage import collect_vin_offline_dataset_coverage
from vinlens.store.coverage._keys import (
    display_name,
    is_webdataset_meta,
    parse_webdataset_key,
    snippet_pairs_from_member_names,
    webdataset_key,
)
from vinlens.store.coverage._rawscan import (
    SMALL_TAR_BYTES,
    TAR_CACHE_ENTRIES,
    clear_coverage_cache,
    find_raw_tar_shards,
    raw_snippets_by_scene,
)
from vinlens.store.coverage._records import (
    MAX_COVERAGE_EXAMPLES,
    VinOfflineCoverageSceneDiagnostic,
    VinOfflineCoverageStats,
)
from vinlens.store.coverage._tarscan import (
    DEFAULT_MAX_EXTENDED_HEADER_BYTES,
    TarMemberHeader,
    list_tar_member_names,
    scan_tar_headers,
)
from vinlens.store.errors import (
    TarExtendedHeaderTooLargeError,
    TarHeaderChecksumError,
    TarHeaderFormatError,
    TarScanError,
    TruncatedTarError,
)

__all__ = [
    "DEFAULT_MAX_EXTENDED_HEADER_BYTES",
    "MAX_COVERAGE_EXAMPLES",
    "SMALL_TAR_BYTES",
    "TAR_CACHE_ENTRIES",
    "TarExtendedHeaderTooLargeError",
    "TarHeaderChecksumError",
    "TarHeaderFormatError",
    "TarMemberHeader",
    "TarScanError",
    "TruncatedTarError",
    "VinOfflineCoverageSceneDiagnostic",
    "VinOfflineCoverageStats",
    "clear_coverage_cache",
    "collect_vin_offline_dataset_coverage",
    "display_name",
    "find_raw_tar_shards",
    "is_webdataset_meta",
    "list_tar_member_names",
    "parse_webdataset_key",
    "raw_snippets_by_scene",
    "scan_tar_headers",
    "snippet_pairs_from_member_names",
    "webdataset_key",
]
