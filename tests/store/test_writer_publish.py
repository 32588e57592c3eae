"""Atomic publish and replace: a path holds no store, the old store, or the complete new one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vinlens.store.format import StoreExistsError, StoreNotFoundError, VinOfflineSample
from vinlens.store.reader import VinOfflineStoreReader, open_vin_offline_store
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store
from vinlens.store.writer import VinOfflineStoreWriter

# Writes samples slowly enough to be killed in the middle; prints READY once writing starts.
_CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from vinlens.store.format import VinOfflineSample
    from vinlens.store.writer import VinOfflineStoreWriter

    path, replace, count = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
    rng = np.random.default_rng(0)
    with VinOfflineStoreWriter(path, num_candidates=4, rows_per_shard=5, replace=replace) as w:
        print("READY", flush=True)
        for i in range(count):
            w.add(VinOfflineSample(
                f"new/{i}", "scene_000001", f"snippet_{i:06d}", "train",
                rng.normal(size=(3, 3)).astype(np.float32),
                candidate_valid=np.ones(4, bool), rri=np.zeros(4, np.float32)))
            time.sleep(0.01)
    print("PUBLISHED", flush=True)
    """
)


def _spawn_writer(path: Path, *, replace: bool, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), "1" if replace else "0", str(count)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_killed_writer_leaves_no_store_at_the_path(tmp_path: Path) -> None:
    path = tmp_path / "store"
    proc = _spawn_writer(path, replace=False, count=400)
    # Wait until the writer has really produced shards in its temporary directory.
    deadline = time.monotonic() + 60
    temps: list[Path] = []
    while time.monotonic() < deadline:
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(".store.vinlens-tmp-")]
        if temps and (temps[0] / "shards/00002").exists():
            break
        time.sleep(0.02)
    assert temps, "writer never started building"
    _kill(proc)
    assert not os.path.lexists(path)
    with pytest.raises(StoreNotFoundError):
        VinOfflineStoreReader(path)
    # What is left is only a hidden temporary sibling without a manifest.
    assert [p.name for p in tmp_path.iterdir()] == [temps[0].name]
    assert not (temps[0] / "manifest.json").exists()


def _exchange_works_in(directory: Path) -> bool:
    """Whether this file system swaps two directories atomically (renameat2 EXCHANGE)."""
    from vinlens.store._publish import exchange

    a, b = directory / ".probe-a", directory / ".probe-b"
    a.mkdir()
    b.mkdir()
    (a / "was-a").touch()
    try:
        return exchange(a, b) and (b / "was-a").exists()
    finally:
        shutil.rmtree(a)
        shutil.rmtree(b)


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.4, 0.8])
def test_killed_replacement_leaves_the_old_store_or_the_complete_new_one(
    tmp_path: Path, delay: float
) -> None:
    if not _exchange_works_in(tmp_path):
        # Two renames leave a moment with no store at the path (docs/store-format.md).
        pytest.skip(f"no atomic directory exchange on {sys.platform} at {tmp_path}")
    path = tmp_path / "store"
    old = write_synthetic_store(path, SyntheticStoreSpec(seed=1))
    proc = _spawn_writer(path, replace=True, count=30)
    time.sleep(delay)
    if proc.poll() is None:
        _kill(proc)
    else:
        proc.wait()
    with open_vin_offline_store(path, validate=True) as reader:
        keys = [row.sample_key for row in reader.samples]
    assert keys in (list(old.sample_keys), [f"new/{i}" for i in range(30)])
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "store"]
    assert all(".vinlens-tmp-" in name for name in leftovers)  # never an old store set aside


# Dies (like SIGKILL: no cleanup, no finally) the moment the writer starts deleting the
# store it replaced: the one window a timed kill hits only now and then.
_CHILD_DIES_DELETING_OLD = textwrap.dedent(
    """
    import os, shutil, sys
    import numpy as np
    import vinlens.store._publish as publish_module
    import vinlens.store.writer as writer_module
    from vinlens.store.format import VinOfflineSample

    real_exchange, real_rmtree, swapped = publish_module.exchange, shutil.rmtree, []

    def exchange(a, b):
        swapped.append(real_exchange(a, b))
        return swapped[-1]

    def rmtree(*args, **kwargs):
        if swapped:
            os._exit(9)
        real_rmtree(*args, **kwargs)

    publish_module.exchange, shutil.rmtree = exchange, rmtree
    path = sys.argv[1]
    with writer_module.VinOfflineStoreWriter(path, num_candidates=4, rows_per_shard=5,
                                             replace=True) as w:
        for i in range(7):
            w.add(VinOfflineSample(
                f"new/{i}", "scene_000001", f"snippet_{i:06d}", "train",
                np.zeros((3, 3), np.float32),
                candidate_valid=np.ones(4, bool), rri=np.zeros(4, np.float32)))
    """
)


