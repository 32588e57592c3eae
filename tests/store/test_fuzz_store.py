"""Byte-mutation fuzz of a small valid store and raw tar set (hypothesis).

Each example copies the pristine files, damages one or two of them (flip a byte, truncate,
extend, or replace the file by a FIFO, a directory or a symlink to ``/dev/zero``,
``/dev/urandom`` or nowhere) and runs statistics and coverage on the damaged copy.

Bounds: every example has a hypothesis deadline and the test a pytest-timeout, so a hang
fails the suite instead of stalling it; ``tracemalloc`` (which sees numpy's buffers) caps
the peak memory of each example.

The mid-scan fuzz deletes or rewrites one chunk or record file *between its shard's listing
and its reads* (locally and on moto S3); its rule is "the undamaged numbers with the damage
listed, or a named error": a deletion leaves exactly the numbers of a store that lacked the
file from the start and lists it, a rewrite is a named replacement error, and a file the
scan never read leaves the pristine numbers.

Oracle: the run raises an error of the project's own classes whose message names a path
inside the damaged directory, or it returns. Structural damage (a file of another size,
kind or existence) must then be listed (``integrity_problems``) or leave the numbers equal
to the undamaged run's. A flipped byte inside a file of the right size may change numbers
(the v1 format has no checksums) but must never crash.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from midscan import MUTATIONS, after_listing, mutate_local, mutate_s3
from s3_server import S3Server, s3_filesystem

from vinlens.store.access import StoreAccessError
from vinlens.store.coverage import clear_coverage_cache, collect_vin_offline_dataset_coverage
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats
from vinlens.store.errors import TarScanError
from vinlens.store.format import VinOfflineStoreConfig, VinOfflineStoreError
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_dataset,
)
from vinlens.store.writer import VinOfflineStoreWriter

pytestmark = pytest.mark.timeout(240)

PROJECT_ERRORS = (VinOfflineStoreError, TarScanError, StoreAccessError)
MEMORY_BOUND = 256 << 20
FUZZ = settings(
    max_examples=60,
    deadline=timedelta(seconds=20),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)

_STORE_SPEC = SyntheticStoreSpec(
    num_scenes=2,
    snippets_per_scene=2,
    samples_per_snippet=2,
    num_candidates=8,
    rows_per_shard=4,
    backbone_fields=(("g", (4,), "float16"),),
    rri_components=("v",),
)
_RAW_SPEC = SyntheticRawSpec(num_tars=2, member_suffixes=("rgb.jpg", "depth.png"))


@dataclasses.dataclass(frozen=True)
class Pristine:
    root: Path
    store_files: tuple[str, ...]
    raw_files: tuple[str, ...]
    stats: Any
    coverage: Any


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    root = tmp_path_factory.mktemp("fuzz-pristine")
    data = write_synthetic_dataset(root, _STORE_SPEC, _RAW_SPEC)
    clear_coverage_cache()

    def files(sub: str) -> tuple[str, ...]:
        return tuple(
            sorted(p.relative_to(root).as_posix() for p in (root / sub).rglob("*") if p.is_file())
        )

    return Pristine(
        root=root,
        store_files=files("store"),
        raw_files=files("raw"),
        stats=_normalized(collect_vin_offline_dataset_stats(data.config, max_samples=None)),
        coverage=_normalized(collect_vin_offline_dataset_coverage(data.config)),
    )


@pytest.fixture(scope="module")
def pristine_zstd(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """The same samples in a zstd-compressed store: zarr decodes its chunks itself."""
    root = tmp_path_factory.mktemp("fuzz-pristine-zstd")
    with VinOfflineStoreWriter(
        root / "store",
        num_candidates=_STORE_SPEC.num_candidates,
        rows_per_shard=4,
        compressor="zstd",
        fsync=False,
    ) as writer:
        writer.add_batch(make_synthetic_samples(_STORE_SPEC))
    files = tuple(
        sorted(p.relative_to(root).as_posix() for p in (root / "store").rglob("*") if p.is_file())
    )
    config = VinOfflineStoreConfig(store_dir=root / "store")
    stats = _normalized(collect_vin_offline_dataset_stats(config, max_samples=None))
    return Pristine(root=root, store_files=files, raw_files=(), stats=stats, coverage=None)


def _normalized(record: Any) -> Any:
    """A record without the fields that name the directory or its generation."""
    changes: dict[str, Any] = {"store_dir": ""}
    if hasattr(record, "generation"):
        changes["generation"] = {}
    if hasattr(record, "raw_dataset_dir"):
        changes["raw_dataset_dir"] = ""
    return dataclasses.replace(record, **changes)


# --------------------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------------------

KINDS = ("flip", "truncate", "extend", "fifo", "directory", "dev_zero", "dev_urandom", "dangling")


@dataclasses.dataclass(frozen=True)
class Mutation:
    file: str
    kind: str
    position: float  # where in the file (flip, truncate), as a fraction of its size
    payload: bytes  # what extend appends; flip xors its first byte

    @property
    def structural(self) -> bool:
        return self.kind != "flip"


def mutations(files: tuple[str, ...]) -> st.SearchStrategy[list[Mutation]]:
    one = st.builds(
        Mutation,
        file=st.sampled_from(files),
        kind=st.sampled_from(KINDS),
        position=st.floats(0, 1, exclude_max=True),
        payload=st.binary(min_size=1, max_size=96).filter(lambda b: b[0] != 0),
    )
    return st.lists(one, min_size=1, max_size=2, unique_by=lambda m: m.file)


def apply(root: Path, mutation: Mutation) -> None:
    path = root / mutation.file
    size = path.stat().st_size
    if mutation.kind == "flip":
        if size == 0:
            return
        data = bytearray(path.read_bytes())
        at = int(mutation.position * size)
        data[at] ^= mutation.payload[0]
        path.write_bytes(bytes(data))
    elif mutation.kind == "truncate":
        os.truncate(path, int(mutation.position * size))
    elif mutation.kind == "extend":
        with open(path, "ab") as handle:
            handle.write(mutation.payload)
    else:
        path.unlink()
        if mutation.kind == "fifo":
            os.mkfifo(path)
        elif mutation.kind == "directory":
            path.mkdir()
        elif mutation.kind == "dev_zero":
            path.symlink_to("/dev/zero")
        elif mutation.kind == "dev_urandom":
            path.symlink_to("/dev/urandom")
        else:
            path.symlink_to(path.parent / "no-such-file")


@dataclasses.dataclass
class Outcome:
    record: Any = None
    error: BaseException | None = None
    peak_bytes: int = 0


def _bounded(run: Any) -> Outcome:
    outcome = Outcome()
    tracemalloc.start()
    try:
        outcome.record = run()
    except Exception as exc:
        outcome.error = exc
    finally:
        outcome.peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return outcome


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vinlens-fuzz-") as tmp:
        yield Path(tmp)


def _damaged_copy(pristine: Pristine, workdir: Path, muts: list[Mutation]) -> Path:
    root = workdir / f"case-{len(list(workdir.iterdir()))}"
    shutil.copytree(pristine.root, root, symlinks=True)
    for mutation in muts:
        apply(root, mutation)
    return root


def _check_error(outcome: Outcome, root: Path, muts: list[Mutation]) -> None:
    error = outcome.error
    assert error is not None
    assert isinstance(error, PROJECT_ERRORS), f"{type(error).__name__}: {error} after {muts}"
    assert str(root) in str(error), f"error does not name a file: {error} after {muts}"


# --------------------------------------------------------------------------------------
# The fuzz
# --------------------------------------------------------------------------------------


def _check_damaged_store(pristine: Pristine, workdir: Path, muts: list[Mutation]) -> None:
    root = _damaged_copy(pristine, workdir, muts)
    config = VinOfflineStoreConfig(store_dir=root / "store")
    outcome = _bounded(lambda: collect_vin_offline_dataset_stats(config, max_samples=None))
    assert outcome.peak_bytes < MEMORY_BOUND, (outcome.peak_bytes, muts)
    if outcome.error is not None:
        _check_error(outcome, root, muts)
        return
    record = outcome.record
    if record.integrity_problems or not any(m.structural for m in muts):
        for problem in record.integrity_problems:
            assert str(root) in problem.path or str(root) in problem.message, problem
        return
    assert _normalized(record) == pristine.stats, f"numbers changed, nothing listed: {muts}"


@FUZZ
@given(data=st.data())
def test_damaged_store_gives_named_error_listed_problem_or_same_numbers(
    pristine: Pristine, workdir: Path, data: st.DataObject
) -> None:
    _check_damaged_store(pristine, workdir, data.draw(mutations(pristine.store_files)))


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_damaged_compressed_store_gives_named_error_listed_problem_or_same_numbers(
    pristine_zstd: Pristine, workdir: Path, data: st.DataObject
) -> None:
    _check_damaged_store(pristine_zstd, workdir, data.draw(mutations(pristine_zstd.store_files)))


@FUZZ
@given(data=st.data())
def test_damaged_raw_tars_give_named_error_or_same_coverage(
    pristine: Pristine, workdir: Path, data: st.DataObject
) -> None:
    muts = data.draw(mutations(pristine.raw_files), label="mutations")
    root = _damaged_copy(pristine, workdir, muts)
    config = VinOfflineStoreConfig(store_dir=root / "store", raw_dataset_dir=root / "raw")
    clear_coverage_cache()
    outcome = _bounded(lambda: collect_vin_offline_dataset_coverage(config))
    assert outcome.peak_bytes < MEMORY_BOUND, (outcome.peak_bytes, muts)
    if outcome.error is not None:
        _check_error(outcome, root, muts)
        return
    expected = pristine.coverage
    gone = [m for m in muts if m.kind == "directory"]
    if gone:
        # A directory is not a tar: the raw dataset is the one without those files.
        reference = _damaged_copy(pristine, workdir, [])
        for m in gone:
            (reference / m.file).unlink()
        expected = _normalized(
            collect_vin_offline_dataset_coverage(
                VinOfflineStoreConfig(
                    store_dir=reference / "store", raw_dataset_dir=reference / "raw"
                )
            )
        )
    assert _normalized(outcome.record) == expected, f"coverage changed silently: {muts}"


# --------------------------------------------------------------------------------------
# Files changed between a shard's listing and its reads
# --------------------------------------------------------------------------------------

MIDSCAN = settings(FUZZ, max_examples=24)


def _scanned_files(pristine: Pristine) -> list[str]:
    """Chunk and record files (store-relative): the files a scan reads after listing them."""
    return [
        f.removeprefix("store/")
        for f in pristine.store_files
        if "/c/" in f or f.endswith(".msgpack")
    ]


def _shard_of(rel: str) -> str:
    return rel.split("/")[1]


def _without_problems(record: Any) -> Any:
    return dataclasses.replace(_normalized(record), integrity_problems=())


def _check_midscan(
    outcome: Outcome, root: str, rel: str, kind: str, pristine: Any, reference: Any
) -> None:
    """The undamaged numbers with the damage listed, or a named error."""
    if outcome.error is not None:
        error = outcome.error
        assert isinstance(error, PROJECT_ERRORS), f"{type(error).__name__}: {error} ({kind} {rel})"
        assert root in str(error), f"error does not name a file: {error} ({kind} {rel})"
        return
    record = outcome.record
    if _normalized(record) == pristine:
        return  # the scan never read the file after it changed
    assert kind == "delete", f"rewritten {rel} was mixed into the numbers"
    listed = [p for p in record.integrity_problems if rel in (p.path or "") + p.message]
    assert listed, f"deleted {rel} left out silently: {record.integrity_problems}"
    assert _without_problems(record) == _without_problems(reference), f"numbers of {rel}"


def _midscan_local(
    pristine: Pristine, workdir: Path, monkeypatch: pytest.MonkeyPatch, rel: str, kind: str
) -> None:
    root = _damaged_copy(pristine, workdir, [])
    config = VinOfflineStoreConfig(store_dir=root / "store")
    with after_listing(
        monkeypatch, _shard_of(rel), lambda: mutate_local(root / "store" / rel, kind)
    ):
        outcome = _bounded(lambda: collect_vin_offline_dataset_stats(config, max_samples=None))
    # The store as it is now (the file deleted before any listing) is the reference.
    reference = (
        collect_vin_offline_dataset_stats(config, max_samples=None) if kind == "delete" else None
    )
    _check_midscan(outcome, str(root), rel, kind, pristine.stats, reference)


@MIDSCAN
@given(data=st.data())
def test_store_changed_mid_scan_keeps_undamaged_numbers_with_damage_listed(
    pristine: Pristine, workdir: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    rel = data.draw(st.sampled_from(_scanned_files(pristine)), label="file")
    kind = data.draw(st.sampled_from(MUTATIONS), label="kind")
    _midscan_local(pristine, workdir, monkeypatch, rel, kind)


@MIDSCAN
@given(data=st.data())
def test_compressed_store_changed_mid_scan_keeps_undamaged_numbers_with_damage_listed(
    pristine_zstd: Pristine, workdir: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    rel = data.draw(st.sampled_from(_scanned_files(pristine_zstd)), label="file")
    kind = data.draw(st.sampled_from(MUTATIONS), label="kind")
    _midscan_local(pristine_zstd, workdir, monkeypatch, rel, kind)


_S3_CASES = [0]


# moto answers in tens of milliseconds and a new S3 client takes seconds on a loaded
# machine: few examples, no per-example deadline (the test's timeout still bounds it).
@settings(FUZZ, max_examples=4, deadline=None)
@given(data=st.data())
def test_s3_store_changed_mid_scan_keeps_undamaged_numbers_with_damage_listed(
    pristine: Pristine, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    rel = data.draw(st.sampled_from(_scanned_files(pristine)), label="file")
    kind = data.draw(st.sampled_from(("delete", "same_size")), label="kind")
    _S3_CASES[0] += 1
    url = s3_server.upload(pristine.root / "store", f"fuzz-midscan/{_S3_CASES[0]}/store")
    fs = s3_filesystem(s3_server)
    key = f"{url.removeprefix('s3://')}/{rel}"
    config = VinOfflineStoreConfig(store_dir=url, storage_options=s3_server.storage_options)
    with after_listing(monkeypatch, _shard_of(rel), lambda: mutate_s3(fs, key, kind)):
        outcome = _bounded(lambda: collect_vin_offline_dataset_stats(config, max_samples=None))
    reference = (
        collect_vin_offline_dataset_stats(config, max_samples=None) if kind == "delete" else None
    )
    _check_midscan(outcome, url, rel, kind, pristine.stats, reference)
