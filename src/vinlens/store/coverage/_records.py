"""The coverage records: per scene and for the whole raw dataset against one store.

Part of :mod:`vinlens.store.coverage` (its docstring states the rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

    The first fields keep the order positional construction relies on; these follow,
    with defaults:
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
