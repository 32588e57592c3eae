"""Written == read, for every block kind, dtype and shard layout the writer produces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vinlens.store.dataset import VinOfflineDataset
from vinlens.store.format import (
    NUMERIC_DTYPES,
    BlockKind,
    RecordDecodeError,
    VinOfflineSample,
    decode_record,
    encode_record,
)
from vinlens.store.reader import VinOfflineStoreReader, open_vin_offline_store
from vinlens.store.synthetic import (
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_store,
)
from vinlens.store.writer import VinOfflineStoreWriter, chunk_shape_for


def _assert_same_sample(read: VinOfflineSample, written: VinOfflineSample) -> None:
    assert (read.sample_key, read.scene_id, read.snippet_id, read.split) == (
        written.sample_key,
        written.scene_id,
        written.snippet_id,
        written.split,
    )
    assert read.vin_points.dtype == np.float32
    np.testing.assert_array_equal(read.vin_points, written.vin_points)
    want = written.zarr_blocks()
    got = read.zarr_blocks()
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        # NaN == NaN here: the stored bytes must be identical.
        assert got[name].tobytes() == np.ascontiguousarray(value).tobytes(), name


@pytest.mark.parametrize("labelled", [True, False], ids=["labelled", "unlabelled"])
def test_every_block_kind_and_dtype_round_trips(tmp_path: Path, labelled: bool) -> None:
    spec = SyntheticStoreSpec(
        seed=3,
        scene_labels=labelled,
        backbone_fields=(
            ("half", (3, 5), "float16"),
            ("single", (7,), "float32"),
            ("scalar", (), "float32"),
        ),
    )
    written = make_synthetic_samples(spec)
    record = write_synthetic_store(tmp_path / "store", spec)
    with open_vin_offline_store(record.config, validate=True) as reader:
        kinds = {
            (block.kind, block.dtype) for shard in reader.manifest.shards for block in shard.blocks
        }
        expected_dtypes = {"float16", "float32", None} | ({"bool", "int64"} if labelled else set())
        assert {dtype for _, dtype in kinds} == expected_dtypes
        assert {kind for kind, _ in kinds} == set(BlockKind)
        assert reader.manifest.capabilities.scene_labels is labelled
        for index, sample in enumerate(written):
            _assert_same_sample(reader.read_sample(index), sample)
        assert [row.sample_key for row in reader.samples] == [s.sample_key for s in written]
    # The torch view keeps dtypes and shapes, including a per-row scalar field.
    item = VinOfflineDataset(record.config)[0]
    assert item.backbone["scalar"].shape == () and item.backbone["half"].dtype == torch.float16
    assert float(item.backbone["scalar"]) == float(written[0].backbone["scalar"])


def test_nan_rri_and_invalid_candidates_survive_unchanged(small_store) -> None:
    written = make_synthetic_samples(small_store.spec)
    rri = np.stack([s.rri for s in written])
    valid = np.stack([s.candidate_valid for s in written])
    assert np.isnan(rri).any() and (~valid).any()  # the generator planted both
    with VinOfflineStoreReader(small_store.config) as reader:
        stored_rri = np.concatenate(
            [reader.read_rows(s, "rri", 0, 8) for s in reader.manifest.shard_ids]
        )
        stored_valid = np.concatenate(
            [reader.read_rows(s, "candidate_valid", 0, 8) for s in reader.manifest.shard_ids]
        )
    np.testing.assert_array_equal(stored_rri, rri)  # assert_array_equal treats NaN == NaN
    np.testing.assert_array_equal(stored_valid, valid)


def test_zstd_compressed_store_round_trips(tmp_path: Path) -> None:
    samples = make_synthetic_samples(SyntheticStoreSpec(seed=5, unpaired_shards=0))
    with VinOfflineStoreWriter(
        tmp_path / "z", num_candidates=16, rows_per_shard=10, compressor="zstd", fsync=False
    ) as writer:
        writer.add_batch(samples)
    with open_vin_offline_store(tmp_path / "z", validate=True) as reader:
        meta = json.loads((tmp_path / "z/shards/00000/arrays/rri/zarr.json").read_text())
        assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd"]
        for index, sample in enumerate(samples):
            _assert_same_sample(reader.read_sample(index), sample)


@pytest.mark.parametrize("dtype", sorted(NUMERIC_DTYPES))
def test_record_ndarray_map_round_trips_every_numeric_dtype(dtype: str) -> None:
    rng = np.random.default_rng(0)
    array = (rng.normal(size=(3, 4)) * 10).astype(dtype)
    payload = encode_record({"a": array, "empty": np.zeros((0, 3), dtype), "n": 3, "s": "x"})
    decoded = decode_record(payload)
    assert decoded["a"].dtype == np.dtype(dtype) and decoded["a"].shape == (3, 4)
    assert decoded["a"].tobytes() == array.tobytes()
    assert decoded["empty"].shape == (0, 3)
    assert (decoded["n"], decoded["s"]) == (3, "x")
    # The spec's wire form: a map with dtype, shape and little-endian bytes.
    raw = msgpack.unpackb(payload)
    assert raw["a"]["dtype"] == dtype and raw["a"]["shape"] == [3, 4]
    assert raw["a"]["data"] == array.astype(array.dtype.newbyteorder("<")).tobytes()


def test_big_endian_input_is_stored_little_endian() -> None:
    array = np.arange(4, dtype=">f4")
    raw = msgpack.unpackb(encode_record({"a": array}))
    assert raw["a"]["data"] == np.arange(4, dtype="<f4").tobytes()
    np.testing.assert_array_equal(decode_record(encode_record({"a": array}))["a"], array)


@pytest.mark.parametrize(
    ("payload", "phrase"),
    [
        (msgpack.packb({"a": msgpack.ExtType(7, b"x")}), "max_ext_len"),
        (msgpack.packb({"a": {"dtype": "object", "shape": [1], "data": b"x"}}), "not allowed"),
        (msgpack.packb({"a": {"dtype": "float32", "shape": [3], "data": b"1234"}}), "need 12"),
        (msgpack.packb([1, 2]), "expected a map"),
        (msgpack.packb({"a": 1}) + b"\x01", "more than one"),
        (msgpack.packb({"a": b"x" * 100})[:20], "truncated"),
        # A bin header claiming 4 GiB inside a 10-byte record must not allocate it.
        (b"\x81\xa1a\xc6\xff\xff\xff\xff\x00\x00", "truncated"),
    ],
)
def test_record_decoding_refuses_unsafe_or_malformed_bytes(payload: bytes, phrase: str) -> None:
    with pytest.raises(RecordDecodeError, match=phrase):
        decode_record(payload)


def test_chunks_are_about_one_mebibyte_and_never_a_file_per_small_row(tmp_path: Path) -> None:
    assert chunk_shape_for((1000, 64), 4) == (1000, 64)
    assert chunk_shape_for((100_000, 64), 4) == (4096, 64)
    assert chunk_shape_for((10, 64, 128, 128), 2) == (1, 32, 128, 128)  # one row = 2 MiB
    spec = SyntheticStoreSpec(seed=1, rows_per_shard=24, unpaired_shards=0)
    record = write_synthetic_store(tmp_path / "s", spec)
    chunk_files = list((record.store_dir / "shards/00000/arrays/rri/c").rglob("*"))
    assert [
        p.relative_to(record.store_dir / "shards/00000/arrays/rri")
        for p in chunk_files
        if p.is_file()
    ] == [Path("c/0/0")]


def test_large_rows_split_inside_the_row_and_read_back(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    samples = [
        VinOfflineSample(
            f"k{i}",
            "scene_000001",
            "snippet_000001",
            "train",
            np.zeros((0, 3), np.float32),
            backbone={"big": rng.normal(size=(6, 10, 10)).astype(np.float32)},
        )
        for i in range(5)
    ]
    with VinOfflineStoreWriter(
        tmp_path / "s", num_candidates=3, scene_labels=False, chunk_bytes=1000, fsync=False
    ) as writer:
        writer.add_batch(samples)
    with open_vin_offline_store(tmp_path / "s", validate=True) as reader:
        array = reader.zarr_array("00000", "backbone.big")
        assert array.chunks == (1, 2, 10, 10)
        assert reader.chunk_status("00000", "backbone.big").expected_chunks == 15
        for i, sample in enumerate(samples):
            _assert_same_sample(reader.read_sample(i), sample)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    num_samples=st.integers(min_value=1, max_value=23),
    rows_per_shard=st.integers(min_value=1, max_value=9),
    num_candidates=st.integers(min_value=1, max_value=5),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_writer_round_trip_on_random_shard_sizes(
    tmp_path_factory: pytest.TempPathFactory,
    num_samples: int,
    rows_per_shard: int,
    num_candidates: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(num_samples):
        c = num_candidates
        samples.append(
            VinOfflineSample(
                sample_key=f"scene_000001/snippet_{i:06d}",
                scene_id="scene_000001",
                snippet_id=f"snippet_{i // 2:06d}",
                split=("train", "val")[int(rng.integers(2))],
                vin_points=rng.normal(size=(int(rng.integers(0, 6)), 3)).astype(np.float32),
                candidate_valid=rng.random(c) < 0.5,
                rri=np.where(rng.random(c) < 0.2, np.nan, rng.random(c)).astype(np.float32),
                candidate_ids=rng.integers(-1, 100, size=c),
                backbone={"f": rng.normal(size=(2,)).astype(np.float16)},
            )
        )
    path = tmp_path_factory.mktemp("hyp") / "store"
    with VinOfflineStoreWriter(
        path, num_candidates=num_candidates, rows_per_shard=rows_per_shard, fsync=False
    ) as w:
        assert w.add_batch(samples) == list(range(num_samples))
    with open_vin_offline_store(path, validate=True) as reader:
        assert len(reader.manifest.shards) == math.ceil(num_samples / rows_per_shard)
        assert [s.num_rows for s in reader.manifest.shards][:-1] == [rows_per_shard] * (
            len(reader.manifest.shards) - 1
        )
        for index, sample in enumerate(samples):
            row = reader.samples[index]
            assert (row.shard_id, row.row) == (
                f"{index // rows_per_shard:05d}",
                index % rows_per_shard,
            )
            _assert_same_sample(reader.read_sample(index), sample)
        streamed = [
            points
            for shard in reader.manifest.shard_ids
            for _, points in reader.iter_vin_points(shard)
        ]
        assert [p.tobytes() for p in streamed] == [s.vin_points.tobytes() for s in samples]


def test_batched_record_decoding_checks_every_record_boundary() -> None:
    from vinlens.store.format import decode_records

    records = [encode_record({"points": np.full((i + 1, 3), i, np.float32)}) for i in range(4)]
    data = b"".join(records)
    bounds = [0, *np.cumsum([len(r) for r in records]).tolist()]
    decoded = list(decode_records(data, bounds))
    assert [d["points"].shape[0] for d in decoded] == [1, 2, 3, 4]
    # Offsets that put two maps into one record, or split one map over two, are refused.
    merged = [bounds[0], bounds[2], bounds[3], bounds[4]]
    with pytest.raises(RecordDecodeError, match="more than one") as info:
        list(decode_records(data, merged))
    assert info.value.index == 0
    split = [*bounds[:2], bounds[1] + 5, *bounds[2:]]
    with pytest.raises(RecordDecodeError, match="truncated") as info:
        list(decode_records(data, split))
    assert info.value.index == 1


def test_streaming_a_corrupt_record_names_file_and_record(small_store) -> None:
    from vinlens.store.format import CorruptRecordError

    with VinOfflineStoreReader(small_store.config) as reader:
        offsets = reader.record_offsets("00001", "vin_points")
    path = small_store.store_dir / "shards/00001/records/vin_points.msgpack"
    data = bytearray(path.read_bytes())
    data[int(offsets[3])] = 0x91  # a one-element array instead of the record's map
    path.write_bytes(bytes(data))
    with VinOfflineStoreReader(small_store.config) as reader:
        rows = []
        with pytest.raises(
            CorruptRecordError, match=r"record 3 .*expected a map|record 3 "
        ) as info:
            for row, _points in reader.iter_vin_points("00001"):
                rows.append(row)
        assert rows == [0, 1, 2]
        assert str(path) in str(info.value)
