"""Cost of the health engine against plain forwards (issue 31 targets: stats / (plain + floor)
<= 1.15x, NaN origin <= 1.4x, diff <= 2.2x of two plain forwards).

* ``collect_activation_stats`` over N batches / (N plain forwards + the floor), every module
  summarized. The floor is the one fused pass a summary needs over every module output of
  the same forwards, timed alone in the same run: the kernels of
  ``vinlens.model_inspection.summary``'s CPU path per output, without hooks, records or
  Python bookkeeping. With numba (the ``fast`` extra) that is ``aminmax`` in the source
  dtype and the compiled float64 sum / sum of squares / zero count, both over the output's
  memory (the kernel the summaries use, loaded before any timing); without numba, or for
  an output that is not dense, the torch kernels of the fallback (``aminmax``, one float64
  copy, ``sum`` and ``dot`` there, and ``abs_`` + ``count_nonzero`` of the bits when 0 is
  in range). The outputs are collected by a reference-keeping hook in an untimed forward
  just before. ``stats / plain`` is printed beside it, and the header says which floor;
* ``find_nonfinite_origin`` (every module's inputs and outputs summarized) / one plain forward;
* ``compare_models`` (two models in lockstep) / two plain forwards.

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
from vinlens.hooks import HookSet
from vinlens.model_inspection.summary import _cpu

# Loaded here, untimed (importing numba and its cached kernel takes ~1 s once per process).
KERNEL = _cpu._moments_kernel()

STATS, ORIGIN, DIFF = 1.15, 1.4, 2.2


def cpu_time(work: Callable[[], object], clock: Callable[[], float] = time.thread_time) -> float:
    start = clock()
    work()
    return clock() - start


def fused_pass(tensor: torch.Tensor) -> None:
    """The kernels of one summary of a CPU float32 output (see the module docstring)."""
    flat = _cpu._memory_order(tensor) if KERNEL is not None else None
    if flat is not None:
        low, high = torch.aminmax(flat)
        float(low), float(high)
        KERNEL(flat.numpy())
        return
    low, high = torch.aminmax(tensor)
    wide = torch.empty(tensor.shape, dtype=torch.float64)
    wide.copy_(tensor)
    flat = wide.view(-1)
    float(flat.sum())
    float(torch.dot(flat, flat))
    if float(low) <= 0.0 <= float(high):
        int(torch.count_nonzero(torch.abs(flat, out=flat).view(torch.int64)))


def floor_time(model: nn.Module, batches: list[torch.Tensor]) -> float:
    """CPU time of :func:`fused_pass` over every module output of a forward per batch."""
    total = 0.0
    for batch in batches:
        # Each distinct (tensor, version) once, as the engines' caches reduce them: an
        # output changed in place by the next module (an inplace activation after a
        # BatchNorm) counts twice, a container passing its child's output on once.
        outputs: dict[tuple[int, int], torch.Tensor] = {}

        def keep(
            _label: str,
            _args: tuple[object, ...],
            output: object,
            outputs: dict[tuple[int, int], torch.Tensor] = outputs,
        ) -> None:
            if isinstance(output, torch.Tensor) and output.is_floating_point():
                outputs.setdefault((id(output), output._version), output)

        with HookSet() as hooks:
            hooks.hook_modules([(n, m) for n, m in model.named_modules()], post=keep)
            model(batch)
        kept = list(outputs.values())
        total += cpu_time(lambda kept=kept: [fused_pass(t) for t in kept])
    return total


def measure(
    model: nn.Module, twin: nn.Module, batches: list[torch.Tensor], repetitions: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        k: [] for k in ("plain_n", "floor", "stats", "plain", "nan", "diff", "plain2")
    }
    first = batches[0]
    with torch.no_grad():
        model(first)  # warm-up
        for _ in range(repetitions):
            times["plain_n"].append(cpu_time(lambda: [model(b) for b in batches]))
            times["floor"].append(floor_time(model, batches))
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
        f"thread; {repetitions} interleaved repetitions, medians of CPU time; floor: "
        f"{'aminmax + the compiled pass (numba)' if KERNEL is not None else 'torch kernels'}"
    )
    for name in args.models:
        model = MODELS[name]().eval()
        times = measure(model, copy.deepcopy(model), batches, repetitions)
        med = {k: statistics.median(v) for k, v in times.items()}
        stats_ratio = med["stats"] / (med["plain_n"] + med["floor"])
        nan_ratio = med["nan"] / med["plain"]
        diff_ratio = med["diff"] / med["plain2"]
        print(
            f"  {name:<20} plain {med['plain'] * 1e3:7.1f} ms | stats over {count} batches / "
            f"(plain + floor) {stats_ratio:.3f}x "
            f"({'PASS' if stats_ratio <= STATS else 'MISS'} <= {STATS}; floor "
            f"{med['floor'] / med['plain_n']:.3f}x plain, stats / plain "
            f"{med['stats'] / med['plain_n']:.3f}x) | NaN origin {nan_ratio:.3f}x "
            f"({'PASS' if nan_ratio <= ORIGIN else 'MISS'} <= {ORIGIN}) | diff {diff_ratio:.3f}x "
            f"of two plain forwards, process CPU ({'PASS' if diff_ratio <= DIFF else 'MISS'} "
            f"<= {DIFF})"
        )


if __name__ == "__main__":
    main()
