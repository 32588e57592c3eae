"""Raw-dataset coverage against sets computed independently from ``tarfile`` member lists."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vinlens.store.coverage import (
    MAX_COVERAGE_EXAMPLES,
    collect_vin_offline_dataset_coverage,
    parse_webdataset_key,
    snippet_pairs_from_member_names,
    webdataset_key,
)
from vinlens.store.errors import TarExtendedHeaderTooLargeError, TruncatedTarError
from vinlens.store.format import StoreReplacedError, VinOfflineSample, VinOfflineStoreConfig
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreSpec,
    write_synthetic_dataset,
)
from vinlens.store.writer import VinOfflineStoreWriter

# WebDataset's own key regex (webdataset.tariterators.base_plus_ext), used as the oracle.
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


# WebDataset's default skip_meta: such members are metadata, never samples.
_WDS_META = re.compile(r"__[^/]*__($|/)")


def _oracle_pair(name: str) -> tuple[str, str] | None:
    match = _WDS_KEY.match(name)
    if match is None:
        return None
    parts = match.group(1).split("/")
    if len(parts) < 2 or not parts[-1] or not parts[-2]:
        return None
    return parts[-2], parts[-1]


def _expected_from_tars(
    raw_dir: Path, max_tars: int | None = None
) -> tuple[set[tuple[str, str]], list[str]]:
    tars = sorted(raw_dir.rglob("*.tar"), key=lambda p: p.relative_to(raw_dir).as_posix())
    if max_tars is not None:
        tars = tars[:max_tars]
    pairs: set[tuple[str, str]] = set()
    bad: list[str] = []
    for path in tars:
        with tarfile.open(path) as tf:
            for member in tf.getmembers():
                if not member.isreg() or _WDS_META.match(member.name):
                    continue
                pair = _oracle_pair(member.name)
                if pair is None:
                    bad.append(f"{path.relative_to(raw_dir).as_posix()}: {member.name}")
                else:
                    pairs.add(pair)
    return pairs, bad


def _store_pairs(store_dir: Path) -> set[tuple[str, str]]:
    import json

    lines = (store_dir / "sample_index.jsonl").read_text().splitlines()
    return {(row["scene_id"], row["snippet_id"]) for row in map(json.loads, lines)}


def _check_against_oracle(config: VinOfflineStoreConfig, max_tars: int | None = None) -> None:
    assert config.raw_dataset_dir is not None
    stats = collect_vin_offline_dataset_coverage(config, max_tars=max_tars)
    raw, bad = _expected_from_tars(config.raw_dataset_dir, max_tars)
    store = _store_pairs(config.store_dir)
    covered, missing, outside = raw & store, raw - store, store - raw
    assert stats.dataset_snippets == len(raw)
    assert stats.store_snippets == len(store)
    assert stats.covered_snippets == len(covered)
    assert stats.missing_in_store == len(missing)
    assert stats.outside_dataset == len(outside)
    assert stats.dataset_scenes == len({s for s, _ in raw})
    assert stats.store_scenes == len({s for s, _ in store})
    assert stats.coverage == (len(covered) / len(raw) if raw else None)
    assert stats.missing_examples == sorted(missing)[:MAX_COVERAGE_EXAMPLES]
    assert stats.outside_examples == sorted(outside)[:MAX_COVERAGE_EXAMPLES]
    assert stats.unparseable_members == len(bad)
    assert stats.unparseable_examples == bad[:MAX_COVERAGE_EXAMPLES]
    scenes = sorted({s for s, _ in raw | store})
    assert [row.scene_id for row in stats.per_scene] == scenes
    for row in stats.per_scene:

        def count(pairs: set[tuple[str, str]], scene: str = row.scene_id) -> int:
            return sum(1 for s, _ in pairs if s == scene)

        assert row.dataset_snippets == count(raw)
        assert row.store_snippets == count(store)
        assert row.covered_snippets == count(covered)
        assert row.missing_in_store == count(missing)
        assert row.outside_dataset == count(outside)
        assert row.coverage == (count(covered) / count(raw) if count(raw) else None)
    assert stats.store_dir == str(config.store_dir.absolute())


def test_synthetic_dataset_matches_tar_member_sets(tmp_path: Path) -> None:
    data = write_synthetic_dataset(
        tmp_path, SyntheticStoreSpec(num_scenes=4), SyntheticRawSpec(num_tars=4)
    )
    _check_against_oracle(data.config)
    stats = collect_vin_offline_dataset_coverage(data.config)
    # ... and against what the generator says it planted.
    assert set(stats.missing_examples) == set(data.raw.missing_in_store)
    assert set(stats.outside_examples) == set(data.raw.outside_dataset)
    assert stats.covered_snippets == len(data.raw.covered)
    assert stats.unparseable_members == len(data.raw.unparseable_members)
    assert stats.tar_shards_scanned == stats.tar_shards_found == 4
    assert stats.members_scanned == len(data.raw.member_names)
    assert data.raw.long_name_members, "the generator should plant GNU/pax long names"


def test_max_tars_and_progress(tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path, raw_spec=SyntheticRawSpec(num_tars=3))
    calls: list[tuple[int, int]] = []
    stats = collect_vin_offline_dataset_coverage(
        data.config, max_tars=2, progress_cb=lambda done, total: calls.append((done, total))
    )
    assert calls == [(0, 2), (1, 2), (2, 2)]
    assert stats.tar_shards_scanned == 2 and stats.tar_shards_found == 3
    _check_against_oracle(data.config, max_tars=2)
    with pytest.raises(ValueError, match="max_tars"):
        collect_vin_offline_dataset_coverage(data.config, max_tars=-1)


def _write_store(path: Path, pairs: list[tuple[str, str]]) -> None:
    with VinOfflineStoreWriter(path, num_candidates=2, scene_labels=False, fsync=False) as w:
        for i, (scene, snippet) in enumerate(pairs):
            w.add(
                VinOfflineSample(
                    sample_key=f"{scene}/{snippet}/{i}",
                    scene_id=scene,
                    snippet_id=snippet,
                    split="train",
                    vin_points=np.zeros((3, 3), dtype=np.float32),
                )
            )


def _write_tar(path: Path, names: list[str], fmt: int = tarfile.PAX_FORMAT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tf:
        for name in names:
            if name.endswith("/"):
                info = tarfile.TarInfo(name)
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
                continue
            info = tarfile.TarInfo(name)
            info.size = 3
            tf.addfile(info, io.BytesIO(b"abc"))


def test_nested_tars_long_names_and_odd_members(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write_store(store, [("scene_a", f"snippet_{i}") for i in range(30)] + [("scene_z", "s1")])
    raw = tmp_path / "raw"
    deep = "x" * 90 + "/" + "y" * 90
    _write_tar(
        raw / "b" / "nested" / "one.tar",
        [
            "scene_a/",  # a directory: not a member in the WebDataset sense
            *(f"{deep}/scene_a/snippet_{i}.rgb.jpg" for i in range(0, 90, 2)),
            *(f"scene_a/snippet_{i}.depth.png" for i in range(0, 90, 2)),
            "README",  # no extension
            "scene_b/.hidden",  # basename starts with '.'
            "lonely.json",  # one path component
        ],
        tarfile.GNU_FORMAT,
    )
    _write_tar(raw / "a.tar", ["scene_c/snippet_1.cls", "x/scene_c/snippet_2.json.gz"])
    (raw / "notes.txt").write_text("not a tar")
    config = VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=raw)
    _check_against_oracle(config)
    stats = collect_vin_offline_dataset_coverage(config)
    assert stats.tar_shards_scanned == 2
    assert stats.unparseable_members == 3
    assert stats.unparseable_examples == [
        "b/nested/one.tar: README",
        "b/nested/one.tar: scene_b/.hidden",
        "b/nested/one.tar: lonely.json",
    ]
    assert stats.missing_in_store == 30 + 2  # even snippets 30..88 and scene_c
    assert len(stats.missing_examples) == MAX_COVERAGE_EXAMPLES
    scene_z = next(row for row in stats.per_scene if row.scene_id == "scene_z")
    assert scene_z.coverage is None and scene_z.outside_dataset == 1


def test_empty_raw_directory_gives_undefined_coverage(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write_store(store, [("scene_a", "snippet_1")])
    (tmp_path / "raw").mkdir()
    stats = collect_vin_offline_dataset_coverage(
        VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=tmp_path / "raw")
    )
    assert stats.coverage is None
    assert stats.tar_shards_scanned == 0 and stats.dataset_snippets == 0
    assert stats.outside_dataset == 1


def test_missing_raw_directory_errors(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write_store(store, [("scene_a", "snippet_1")])
    with pytest.raises(ValueError, match="raw dataset directory"):
        collect_vin_offline_dataset_coverage(VinOfflineStoreConfig(store_dir=store))
    with pytest.raises(FileNotFoundError, match="absent"):
        collect_vin_offline_dataset_coverage(
            VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=tmp_path / "absent")
        )


def test_bad_tars_raise_errors_naming_them(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write_store(store, [("scene_a", "snippet_1")])
    raw = tmp_path / "raw"
    _write_tar(raw / "good.tar", [f"scene_a/snippet_{i}.jpg" for i in range(50)])
    data = (raw / "good.tar").read_bytes()
    (raw / "truncated.tar").write_bytes(data[: len(data) // 3 + 17])
    config = VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=raw)
    with pytest.raises(TruncatedTarError, match=re.escape(str(raw / "truncated.tar"))):
        collect_vin_offline_dataset_coverage(config)

    (raw / "truncated.tar").unlink()
    forged = bytearray(512)
    forged[0:14] = b"././@PaxHeader"
    forged[124:136] = b"77777777777\0"
    forged[156:157] = b"x"
    forged[257:265] = b"ustar\x0000"
    forged[148:156] = b" " * 8
    forged[148:156] = b"%06o\0 " % sum(forged)
    (raw / "forged.tar").write_bytes(bytes(forged) + bytes(2048))
    with pytest.raises(TarExtendedHeaderTooLargeError, match=r"forged\.tar: at byte 0"):
        collect_vin_offline_dataset_coverage(config)


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest.update(f"{path.relative_to(root)}|{st.st_mode}|{st.st_mtime_ns}".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_coverage_never_writes(tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path)
    before = _tree_digest(tmp_path)
    collect_vin_offline_dataset_coverage(data.config)
    assert _tree_digest(tmp_path) == before


def test_store_replaced_during_coverage_is_detected(tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path, raw_spec=SyntheticRawSpec(num_tars=3))
    other = tmp_path / "other"
    _write_store(other, [("scene_q", "snippet_q")])
    store = data.config.store_dir

    def replace_midway(done: int, total: int) -> None:
        if done == 1:
            aside = tmp_path / "aside"
            os.rename(store, aside)
            os.rename(other, store)

    with pytest.raises(StoreReplacedError, match="replaced"):
        collect_vin_offline_dataset_coverage(data.config, progress_cb=replace_midway)


@given(
    st.lists(
        st.text(alphabet="ab./_", min_size=0, max_size=12),
        min_size=1,
        max_size=4,
    ).map("/".join)
)
def test_key_rule_agrees_with_webdataset(name: str) -> None:
    assert parse_webdataset_key(name) == _oracle_pair(name)
    pairs, bad = snippet_pairs_from_member_names([name, name])
    if _WDS_META.match(name):
        assert pairs == set() and bad == []
        return
    expected = _oracle_pair(name)
    assert pairs == ({expected} if expected else set())
    assert bad == ([] if expected else [name, name])


def test_coverage_with_a_process_pool_equals_in_process(tmp_path: Path) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from vinlens.store.coverage import clear_coverage_cache

    data = write_synthetic_dataset(
        tmp_path, raw_spec=SyntheticRawSpec(num_tars=5, unparseable_members=30)
    )
    clear_coverage_cache()
    sequential = collect_vin_offline_dataset_coverage(data.config)
    for max_tars in (None, 2):
        clear_coverage_cache()
        expected = collect_vin_offline_dataset_coverage(data.config, max_tars=max_tars)
        clear_coverage_cache()
        with ProcessPoolExecutor(max_workers=2) as pool:
            pooled = collect_vin_offline_dataset_coverage(
                data.config, max_tars=max_tars, executor=pool
            )
        assert pooled == expected
    assert len(sequential.unparseable_examples) == 20


def _raw_tar(path: Path, names: list[str], *, encoding: str = "utf-8") -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding=encoding) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))


def test_webdataset_meta_members_are_skipped_and_hidden_basenames_keyed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write_store(store, [("scene_a", "snippet_1")])
    raw = tmp_path / "raw"
    raw.mkdir()
    _raw_tar(
        raw / "a.tar",
        [
            "__meta__/info.json",
            "__index__",
            "__key__.txt",
            "scene_a/snippet_1.rgb.jpg",
            "scene_a/.hidden",
            "x/__meta__/y.json",
        ],
    )
    record = collect_vin_offline_dataset_coverage(
        VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=raw)
    )
    # WebDataset skips the first two ("__key__.txt" does not match its rule); the key of
    # "scene_a/.hidden" is "scene_a/" (no snippet), of "__key__.txt" "__key__" (no scene).
    assert record.meta_members_skipped == 2
    assert record.members_scanned == 4
    assert record.unparseable_examples == ["a.tar: __key__.txt", "a.tar: scene_a/.hidden"]
    assert record.covered_snippets == 1
    assert record.dataset_snippets == 2  # ("x", "__meta__") is an ordinary key, as in WebDataset
    assert webdataset_key("scene_a/.hidden") == "scene_a/"
    assert webdataset_key(".hidden") is None


def test_non_utf8_member_names_are_carried_readably(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write_store(store, [("scene_a", "snippet_1")])
    raw = tmp_path / "raw"
    raw.mkdir()
    _raw_tar(
        raw / "latin.tar",
        ["scène_b/snippet_1.rgb.jpg", "scene_a/snippet_1.rgb.jpg", "caf\u00e9.txt"],
        encoding="latin-1",
    )
    record = collect_vin_offline_dataset_coverage(
        VinOfflineStoreConfig(store_dir=store, raw_dataset_dir=raw)
    )
    assert record.non_utf8_members == 2
    assert record.non_utf8_examples == [
        "latin.tar: sc\\xe8ne_b/snippet_1.rgb.jpg",
        "latin.tar: caf\\xe9.txt",
    ]
    assert record.unparseable_examples == ["latin.tar: caf\\xe9.txt"]
    assert [row.scene_id for row in record.per_scene] == ["scene_a", "sc\\xe8ne_b"]
    assert record.missing_examples == [("sc\\xe8ne_b", "snippet_1")]
    # Every string a widget, CSV export or terminal gets is encodable UTF-8.
    json.dumps(dataclasses.asdict(record), ensure_ascii=False).encode("utf-8")


def test_raw_snippets_by_scene_agrees_with_the_coverage_record(tmp_path: Path) -> None:
    from vinlens.store.coverage import raw_snippets_by_scene

    data = write_synthetic_dataset(tmp_path, raw_spec=SyntheticRawSpec(num_tars=3))
    record = collect_vin_offline_dataset_coverage(data.config, max_tars=2)
    by_scene = raw_snippets_by_scene(data.config, max_tars=2)
    assert {scene: len(snippets) for scene, snippets in by_scene.items()} == {
        row.scene_id: row.dataset_snippets for row in record.per_scene if row.dataset_snippets
    }
    assert {(s, n) for s, ns in by_scene.items() for n in ns} <= set(data.raw.raw_pairs)
