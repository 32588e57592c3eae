"""Cost of the health engine against plain forwards (targets: stats <= 1.3x, NaN origin <= 2x).

* ``collect_activation_stats`` over N batches / N plain forwards (every module summarized);
* ``find_nonfinite_origin`` (every module's inputs and outputs summarized) / one plain forward;
* ``compare_models`` (two models in lockstep) / two plain forwards, for information.

Models: the light CNNs of ``benchmarks/cnn_models.py`` (torch.nn only, eval mode,
random weights), batches of 4 x 3 x 128 x 128, under ``torch.no_grad()``, torch on one
thread; repetitions interleaved, ratios of median main-thread CPU time.

    python benchmarks/bench_health.py [--quick]   # --quick: 3 repetitions, 4 batches
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from cnn_models import MODELS
from vinlens.health import collect_activation_stats, compare_models, find_nonfinite_origin


def cpu_time(work: Callable[[], object], clock: Callable[[], float] = time.thread_time) -> float:
    start = clock()
    work()
    return clock() - start


def measure(
    model: nn.Module, twin: nn.Module, batches: list[torch.Tensor], repetitions: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        k: [] for k in ("plain_n", "stats", "plain", "nan", "diff", "plain2")
    }
    first = batches[0]
    with torch.no_grad():
        model(first)  # warm-up
        for _ in range(repetitions):
            times["plain_n"].append(cpu_time(lambda: [model(b) for b in batches]))
            times["stats"].append(cpu_time(lambda: collect_activation_stats(model, batches)))
            times["plain"].append(cpu_time(lambda: model(first)))
            times["nan"].append(
                cpu_time(lambda: find_nonfinite_origin(model, lambda: model(first)))
            )
            # Model B runs in a worker thread: process CPU time counts both forwards.
            times["diff"].append(
                cpu_time(lambda: compare_models(model, twin, lambda m: m(first)), time.process_time)
            )
            times["plain2"].append(cpu_time(lambda: (model(first), twin(first)), time.process_time))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions and 4 batches")
    parser.add_argument("--models", nargs="*", choices=sorted(MODELS), default=list(MODELS))
    args = parser.parse_args()
    repetitions, count = (3, 4) if args.quick else (7, 16)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    batches = [torch.randn(4, 3, 128, 128) for _ in range(count)]
    print(
        f"health engine vs plain forwards: batches 4 x 3 x 128 x 128, eval, no_grad, 1 torch "
        f"thread; {repetitions} interleaved repetitions, medians of CPU time"
    )
    for name in args.models:
        model = MODELS[name]().eval()
        times = measure(model, copy.deepcopy(model), batches, repetitions)
        med = {k: statistics.median(v) for k, v in times.items()}
        stats_ratio = med["stats"] / med["plain_n"]
        nan_ratio = med["nan"] / med["plain"]
        diff_ratio = med["diff"] / med["plain2"]
        print(
            f"  {name:<20} plain {med['plain'] * 1e3:7.1f} ms | stats over {count} batches "
            f"{stats_ratio:.3f}x (<= 1.3x {'PASS' if stats_ratio <= 1.3 else 'MISS'}) | "
            f"NaN origin {nan_ratio:.3f}x (<= 2x {'PASS' if nan_ratio <= 2 else 'MISS'}) | "
            f"diff {diff_ratio:.3f}x of two plain forwards (process CPU)"
        )


if __name__ == "__main__":
    main()
