"""Store I/O: write and full-scan read of a ~1 GB store, measured side by side in one run.

Prints
  * write throughput (MB/s of payload through ``VinOfflineStoreWriter``, fsync on);
  * reader full-scan throughput / ``numpy.fromfile`` of the very same files (target >= 0.5x),
    both on a warm page cache, best of ``--repeat`` alternating runs;
  * reader peak memory (RSS high-water mark of a fresh subprocess doing the full scan, minus
    the same subprocess's RSS after imports) for the big store and a 4x smaller one: a
    streaming reader should need about the same memory for both (ratio ~1).

Usage: ``python benchmarks/bench_store_io.py [--quick] [--size-mb N] [--keep DIR]``;
``--quick`` uses ~100 MB (and ~25 MB for the small store).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vinlens.store.format import BlockKind, VinOfflineSample
from vinlens.store.reader import VinOfflineStoreReader
from vinlens.store.writer import VinOfflineStoreWriter

NUM_CANDIDATES = 64
BACKBONE_SHAPE = (32, 32, 32)  # float16: 64 KiB per row
VIN_POINTS = 2048  # semi-dense points per snippet; 24 KiB records


def _row_bytes() -> int:
    c = NUM_CANDIDATES
    return (
        int(np.prod(BACKBONE_SHAPE)) * 2  # backbone.voxel float16
        + 256 * 4  # backbone.global float32
        + c * (1 + 4 + 4 + 8 + 28)  # valid, rri, component, ids, poses
        + VIN_POINTS * 12  # vin_points
    )


def write_store(path: Path, size_mb: float, *, seed: int = 0) -> tuple[int, float]:
    """Write a store of about ``size_mb`` MB; returns (samples, seconds)."""
    num = max(1, int(size_mb * 1e6 // _row_bytes()))
    rng = np.random.default_rng(seed)
    pool = 32  # distinct random rows reused cyclically: generation must not dominate the timing
    voxel = [rng.normal(size=BACKBONE_SHAPE).astype(np.float16) for _ in range(pool)]
    glob = [rng.normal(size=256).astype(np.float32) for _ in range(pool)]
    points = [rng.normal(size=(VIN_POINTS, 3)).astype(np.float32) for _ in range(pool)]
    c = NUM_CANDIDATES
    start = time.perf_counter()
    with VinOfflineStoreWriter(path, num_candidates=c, rows_per_shard=512) as writer:
        for i in range(num):
            k = i % pool
            writer.add(
                VinOfflineSample(
                    sample_key=f"scene_{i // 64:06d}/snippet_{i % 64:06d}",
                    scene_id=f"scene_{i // 64:06d}",
                    snippet_id=f"snippet_{i % 64:06d}",
                    split="train" if i % 10 else "val",
                    vin_points=points[k],
                    candidate_valid=np.ones(c, dtype=bool),
                    rri=glob[k][:c],
                    rri_components={"visibility": glob[(k + 1) % pool][:c]},
                    candidate_ids=np.arange(c, dtype=np.int64),
                    candidate_poses=np.tile(glob[k][:7], (c, 1)),
                    backbone={"voxel": voxel[k], "global": glob[k]},
                )
            )
    return num, time.perf_counter() - start


def reader_scan(path: Path, kinds: tuple[BlockKind, ...] = tuple(BlockKind)) -> int:
    """Full scan through the reader: every zarr block in chunk-aligned batches, every record."""
    total = 0
    with VinOfflineStoreReader(path) as reader:
        for shard in reader.manifest.shards:
            for block in shard.blocks:
                if block.kind not in kinds:
                    continue
                if block.kind is BlockKind.ZARR_ARRAY:
                    for _, rows in reader.iter_row_batches(shard.shard_id, block.name):
                        total += rows.nbytes
                else:
                    for _, record in reader.iter_records(shard.shard_id, block.name):
                        total += record["points"].nbytes
    return total


def payload_files(path: Path) -> list[Path]:
    """The files a full scan decodes: zarr chunk files and msgpack record files."""
    files = []
    for p in sorted(path.rglob("*")):
        if p.is_file() and (p.suffix == ".msgpack" or "/c/" in p.as_posix()[len(str(path)) :]):
            files.append(p)
    return files


def fromfile_scan(files: list[Path]) -> int:
    return sum(int(np.fromfile(p, dtype=np.uint8).nbytes) for p in files)


def _peak_child(path: Path) -> dict[str, float]:
    code = (
        "import json, resource, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "import bench_store_io as b\n"
        "import zarr, vinlens.store.reader\n"
        "from pathlib import Path\n"
        "def rss_now():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmRSS:'): return int(line.split()[1]) / 1024\n"
        "base = rss_now()\n"
        "n = b.reader_scan(Path(sys.argv[1]))\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps({'bytes': n, 'base_mib': base, 'peak_mib': peak}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(Path(__file__).resolve().parent)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB instead of ~1 GB")
    parser.add_argument("--size-mb", type=float, default=None, help="size of the big store in MB")
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternating read runs (best is kept)"
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="write the stores here and keep them"
    )
    args = parser.parse_args()
    size_mb = args.size_mb or (100.0 if args.quick else 1000.0)

    root = args.keep or Path(tempfile.mkdtemp(prefix="vinlens-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    big, small = root / "big", root / "small"
    try:
        for p in (big, small):
            if p.exists():
                shutil.rmtree(p)
        n_big, t_write = write_store(big, size_mb)
        n_small, _ = write_store(small, size_mb / 4, seed=1)
        files = payload_files(big)
        disk_bytes = sum(p.stat().st_size for p in files)
        print(
            f"store: {n_big} samples, {disk_bytes / 1e6:.0f} MB of chunk+record files, {len(files)} files"
        )
        print(f"write: {disk_bytes / 1e6 / t_write:.0f} MB/s ({t_write:.1f} s, fsync on)")

        fromfile_scan(files)  # warm the page cache for both contenders
        best_reader = best_numpy = float("inf")
        scanned = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            scanned = reader_scan(big)
            best_reader = min(best_reader, time.perf_counter() - t0)
            t0 = time.perf_counter()
            fromfile_scan(files)
            best_numpy = min(best_numpy, time.perf_counter() - t0)
        reader_mbs = disk_bytes / 1e6 / best_reader
        numpy_mbs = disk_bytes / 1e6 / best_numpy
        print(
            f"read:  reader {reader_mbs:.0f} MB/s, numpy.fromfile {numpy_mbs:.0f} MB/s (decoded {scanned / 1e6:.0f} MB)"
        )
        print(f"RATIO reader/fromfile throughput: {reader_mbs / numpy_mbs:.2f}x (target >= 0.5x)")
        for kind, suffix in (
            (BlockKind.ZARR_ARRAY, "/c/"),
            (BlockKind.MSGPACK_INDEXED_RECORDS, ".msgpack"),
        ):
            part = [p for p in files if suffix in p.as_posix()]
            part_bytes = sum(p.stat().st_size for p in part)
            t_reader = t_numpy = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                reader_scan(big, (kind,))
                t_reader = min(t_reader, time.perf_counter() - t0)
                t0 = time.perf_counter()
                fromfile_scan(part)
                t_numpy = min(t_numpy, time.perf_counter() - t0)
            print(
                f"  {kind.value:24s} {part_bytes / 1e6:6.0f} MB: reader {part_bytes / 1e6 / t_reader:5.0f} MB/s, "
                f"fromfile {part_bytes / 1e6 / t_numpy:5.0f} MB/s, ratio {t_numpy / t_reader:.2f}x"
            )

        mem_big = _peak_child(big)
        mem_small = _peak_child(small)
        grow_big = mem_big["peak_mib"] - mem_big["base_mib"]
        grow_small = mem_small["peak_mib"] - mem_small["base_mib"]
        print(
            f"memory: full scan of {n_big} samples peaks {grow_big:.0f} MiB above imports "
            f"(RSS {mem_big['peak_mib']:.0f} MiB); {n_small} samples: {grow_small:.0f} MiB "
            f"(RSS {mem_small['peak_mib']:.0f} MiB)"
        )
        print(
            f"RATIO reader peak memory 4x store / 1x store: {mem_big['peak_mib'] / mem_small['peak_mib']:.2f}x RSS, "
            f"{grow_big / max(grow_small, 1.0):.2f}x above imports (target ~1x)"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
