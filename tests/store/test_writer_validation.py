"""Writer input validation: nothing the reader would refuse passes add(), the old store survives."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vinlens.store import writer as writer_module
from vinlens.store.format import InvalidSampleError, StoreVerificationError, VinOfflineSample
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.writer import VinOfflineStoreWriter

C = 4


def _sample(i: int = 0, **changes: Any) -> VinOfflineSample:
    base = VinOfflineSample(
        sample_key=f"scene_a/snippet_{i}",
        scene_id="scene_a",
        snippet_id=f"snippet_{i}",
        split="train",
        vin_points=np.zeros((3, 3), dtype=np.float32),
        candidate_valid=np.ones(C, dtype=bool),
        rri=np.arange(C, dtype=np.float32),
        rri_components={"visibility": np.ones(C, dtype=np.float32)},
        candidate_ids=np.arange(C, dtype=np.int64),
        backbone={"global": np.ones(2, dtype=np.float16)},
    )
    return dataclasses.replace(base, **changes)


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with VinOfflineStoreWriter(path, num_candidates=C, rows_per_shard=2) as writer:
        writer.add_batch([_sample(i) for i in range(3)])
    return path


BAD_SAMPLES: list[tuple[str, dict[str, Any], str]] = [
    ("int sample_key", {"sample_key": 7}, r"field sample_key: is a int"),
    ("empty scene_id", {"scene_id": ""}, r"field scene_id: is empty"),
    ("surrogate split", {"split": "tr\udce9in"}, r"field split: .* not valid Unicode"),
    ("bytes snippet", {"snippet_id": b"s1"}, r"field snippet_id: is a bytes"),
    (
        "slash in component",
        {"rri_components": {"a/b": np.ones(C, dtype=np.float32)}},
        r"rri_components name: block name 'rri_components.a/b'|'a/b'",
    ),
    (
        "non-ASCII component",
        {"rri_components": {"visibilité": np.ones(C, dtype=np.float32)}},
        r"rri_components name",
    ),
    (
        "slash in backbone field",
        {"backbone": {"x/y": np.ones(2, dtype=np.float16)}},
        r"backbone name",
    ),
    (
        "newline in backbone field",
        {"backbone": {"x\n": np.ones(2, dtype=np.float16)}},
        r"backbone name",
    ),
    (
        "uint64 above int64",
        {"candidate_ids": np.array([0, 1, 2, 2**63], dtype=np.uint64)},
        r"block 'candidate_ids': uint64 values up to 9223372036854775808 do not fit int64",
    ),
    (
        "float64 rri beyond float32",
        {"rri": np.array([0.0, 1e39, 2.0, 3.0])},
        r"block 'rri': finite float64 values beyond the float32 range",
    ),
    (
        "float64 component beyond float32",
        {"rri_components": {"visibility": np.array([0.0, -1e300, 0.0, 0.0])}},
        r"block 'rri_components.visibility': finite float64",
    ),
    (
        "float64 points beyond float32",
        {"vin_points": np.array([[0.0, 0.0, 4e38]])},
        r"vin_points: finite float64 values beyond the float32 range",
    ),
    (
        "object points",
        {"vin_points": np.array([[None, 1, 2]], dtype=object)},
        r"vin_points: has dtype object",
    ),
    ("text ids", {"candidate_ids": np.array(["a"] * C)}, r"block 'candidate_ids': has dtype <U1"),
]


@pytest.mark.parametrize(
    ("changes", "message"), [c[1:] for c in BAD_SAMPLES], ids=[c[0] for c in BAD_SAMPLES]
)
def test_bad_samples_are_refused_at_add_and_the_old_store_stays(
    old_store: Path, changes: dict[str, Any], message: str
) -> None:
    before = _tree_digest(old_store)
    with (
        pytest.raises(InvalidSampleError, match=message) as info,
        VinOfflineStoreWriter(old_store, num_candidates=C, replace=True) as writer,
    ):
        writer.add(_sample(0))
        writer.add(_sample(1, **changes))
    assert str(old_store) in str(info.value)
    assert _tree_digest(old_store) == before
    with VinOfflineStoreReader(old_store) as reader:
        assert reader.num_samples == 3


def test_values_at_the_edges_of_the_ranges_are_kept(tmp_path: Path) -> None:
    edge = _sample(
        0,
        candidate_ids=np.array([0, 1, 2, 2**63 - 1], dtype=np.uint64),
        rri=np.array([np.nan, np.inf, -np.inf, float(np.finfo(np.float32).max)]),
        vin_points=np.array([[1.5, -2.0, 3.0]]),
    )
    with VinOfflineStoreWriter(tmp_path / "s", num_candidates=C) as writer:
        writer.add(edge)
    with VinOfflineStoreReader(tmp_path / "s") as reader:
        back = reader.read_sample(0)
    assert back.candidate_ids is not None and int(back.candidate_ids[-1]) == 2**63 - 1
    assert back.rri is not None and np.isnan(back.rri[0]) and back.rri[1] == np.inf


def test_a_store_its_reader_refuses_is_not_published(
    old_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _tree_digest(old_store)

    def garbage_record(record: Any) -> bytes:
        return b"\xc1 not msgpack"

    monkeypatch.setattr(writer_module, "encode_record", garbage_record)
    with (
        pytest.raises(StoreVerificationError, match="read-back check, nothing was published"),
        VinOfflineStoreWriter(old_store, num_candidates=C, replace=True) as writer,
    ):
        writer.add(_sample(5))
    assert _tree_digest(old_store) == before
    assert not [p for p in old_store.parent.iterdir() if p.name.startswith(".store")]
