"""inspect_model vs torchinfo.summary on a 10,000-module model (target: >= 15x faster).

Both run side by side in one process, interleaved, with a garbage collection
before every measurement, and the medians are compared (this machine is shared
and noisy). torchinfo is called the way the issue states it, without input,
and with ``verbose=0`` so that printing its table is not part of its time.

    python benchmarks/bench_inspect_model.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import torch
import torchinfo
from torch import nn

from vinlens.model_inspection import inspect_model


def ten_thousand_modules() -> nn.Module:
    """1 root + 100 stages x 33 blocks x (block, Linear, LayerNorm) = 10,001 modules."""
    stages = [
        nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)) for _ in range(33)])
        for _ in range(100)
    ]
    return nn.Sequential(*stages)


def timed(function: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call, after a full collection."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 9")
    args = parser.parse_args()
    repetitions = 3 if args.quick else 9
    torch.set_num_threads(1)
    model = ten_thousand_modules()
    count = sum(1 for _ in model.named_modules())
    metadata = inspect_model(model)  # warm both paths once
    torchinfo.summary(model, verbose=0)
    assert len(metadata.modules) == count

    candidates: dict[str, Callable[[], object]] = {
        "inspect_model": lambda: inspect_model(model),
        "torchinfo.summary": lambda: torchinfo.summary(model, verbose=0),
        "named_modules walk": lambda: list(model.named_modules()),
    }
    wall: dict[str, list[float]] = {name: [] for name in candidates}
    cpu: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repetitions):
        for name, function in candidates.items():
            w, c = timed(function)
            wall[name].append(w)
            cpu[name].append(c)

    print(
        f"model: {count:,} modules, {metadata.total_parameters:,} parameters; "
        f"{repetitions} interleaved repetitions, medians"
    )
    for name in candidates:
        print(
            f"  {name:<20} wall {statistics.median(wall[name]) * 1e3:8.1f} ms   "
            f"cpu {statistics.median(cpu[name]) * 1e3:8.1f} ms"
        )
    ratio = statistics.median(wall["torchinfo.summary"]) / statistics.median(wall["inspect_model"])
    cpu_ratio = statistics.median(cpu["torchinfo.summary"]) / statistics.median(
        cpu["inspect_model"]
    )
    verdict = "PASS" if ratio >= 15 else "MISS"
    print(
        f"speedup torchinfo/inspect_model: {ratio:.1f}x wall, {cpu_ratio:.1f}x cpu "
        f"(target >= 15x) {verdict}"
    )


if __name__ == "__main__":
    main()