def test_kill_while_deleting_the_replaced_store_leaves_the_new_store_and_a_temp_sibling(
    tmp_path: Path,
) -> None:
    if not _exchange_works_in(tmp_path):
        pytest.skip(f"no atomic directory exchange on {sys.platform} at {tmp_path}")
    path = tmp_path / "store"
    old = write_synthetic_store(path, SyntheticStoreSpec(seed=1))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD_DIES_DELETING_OLD, str(path)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 9, proc.stderr
    with open_vin_offline_store(path, validate=True) as reader:
        assert [row.sample_key for row in reader.samples] == [f"new/{i}" for i in range(7)]
    (leftover,) = [p for p in tmp_path.iterdir() if p.name != "store"]
    assert leftover.name.startswith(".store.vinlens-tmp-")
    # It is the old store, swapped out whole (one atomic exchange), waiting to be deleted.
    with open_vin_offline_store(leftover) as reader:
        assert [row.sample_key for row in reader.samples] == list(old.sample_keys)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_completed_replacement_publishes_the_new_store_and_removes_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    import vinlens.store._publish as publish_module

    if not exchange:  # macOS, old kernels, file systems without RENAME_EXCHANGE
        monkeypatch.setattr(publish_module, "exchange", lambda a, b: False)
    path = tmp_path / "store"
    write_synthetic_store(path, SyntheticStoreSpec(seed=1))
    new = write_synthetic_store(path, SyntheticStoreSpec(seed=2, num_scenes=2), replace=True)
    with VinOfflineStoreReader(path) as reader:
        assert [row.sample_key for row in reader.samples] == list(new.sample_keys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_existing_path_is_refused_without_replace(tmp_path: Path) -> None:
    path = tmp_path / "store"
    write_synthetic_store(path)
    before = (path / "manifest.json").read_bytes()
    with pytest.raises(StoreExistsError, match="already exists"):
        VinOfflineStoreWriter(path, num_candidates=4)
    assert (path / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_replace_never_deletes_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "precious"
    path.mkdir()
    (path / "notes.txt").write_text("keep me")
    with pytest.raises(StoreExistsError, match="not a VIN offline store"):
        VinOfflineStoreWriter(path, num_candidates=4, replace=True)
    assert (path / "notes.txt").read_text() == "keep me"


def test_exception_inside_the_writer_block_discards_everything(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with (
        pytest.raises(RuntimeError, match="boom"),
        VinOfflineStoreWriter(
            path, num_candidates=2, scene_labels=False, rows_per_shard=1, fsync=False
        ) as writer,
    ):
        for i in range(3):
            writer.add(
                VinOfflineSample(
                    f"k{i}", "scene_000001", "snippet_000001", "train", np.zeros((1, 3), np.float32)
                )
            )
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_manifest_is_written_last_and_describes_the_shards(tmp_path: Path) -> None:
    path = tmp_path / "store"
    writer = VinOfflineStoreWriter(path, num_candidates=2, scene_labels=False, rows_per_shard=2)
    for i in range(3):
        writer.add(
            VinOfflineSample(
                f"k{i}", "scene_000001", f"snippet_{i:06d}", "val", np.ones((2, 3), np.float32)
            )
        )
    assert not path.exists()
    assert not (writer.temp_dir / "manifest.json").exists()
    assert (writer.temp_dir / "shards/00000/records/vin_points.offsets").exists()
    writer.close()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "vin-offline-store" and manifest["version"] == 1
    assert [(s["shard_id"], s["num_rows"]) for s in manifest["shards"]] == [
        ("00000", 2),
        ("00001", 1),
    ]
    assert manifest["capabilities"] == {"scene_labels": False}


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        (
            {"candidate_valid": np.ones(3, bool), "rri": np.zeros(3, np.float32)},
            "shape \\[3\\], expected \\[4\\]",
        ),
        ({"candidate_valid": np.ones(4, np.int8), "rri": np.zeros(4, np.float32)}, "expected bool"),
        ({"rri": np.zeros(4, np.float32)}, "needs candidate_valid and rri"),
        (
            {
                "candidate_valid": np.ones(4, bool),
                "rri": np.zeros(4, np.float32),
                "backbone": {"f": np.zeros(2, np.int32)},
            },
            "float16 or float32",
        ),
    ],
)
def test_writer_rejects_samples_that_break_the_block_table(
    tmp_path: Path, kwargs: dict, phrase: str
) -> None:
    with VinOfflineStoreWriter(tmp_path / "s", num_candidates=4, fsync=False) as writer:
        with pytest.raises(ValueError, match=phrase):
            writer.add(
                VinOfflineSample(
                    "k",
                    "scene_000001",
                    "snippet_000001",
                    "train",
                    np.zeros((1, 3), np.float32),
                    **kwargs,
                )
            )
        writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_changing_optional_blocks_mid_shard_is_refused_until_the_shard_is_finished(
    tmp_path: Path,
) -> None:
    def sample(i: int, ids: bool) -> VinOfflineSample:
        return VinOfflineSample(
            f"k{i}",
            "scene_000001",
            "snippet_000001",
            "train",
            np.zeros((1, 3), np.float32),
            candidate_valid=np.ones(2, bool),
            rri=np.zeros(2, np.float32),
            candidate_ids=np.arange(2) if ids else None,
        )

    with VinOfflineStoreWriter(
        tmp_path / "s", num_candidates=2, rows_per_shard=10, fsync=False
    ) as writer:
        writer.add(sample(0, True))
        with pytest.raises(ValueError, match="finish_shard"):
            writer.add(sample(1, False))
        writer.finish_shard()
        writer.add(sample(1, False))
    with VinOfflineStoreReader(tmp_path / "s") as reader:
        assert reader.block_spec("00000", "candidate_ids") is not None
        assert reader.block_spec("00001", "candidate_ids") is None
        assert reader.manifest.materialized_blocks.candidate_ids is True
