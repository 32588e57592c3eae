"""The writer under fuzzed input (hypothesis): the old store is never lost.

Samples with hostile identity fields (ints, bytes, surrogates, slashes, non-ASCII), block
names, dtypes and values (uint64 above int64, float64 beyond float32, NaN, inf, text and
object arrays) are written with ``replace=True`` over a good store. Either the new store
is published and its reader opens it and reads every sample back, or the writer raises
and the old store is byte for byte what it was. Bounded like the store fuzz: a
per-example deadline and the test's timeout.
"""

from __future__ import annotations

import hashlib
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vinlens.store.format import VinOfflineSample
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.writer import VinOfflineStoreWriter

pytestmark = pytest.mark.timeout(240)

C = 4

names = st.one_of(
    st.sampled_from(["visibility", "a.b", "a/b", "é", "__x", ".x", "-x", "x\n", ""]),
    st.text(max_size=6),
)
identities = st.one_of(
    st.text(min_size=0, max_size=8),
    st.sampled_from(["scene/x", "tr\udce9in", "日本"]),
    st.integers(-3, 3),
    st.binary(max_size=4),
    st.none(),
)
dtypes = st.sampled_from(
    ["float16", "float32", "float64", "int64", "uint64", "int8", "bool", "U1", "object"]
)
special_values = st.sampled_from([0.0, np.nan, np.inf, -np.inf, 1e39, -1e300, 2.0**63, 2.0**64])


@st.composite
def arrays(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    dtype = draw(dtypes)
    shape = draw(st.sampled_from([shape, (shape[0] + 1, *shape[1:]), ()]))
    if dtype == "U1":
        return np.full(shape, "a")
    if dtype == "object":
        return np.full(shape, None, dtype=object)
    value = draw(special_values)
    base = np.zeros(shape, dtype=np.float64)
    if base.size:
        base.flat[0] = value
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype == "uint64":
            return np.full(shape, 2**63 + 5 if value > 2**63 else 1, dtype=np.uint64)
        if dtype in ("int64", "int8", "bool"):
            return np.ones(shape, dtype=dtype)
        return base.astype(dtype)


@st.composite
def samples(draw: st.DrawFn, index: int) -> VinOfflineSample:
    good = draw(st.booleans())
    if good:
        return VinOfflineSample(
            sample_key=f"scene_a/snippet_{index}",
            scene_id="scene_a",
            snippet_id=f"snippet_{index}",
            split="train",
            vin_points=np.zeros((2, 3), dtype=np.float32),
            candidate_valid=np.ones(C, dtype=bool),
            rri=np.zeros(C, dtype=np.float32),
        )
    return VinOfflineSample(
        sample_key=draw(identities),
        scene_id=draw(identities),
        snippet_id=draw(identities),
        split=draw(identities),
        vin_points=draw(arrays((2, 3))),
        candidate_valid=draw(arrays((C,))),
        rri=draw(arrays((C,))),
        rri_components=draw(st.dictionaries(names, arrays((C,)), max_size=1)),
        candidate_ids=draw(st.none() | arrays((C,))),
        backbone=draw(st.dictionaries(names, arrays((3,)), max_size=1)),
    )


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@settings(
    max_examples=60,
    deadline=timedelta(seconds=20),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(data=st.data())
def test_replace_never_loses_the_old_store(data: st.DataObject) -> None:
    batch = [
        data.draw(samples(i), label=f"sample {i}") for i in range(data.draw(st.integers(1, 3)))
    ]
    with tempfile.TemporaryDirectory(prefix="vinlens-writer-fuzz-") as tmp:
        path = Path(tmp) / "store"
        with VinOfflineStoreWriter(path, num_candidates=C, fsync=False) as writer:
            writer.add(
                VinOfflineSample(
                    sample_key="old",
                    scene_id="s",
                    snippet_id="n",
                    split="train",
                    vin_points=np.zeros((1, 3), dtype=np.float32),
                    candidate_valid=np.ones(C, dtype=bool),
                    rri=np.ones(C, dtype=np.float32),
                )
            )
        before = _digest(path)
        try:
            with VinOfflineStoreWriter(
                path, num_candidates=C, replace=True, rows_per_shard=2, fsync=False
            ) as writer:
                writer.add_batch(batch)
        except Exception:
            assert _digest(path) == before, "a failed replace changed the old store"
            with VinOfflineStoreReader(path) as reader:
                assert [row.sample_key for row in reader.samples] == ["old"]
            return
        with VinOfflineStoreReader(path) as reader:
            assert reader.num_samples == len(batch)
            for i in range(reader.num_samples):
                back = reader.read_sample(i)
                assert back.sample_key == batch[i].sample_key
        assert not [p for p in Path(tmp).iterdir() if p.name != "store"], "leftover temp dirs"
