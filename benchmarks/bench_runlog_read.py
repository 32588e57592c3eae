"""Reading one field of a run log against ``numpy.load`` of the same array.

Target: ``open_run(d).history_matrix(field)`` of a run of 1,000 modules by 10,000 sampled
steps (eleven fields, 880 MB of samples) <= 2x of ``numpy.load`` of that field's
``(modules, steps)`` float64 array saved as one ``.npy`` file (80 MB) beside it.

The log is written by the monitor's own writer (``RunLogWriter.sample`` per sampled step
and ``.step`` per step, default buffering and flush interval) with random values. The
timed read opens the run from nothing each time (a fresh :func:`open_run`: listing,
record scan, checksums of the field read) and returns the matrix; the ``.npy`` read is a
plain ``numpy.load``. Both read files the previous repetition left in the page cache (one
untimed read of each first), repetitions interleave the two in a shuffled order, and the
ratio is of the best wall times (on a shared machine other work only ever adds time).
``--quick`` runs 200 modules by 500 steps for a smoke run; the figure is the full size.

    python benchmarks/bench_runlog_read.py [--quick] [--modules N] [--steps N] [--dir D]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import numpy as np

from vinlens.health import open_run
from vinlens.health.monitor import HistoryField
from vinlens.health.monitor.runlog.writer import RunLogWriter

# A history row as the monitor writes it: the output summary, then the grad norm.
FIELDS = [*get_args(HistoryField)[1:], "grad_norm"]


def write_log(log: Path, modules: int, steps: int) -> None:
    meta = {"module_paths": [f"layer{i}" for i in range(modules)], "fields": FIELDS, "every": 1}
    rng = np.random.default_rng(0)
    writer = RunLogWriter(log, storage_options=None, rank=0, meta=meta)
    try:
        for step in range(steps):
            writer.sample(step, rng.standard_normal((modules, len(FIELDS))))
            writer.step(step, 1.0, 0.5)
    finally:
        writer.close()


def wall(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 modules x 500 steps, 3 reps")
    parser.add_argument("--modules", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--field", default="grad_norm", choices=FIELDS)
    parser.add_argument("--dir", help="where to write the log (default: a temporary directory)")
    args = parser.parse_args()
    if args.quick:
        args.modules, args.steps = 200, 500
    repetitions = 3 if args.quick else 7
    root = Path(args.dir or tempfile.mkdtemp(prefix="vinlens-bench-runlog-"))
    log, npy = root / "run", root / f"{args.field}.npy"
    try:
        start = time.perf_counter()
        write_log(log, args.modules, args.steps)
        size = sum(p.stat().st_size for p in (log / "rank-00000").iterdir())
        matrix = open_run(log).history_matrix(args.field)
        np.save(npy, np.ascontiguousarray(matrix.values))
        print(
            f"run log of {args.modules:,} modules x {args.steps:,} sampled steps,"
            f" {len(FIELDS)} fields: {size / 1e6:,.0f} MB written in"
            f" {time.perf_counter() - start:.1f} s; field {args.field!r}:"
            f" {npy.stat().st_size / 1e6:,.0f} MB as .npy"
        )
        work: dict[str, Callable[[], object]] = {
            "open_run": lambda: open_run(log).history_matrix(args.field).values,
            "numpy.load": lambda: np.load(npy),
        }
        assert np.array_equal(work["open_run"](), work["numpy.load"]())  # type: ignore[arg-type]
        times: dict[str, list[float]] = {name: [] for name in work}
        order = list(work)
        shuffle = random.Random(0).shuffle
        for _ in range(repetitions):
            shuffle(order)
            for name in order:
                times[name].append(wall(work[name]))
        best = {name: min(t) for name, t in times.items()}
        ratio = best["open_run"] / best["numpy.load"]
        print(
            f"  open_run(d).history_matrix({args.field!r}) {best['open_run'] * 1e3:8.1f} ms |"
            f" numpy.load {best['numpy.load'] * 1e3:8.1f} ms | ratio {ratio:.2f}x"
            f" (<= 2x {'PASS' if ratio <= 2 else 'MISS'}); best of {repetitions} interleaved"
        )
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
