"""Store compare against the statistics of both stores, every row, side by side in one run.

``compare_vin_offline_stores(A, B, max_samples=None)`` reads every row of two stores and
counts every field on the shared binning; ``collect_vin_offline_dataset_stats(A,
max_samples=None)`` + the same for B reads the same rows for the statistics. Ratio
``compare seconds / (stats(A) + stats(B)) seconds``, target <= 1.2x, best of ``--repeat``
alternating runs on a warm page cache, in this process (and with ``--workers N`` also on
a process pool of N workers for both).

Three layouts, each written twice (B with another seed, so every field differs), timed
side by side in one run:

* ``voxel``: the stores ``bench_store_stats.py`` builds (float16 32x32x32 voxel backbone,
  a float32 global feature, 64 candidates with RRI, a component, ids and poses, 512 VIN
  points per row, 128-row shards of ~9 MB);
* ``cameras-8`` and ``cameras-256``: per-camera backbone fields of shape (8, 64) float16
  and (8, 16) float32 (compare also histograms each camera ``field[k]``), 16 candidates
  and 32 VIN points per row, in 8-row and in 256-row shards.

Usage: ``python benchmarks/bench_store_compare.py [--quick] [--size-mb N] [--repeat N]
[--workers N] [--layout NAME ...] [--keep DIR]``; ``--quick`` writes ~100 MB per voxel
store instead of ~1 GB (and 4,096 instead of 32,768 rows per camera store).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import tempfile
from pathlib import Path

import numpy as np

from bench_store_stats import steady_state_kernels, timed, write_pooled_rows, write_store
from vinlens.store.compare import compare_vin_offline_stores
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats

CAMERAS = 8
CAMERA_CANDIDATES = 16
CAMERA_POINTS = 32
LAYOUTS = ("voxel", "cameras-8", "cameras-256")


def _payload_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def _warm(store: Path) -> None:
    for p in store.rglob("*"):
        if p.is_file():
            p.read_bytes()


def write_camera_store(path: Path, rows: int, rows_per_shard: int, seed: int = 0) -> int:
    """A store with per-camera backbone fields (8, 64) float16 and (8, 16) float32."""
    rng = np.random.default_rng(seed)
    pool = 32  # random rows reused cyclically, so generating data does not dominate
    feat = [(rng.normal(size=(CAMERAS, 64)) * 0.5).astype(np.float16) for _ in range(pool)]
    pooled = [rng.normal(size=(CAMERAS, 16)).astype(np.float32) for _ in range(pool)]
    points = [rng.normal(size=(CAMERA_POINTS, 3)).astype(np.float32) for _ in range(pool)]
    backbones = [{"feat": f, "pooled": p} for f, p in zip(feat, pooled, strict=True)]
    write_pooled_rows(
        path,
        rows,
        rng,
        points,
        backbones,
        CAMERA_CANDIDATES,
        rows_per_shard=rows_per_shard,
        components=False,
    )
    return rows


def _write(layout: str, path: Path, seed: int, size_mb: float, camera_rows: int) -> int:
    if layout == "voxel":
        return write_store(path, size_mb, seed=seed)
    return write_camera_store(path, camera_rows, int(layout.split("-")[1]), seed=seed)


def _measure(a: Path, b: Path, repeat: int, workers: int) -> dict[str, float]:
    """Best seconds of compare(A, B) and stats(A) + stats(B), alternating the repeats."""
    _warm(a)
    _warm(b)
    # Warm imports and the compiled kernel before timing.
    collect_vin_offline_dataset_stats(a, max_samples=None)
    compare_vin_offline_stores(a, b, max_samples=16)

    def stats_both(executor: concurrent.futures.Executor | None = None) -> None:
        collect_vin_offline_dataset_stats(a, max_samples=None, executor=executor)
        collect_vin_offline_dataset_stats(b, max_samples=None, executor=executor)

    def compare(executor: concurrent.futures.Executor | None = None) -> None:
        compare_vin_offline_stores(a, b, max_samples=None, executor=executor)

    times: dict[str, list[float]] = {
        "stats": [],
        "compare": [],
        "stats_pool": [],
        "compare_pool": [],
    }
    for _ in range(repeat):
        times["stats"].append(timed(stats_both)[0])
        times["compare"].append(timed(compare)[0])
    if workers:
        with concurrent.futures.ProcessPoolExecutor(
            workers, initializer=steady_state_kernels
        ) as pool:
            compare(pool)  # start the workers
            stats_both(pool)
            for _ in range(repeat):
                times["stats_pool"].append(timed(lambda: stats_both(pool))[0])
                times["compare_pool"].append(timed(lambda: compare(pool))[0])
    return {k: min(v) for k, v in times.items() if v}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB stores instead of ~1 GB")
    parser.add_argument("--size-mb", type=float, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="also time a process pool")
    parser.add_argument(
        "--layout", nargs="+", choices=LAYOUTS, default=list(LAYOUTS), help="layouts to time"
    )
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) stores here")
    args = parser.parse_args(argv)
    size_mb = args.size_mb or (100.0 if args.quick else 1000.0)
    camera_rows = 4096 if args.quick else 32768

    tmp = None
    root = args.keep
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="vinlens-bench-compare-"))
        root = tmp
    try:
        steady_state_kernels()
        results: dict[str, dict[str, float]] = {}
        for layout in args.layout:
            a, b = root / layout / "a", root / layout / "b"
            for path, seed in ((a, 0), (b, 1)):
                if not (path / "manifest.json").exists():
                    seconds, num = timed(
                        lambda p=path, s=seed, lay=layout: _write(lay, p, s, size_mb, camera_rows)
                    )
                    print(f"{layout}: wrote {num} samples to {path.name} in {seconds:.1f} s")
            print(
                f"{layout}: A {_payload_bytes(a) / 1e6:.0f} MB, B {_payload_bytes(b) / 1e6:.0f} MB"
            )
            results[layout] = _measure(a, b, args.repeat, args.workers)
        print(
            f"{'layout':<12} {'compare s':>10} {'stats+stats s':>14} {'ratio':>7}  (target <= 1.2x)"
        )
        worst = 0.0
        for layout, best in results.items():
            ratio = best["compare"] / best["stats"]
            worst = max(worst, ratio)
            print(
                f"{layout:<12} {best['compare']:10.2f} {best['stats']:14.2f} {ratio:6.2f}x  "
                f"{'ok' if ratio <= 1.2 else 'ABOVE TARGET'}"
            )
            if args.workers:
                ratio_pool = best["compare_pool"] / best["stats_pool"]
                print(
                    f"{'':<12} {best['compare_pool']:10.2f} {best['stats_pool']:14.2f} "
                    f"{ratio_pool:6.2f}x  ({args.workers} workers)"
                )
        print(f"worst in-process ratio {worst:.2f}x (target <= 1.2x)")
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
