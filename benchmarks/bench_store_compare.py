"""Store compare against the statistics of both stores, every row, side by side in one run.

``compare_vin_offline_stores(A, B, max_samples=None)`` reads every row of two stores and
counts every field on the shared binning; ``collect_vin_offline_dataset_stats(A,
max_samples=None)`` + the same for B reads the same rows for the statistics. Ratio
``compare seconds / (stats(A) + stats(B)) seconds``, target <= 1.2x, best of ``--repeat``
alternating runs on a warm page cache, in this process (and with ``--workers N`` also on
a process pool of N workers for both).

The stores are the ones ``bench_store_stats.py`` builds (float16 32x32x32 voxel backbone,
a float32 global feature, 64 candidates with RRI, a component, ids and poses, 512 VIN
points per row, ~9 MB shards); B is written with another seed, so every field differs.

Usage: ``python benchmarks/bench_store_compare.py [--quick] [--size-mb N] [--repeat N]
[--workers N] [--keep DIR]``; ``--quick`` writes ~100 MB per store instead of ~1 GB.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench_store_stats import write_store
from vinlens.store.compare import compare_vin_offline_stores
from vinlens.store.diagnostics import collect_vin_offline_dataset_stats, kernels

T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _steady_state_kernels() -> None:
    """Count float16 with the compiled kernel (when installed) from the first value."""
    kernels.COMPILED_AFTER = 0


def _payload_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def _warm(store: Path) -> None:
    for p in store.rglob("*"):
        if p.is_file():
            p.read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB stores instead of ~1 GB")
    parser.add_argument("--size-mb", type=float, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="also time a process pool")
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) stores here")
    args = parser.parse_args(argv)
    size_mb = args.size_mb or (100.0 if args.quick else 1000.0)

    tmp = None
    root = args.keep
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="vinlens-bench-compare-"))
        root = tmp
    a, b = root / "a", root / "b"
    try:
        for path, seed in ((a, 0), (b, 1)):
            if not (path / "manifest.json").exists():
                seconds, num = _timed(lambda p=path, s=seed: write_store(p, size_mb, seed=s))
                print(f"wrote {num} samples to {path.name} in {seconds:.1f} s")
        print(f"stores: A {_payload_bytes(a) / 1e6:.0f} MB, B {_payload_bytes(b) / 1e6:.0f} MB")
        _warm(a)
        _warm(b)
        _steady_state_kernels()
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
        for _ in range(args.repeat):
            times["stats"].append(_timed(stats_both)[0])
            times["compare"].append(_timed(compare)[0])
        if args.workers:
            with concurrent.futures.ProcessPoolExecutor(
                args.workers, initializer=_steady_state_kernels
            ) as pool:
                compare(pool)  # start the workers
                stats_both(pool)
                for _ in range(args.repeat):
                    times["stats_pool"].append(_timed(lambda: stats_both(pool))[0])
                    times["compare_pool"].append(_timed(lambda: compare(pool))[0])

        best = {k: min(v) for k, v in times.items() if v}
        ratio = best["compare"] / best["stats"]
        verdict = "ok" if ratio <= 1.2 else "ABOVE TARGET"
        print(
            f"in process: compare(A, B) {best['compare']:.2f} s, stats(A) + stats(B) "
            f"{best['stats']:.2f} s: ratio {ratio:.2f}x (target <= 1.2x) {verdict}"
        )
        if args.workers:
            ratio_pool = best["compare_pool"] / best["stats_pool"]
            print(
                f"{args.workers} workers: compare {best['compare_pool']:.2f} s, stats + stats "
                f"{best['stats_pool']:.2f} s: ratio {ratio_pool:.2f}x"
            )
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
