"""Store diagnostics over every row vs a raw read, dask.array and itself on more workers.

All in one run, on a warm page cache, best of ``--repeat`` alternating runs:

* every-row stats on one worker (``collect_vin_offline_dataset_stats(store,
  max_samples=None)``) against ``numpy.fromfile`` over the very files it decodes (zarr chunk
  files and msgpack records): ratio ``raw seconds / stats seconds``, target >= 0.25x;
* every-row stats against ``dask.array`` computing only the float64 mean, variance, min
  and max of the same backbone arrays (``da.from_zarr`` per shard block), both on the same
  number of cores (1, and ``--workers``): ratio ``dask seconds / stats seconds``, target
  >= 1.0x (vinlens computes far more);
* ``--workers`` (default 2) worker processes (``ProcessPoolExecutor``) against one:
  ratio ``1-worker seconds / N-worker seconds``, target >= 1.7x for 2 workers.

Also prints the default 512-row sampled run for scale. Records are checked equal (``==``)
across worker counts.

The store looks like a VIN training store: per row a float16 voxel backbone
(32x32x32, 64 KiB), a float32 global feature, 64 candidates with validity, RRI, one RRI
component, ids and poses, and 512 VIN points, in shards of 128 rows (~9 MB).

Usage: ``python benchmarks/bench_store_stats.py [--quick] [--size-mb N] [--repeat N] [--workers N]
[--keep DIR]``; ``--quick`` writes ~100 MB instead of ~1 GB.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from vinlens.store.diagnostics import collect_vin_offline_dataset_stats, kernels
from vinlens.store.format import VinOfflineSample
from vinlens.store.writer import VinOfflineStoreWriter

NUM_CANDIDATES = 64
BACKBONE_SHAPE = (32, 32, 32)
VIN_POINTS = (256, 768)


def _row_bytes() -> int:
    c = NUM_CANDIDATES
    return (
        int(np.prod(BACKBONE_SHAPE)) * 2
        + 256 * 4
        + c * (1 + 4 + 4 + 8 + 28)
        + (sum(VIN_POINTS) // 2) * 12
    )


def write_store(path: Path, size_mb: float, seed: int = 0) -> int:
    """A store of about ``size_mb`` MB of payload; returns its number of samples."""
    num = max(8, int(size_mb * 1e6 // _row_bytes()))
    rng = np.random.default_rng(seed)
    pool = 32  # random rows reused cyclically, so generating data does not dominate
    voxel = [(rng.normal(size=BACKBONE_SHAPE) * 0.5).astype(np.float16) for _ in range(pool)]
    glob = [rng.normal(size=256).astype(np.float32) for _ in range(pool)]
    points = [
        rng.normal(size=(int(rng.integers(*VIN_POINTS)), 3)).astype(np.float32) for _ in range(pool)
    ]
    backbones = [{"voxel": v, "global": g} for v, g in zip(voxel, glob, strict=True)]
    write_pooled_rows(
        path, num, rng, points, backbones, NUM_CANDIDATES, rows_per_shard=128, components=True
    )
    return num


def write_pooled_rows(
    path: Path,
    rows: int,
    rng: np.random.Generator,
    points: list[np.ndarray],
    backbones: list[dict[str, np.ndarray]],
    num_candidates: int,
    *,
    rows_per_shard: int,
    components: bool,
) -> None:
    """``rows`` samples cycling through pools of random points and backbone fields (drawn
    by the caller), with candidates, RRI (and an RRI component) drawn here from ``rng``."""
    pool = len(points)
    c = num_candidates
    valid = [rng.random(c) > 0.2 for _ in range(pool)]
    rri = [rng.beta(2, 5, size=c).astype(np.float32) for _ in range(pool)]
    q = rng.normal(size=(c, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    poses = np.concatenate([rng.normal(size=(c, 3)), q], axis=1).astype(np.float32)
    with VinOfflineStoreWriter(
        path, num_candidates=c, rows_per_shard=rows_per_shard, fsync=False
    ) as writer:
        for i in range(rows):
            k = i % pool
            scene, snippet = f"scene_{i // 64:06d}", f"snippet_{i % 64:06d}"
            writer.add(
                VinOfflineSample(
                    sample_key=f"{scene}/{snippet}",
                    scene_id=scene,
                    snippet_id=snippet,
                    split=("train", "train", "train", "val", "test")[i % 5],
                    vin_points=points[k],
                    candidate_valid=valid[k],
                    rri=rri[k],
                    rri_components={"visibility": rri[(k + 1) % pool]} if components else {},
                    candidate_ids=np.arange(c, dtype=np.int64),
                    candidate_poses=poses,
                    backbone=backbones[k],
                )
            )


def payload_files(path: Path) -> list[Path]:
    """The files a full scan decodes: zarr chunk files and msgpack record files."""
    root = len(str(path))
    return [
        p
        for p in sorted(path.rglob("*"))
        if p.is_file() and (p.suffix == ".msgpack" or "/c/" in p.as_posix()[root:])
    ]


def raw_read(files: list[Path]) -> int:
    return sum(int(np.fromfile(p, dtype=np.uint8).nbytes) for p in files)


def dask_backbone_moments(store: Path, workers: int) -> list[tuple[float, float, float, float]]:
    """float64 mean, variance, min, max of every backbone field with dask.array (threads)."""
    import importlib

    import zarr

    # By name: dask ships without complete type hints (it is the dask extra).
    dask: Any = importlib.import_module("dask")
    da: Any = importlib.import_module("dask.array")

    fields: dict[str, list[object]] = {}
    for array_dir in sorted(store.glob("shards/*/arrays/backbone.*")):
        array = zarr.open_array(str(array_dir), mode="r")
        fields.setdefault(array_dir.name, []).append(da.from_zarr(array))
    tasks = []
    for name in sorted(fields):
        x = da.concatenate(fields[name], axis=0).astype(np.float64)
        tasks.extend([x.mean(), x.var(), x.min(), x.max()])
    values = dask.compute(*tasks, scheduler="threads", num_workers=workers)
    out: list[tuple[float, float, float, float]] = []
    for i in range(0, len(values), 4):
        mean, var, low, high = (float(v) for v in values[i : i + 4])
        out.append((mean, var, low, high))
    return out


def steady_state_kernels() -> None:
    """Count float16 with the compiled kernel (when installed) from the first value.

    A process switches to it after ``kernels.COMPILED_AFTER`` values, so any scan of more
    than ~130 MB runs on it; the benchmark measures that steady state at every store size,
    in this process and in each pool worker (its initializer).
    """
    kernels.COMPILED_AFTER = 0


T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds one call of ``fn`` took, and its result (``main`` alternates the repeats)."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB store instead of ~1 GB")
    parser.add_argument("--size-mb", type=float, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) the store here")
    args = parser.parse_args(argv)
    size_mb = args.size_mb or (100.0 if args.quick else 1000.0)

    tmp = None
    if args.keep is not None:
        store = args.keep
    else:
        tmp = Path(tempfile.mkdtemp(prefix="vinlens-bench-stats-"))
        store = tmp / "store"
    try:
        if not (store / "manifest.json").exists():
            start = time.perf_counter()
            num = write_store(store, size_mb)
            print(f"wrote {num} samples in {time.perf_counter() - start:.1f} s")
        files = payload_files(store)
        payload = sum(p.stat().st_size for p in files)
        raw_read(files)  # warm the page cache
        collect_vin_offline_dataset_stats(store, max_samples=8)  # warm imports (torch, zarr)

        workers = args.workers
        steady_state_kernels()
        collect_vin_offline_dataset_stats(store, max_samples=None)  # loads numba, if installed
        with concurrent.futures.ProcessPoolExecutor(
            workers, initializer=steady_state_kernels
        ) as pool:
            # Start the workers and let each open the store once before timing.
            collect_vin_offline_dataset_stats(store, max_samples=None, executor=pool)
            dask_backbone_moments(store, 1)
            times: dict[str, list[float]] = {
                "raw": [],
                "stats": [],
                "pool": [],
                "dask1": [],
                "daskN": [],
                "numpy16": [],
            }
            compiled = kernels.float16_counts_compiled(np.zeros(4, np.float16)) is not None
            for _ in range(args.repeat):  # alternate, so drift on a shared machine hits all
                times["raw"].append(timed(lambda: raw_read(files))[0])
                seconds, stats = timed(
                    lambda: collect_vin_offline_dataset_stats(store, max_samples=None)
                )
                times["stats"].append(seconds)
                if compiled:
                    # The same scan with float16 counts by np.bincount only (no numba).
                    after, kernels.COMPILED_AFTER = kernels.COMPILED_AFTER, 1 << 62
                    try:
                        seconds, plain = timed(
                            lambda: collect_vin_offline_dataset_stats(store, max_samples=None)
                        )
                    finally:
                        kernels.COMPILED_AFTER = after
                    times["numpy16"].append(seconds)
                    if plain != stats:
                        print("error: records differ with and without numba", file=sys.stderr)
                        return 1
                seconds, pooled = timed(
                    lambda: collect_vin_offline_dataset_stats(
                        store, max_samples=None, executor=pool
                    )
                )
                times["pool"].append(seconds)
                times["dask1"].append(timed(lambda: dask_backbone_moments(store, 1))[0])
                times["daskN"].append(timed(lambda: dask_backbone_moments(store, workers))[0])
        if pooled != stats:
            print("error: records differ between 1 and N workers", file=sys.stderr)
            return 1
        sampled, _ = timed(lambda: collect_vin_offline_dataset_stats(store))
        best = {k: min(v) for k, v in times.items() if v}
        mb = payload / 1e6
        print(f"store: {store} ({mb:.0f} MB payload in {len(files)} files)")
        print(f"raw read (numpy.fromfile)      {best['raw']:7.3f} s  {mb / best['raw']:8.0f} MB/s")
        print(
            f"stats, every row, 1 worker     {best['stats']:7.3f} s  {mb / best['stats']:8.0f} MB/s"
        )
        print(
            f"stats, every row, {workers} workers    {best['pool']:7.3f} s  {mb / best['pool']:8.0f} MB/s"
        )
        print(f"dask.array moments, 1 thread   {best['dask1']:7.3f} s")
        print(f"dask.array moments, {workers} threads  {best['daskN']:7.3f} s")
        print(f"stats, 512 sampled rows        {sampled:7.3f} s")
        print(
            f"ratio stats/raw throughput        {best['raw'] / best['stats']:.2f}x  (target >= 0.25x)"
        )
        print(
            f"ratio stats/dask, 1 core          {best['dask1'] / best['stats']:.2f}x  (target >= 1.0x)"
        )
        print(
            f"ratio stats/dask, {workers} cores         {best['daskN'] / best['pool']:.2f}x  (target >= 1.0x)"
        )
        print(
            f"ratio {workers} workers / 1 worker        {best['stats'] / best['pool']:.2f}x  (target >= 1.7x for 2)"
        )
        # Each repeat runs 1 and N workers back to back: the median of those paired ratios
        # is less exposed to load drift on a shared machine than a ratio of two minima.
        paired = sorted(one / many for one, many in zip(times["stats"], times["pool"], strict=True))
        print(
            f"ratio {workers} workers / 1 worker, median of {len(paired)} interleaved pairs "
            f"{paired[len(paired) // 2]:.2f}x  (pairs: {', '.join(f'{r:.2f}' for r in paired)})"
        )
        if compiled:
            # Once a process has counted COMPILED_AFTER float16 values (the warm-up runs
            # above do) the numba kernel counts them; this compares with np.bincount.
            pairs16 = sorted(p / c for p, c in zip(times["numpy16"], times["stats"], strict=True))
            print(
                f"stats, 1 worker, np.bincount only  {min(times['numpy16']):7.3f} s; "
                f"numba kernel speed-up {min(times['numpy16']) / best['stats']:.2f}x best, "
                f"{pairs16[len(pairs16) // 2]:.2f}x median of interleaved pairs"
            )
        else:
            print(
                "numba not installed: float16 counts by np.bincount (pip install 'vinlens[fast]')"
            )
        problems = getattr(stats, "integrity_problems", [])
        if problems:
            print(f"warning: {len(problems)} integrity problems", file=sys.stderr)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
