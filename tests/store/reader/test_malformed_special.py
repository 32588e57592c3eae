"""Special files and oversized or pathological JSON in a store or raw dataset directory.

Every read must end at once with an error of the project's own classes naming the file
(or a listed integrity problem): never a blocked read on a FIFO, an endless read of
``/dev/zero``, a whole-file read of a huge manifest, or a bare ``RecursionError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from vinlens.store.coverage import clear_coverage_cache, collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.format import (
    MAX_MANIFEST_BYTES,
    MAX_SAMPLE_INDEX_LINE_BYTES,
    ManifestError,
    SampleIndexError,
    SpecialFileError,
    StoreExistsError,
    VinOfflineStoreConfig,
    VinOfflineStoreError,
)
from vinlens.store.reader import VinOfflineStoreReader, capture_store_generation
from vinlens.store.synthetic import (
    SyntheticDatasetRecord,
    SyntheticStoreRecord,
    write_synthetic_dataset,
)
from vinlens.store.writer import VinOfflineStoreWriter

pytestmark = pytest.mark.timeout(60)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["manifest.json", "sample_index.jsonl"])
def test_fifo_top_level_file_is_refused_without_blocking(
    small_store: SyntheticStoreRecord, name: str
) -> None:
    _fifo(small_store.store_dir / name)
    opens: list[Callable[[], object]] = [
        lambda: VinOfflineStoreReader(small_store.config),
        lambda: collect_vin_offline_dataset_stats(small_store.config),
    ]
    if name == "manifest.json":
        opens.append(lambda: capture_store_generation(small_store.config))
    for open_it in opens:
        with pytest.raises(SpecialFileError, match=rf"{name}: is a FIFO"):
            open_it()


def test_fifo_tar_in_raw_dir_is_named(tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path)
    os.mkfifo(data.raw.raw_dir / "x.tar")
    clear_coverage_cache()
    with pytest.raises(SpecialFileError, match=r"x\.tar: is a FIFO"):
        collect_vin_offline_dataset_coverage(data.config)


def _first_chunk(store: Path, block: str = "rri") -> Path:
    chunks = sorted(
        p for p in (store / "shards/00000/arrays" / block / "c").rglob("*") if p.is_file()
    )
    return chunks[0]


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "fifo"])
def test_chunk_that_is_a_special_file_is_a_listed_problem(
    small_store: SyntheticStoreRecord, target: str
) -> None:
    chunk = _first_chunk(small_store.store_dir)
    chunk.unlink()
    if target == "fifo":
        os.mkfifo(chunk)
    else:
        chunk.symlink_to(target)
    with (
        VinOfflineStoreReader(small_store.config) as reader,
        pytest.raises(VinOfflineStoreError, match=r"shards/00000/arrays/rri"),
    ):
        reader.read_rows("00000", "rri", 0, 1)
    stats = collect_vin_offline_dataset_stats(small_store.config, max_samples=None)
    assert any("shards/00000/arrays/rri" in p.path for p in stats.integrity_problems), (
        stats.integrity_problems
    )


def test_replace_onto_a_directory_whose_manifest_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    target = tmp_path / "store"
    target.mkdir()
    os.mkfifo(target / "manifest.json")
    with pytest.raises(StoreExistsError, match="not a VIN offline store"):
        VinOfflineStoreWriter(target, num_candidates=4, replace=True)


# --------------------------------------------------------------------------------------
# Bounded manifest and index reads
# --------------------------------------------------------------------------------------


def test_huge_manifest_is_refused_after_a_bounded_read(small_store: SyntheticStoreRecord) -> None:
    manifest = small_store.store_dir / "manifest.json"
    with open(manifest, "r+b") as handle:  # sparse: no disk or time spent on the size
        handle.truncate(MAX_MANIFEST_BYTES + (1 << 30))
    with pytest.raises(ManifestError, match=r"manifest\.json: larger than"):
        VinOfflineStoreReader(small_store.config)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (
            b'{"format": "vin-offline-store", "version": ' + b"1" * 20_000 + b"}",
            "unparsable JSON value",
        ),
        (
            b'{"format": "vin-offline-store", "version": 1, "x": ' + b"{" * 100_000,
            "not valid JSON|nested",
        ),
    ],
    ids=["deep-nesting", "long-number", "deep-unterminated"],
)
def test_pathological_manifest_json_is_a_manifest_error(
    small_store: SyntheticStoreRecord, content: bytes, message: str
) -> None:
    (small_store.store_dir / "manifest.json").write_bytes(content)
    with pytest.raises(ManifestError, match=rf"manifest\.json: .*({message})"):
        VinOfflineStoreReader(small_store.config)


def _index_with_line(store: Path, line: bytes) -> None:
    path = store / "sample_index.jsonl"
    lines = path.read_bytes().splitlines()
    lines[3] = line
    path.write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            b'{"sample_key": "' + b"k" * (MAX_SAMPLE_INDEX_LINE_BYTES + 10) + b'"}',
            "line 4: line of",
        ),
        (b"[" * 30_000 + b"]" * 30_000, "line 4: JSON nested too deeply"),
        (b'{"sample_index": ' + b"9" * 10_000 + b"}", "line 4: unparsable JSON value"),
    ],
    ids=["long-line", "deep-nesting", "long-number"],
)
def test_pathological_index_lines_are_sample_index_errors(
    small_store: SyntheticStoreRecord, line: bytes, message: str
) -> None:
    _index_with_line(small_store.store_dir, line)
    with pytest.raises(SampleIndexError, match=rf"sample_index\.jsonl: {message}"):
        VinOfflineStoreReader(small_store.config)


def test_index_larger_than_its_lines_allow_is_refused(small_store: SyntheticStoreRecord) -> None:
    index = small_store.store_dir / "sample_index.jsonl"
    with open(index, "r+b") as handle:
        handle.truncate(1 << 32)
    with pytest.raises(SampleIndexError, match=r"sample_index\.jsonl: larger than 24 lines"):
        VinOfflineStoreReader(small_store.config)


def test_raw_dir_as_a_config_field_keeps_working(tmp_path: Path) -> None:
    data: SyntheticDatasetRecord = write_synthetic_dataset(tmp_path)
    config = VinOfflineStoreConfig(
        store_dir=str(data.config.store_dir), raw_dataset_dir=str(data.config.raw_dataset_dir)
    )
    clear_coverage_cache()
    assert collect_vin_offline_dataset_coverage(config) == collect_vin_offline_dataset_coverage(
        data.config
    )


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_compressed_chunk_that_is_a_special_file_never_blocks_zarr(
    tmp_path: Path, target: str
) -> None:
    from vinlens.store.synthetic import SyntheticStoreSpec, make_synthetic_samples

    path = tmp_path / "zstd"
    spec = SyntheticStoreSpec(num_scenes=1, snippets_per_scene=2, num_candidates=4)
    with VinOfflineStoreWriter(path, num_candidates=4, compressor="zstd", fsync=False) as writer:
        writer.add_batch(make_synthetic_samples(spec))
    chunk = _first_chunk(path)
    chunk.unlink()
    if target == "fifo":
        os.mkfifo(chunk)
    else:
        chunk.symlink_to(target)
    with (
        VinOfflineStoreReader(path) as reader,
        pytest.raises(
            VinOfflineStoreError, match=r"arrays/rri.*(FIFO|character device|not a regular file)"
        ),
    ):
        reader.read_rows("00000", "rri", 0, 1)
    stats = collect_vin_offline_dataset_stats(path, max_samples=None)
    assert any("arrays/rri" in p.path for p in stats.integrity_problems)
