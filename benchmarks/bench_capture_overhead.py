"""Cost of capturing every module of nn.Transformer at default limits (targets <= 1.05x, <= 1.02x).

Model: ``nn.Transformer(d_model=512, nhead=8, 6 + 6 layers, batch_first=True)``,
batch 8 x 64 tokens for source and target, forward under ``torch.no_grad()`` in
the default (training) mode. Three variants are timed, interleaved repetition
by repetition, and medians compared:

* plain forward;
* a fresh ``capture_model(model)`` (every module, default limits) entered,
  run and left per repetition, entry and exit included;
* forwards inside a capture whose quotas were exhausted beforehand (nothing left
  to record, so entering it registers no hook at all).

Both wall time and the main thread's CPU time are reported. torch runs on one
thread so that CPU time is the work done; on a shared machine the CPU-time
ratio is the one that other tenants disturb least, and the verdict uses it.

Training mode is used because in eval mode PyTorch's fused encoder fast path
refuses to run when any hook is attached, which would measure PyTorch's choice
of kernel rather than this capture (see docs/model-inspection.md).

    python benchmarks/bench_capture_overhead.py [--quick]   # --quick: 8 x 16 tokens, 3 reps
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn

from vinlens.model_inspection import ModelCapture, capture_model


def attributed_cost(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[float, float]:
    """CPU seconds spent inside this capture's own code during one forward: (hooks, enter+exit).

    Whole-forward ratios on a shared machine carry several percent of noise, far
    more than the effect measured; timing the hooks themselves shows what the
    capture really adds (PyTorch's own hook dispatch comes on top, and is what
    the quotas-exhausted ratio measures).
    """
    spent = [0.0]
    # Both hook paths (one global pair, or instance hooks) call these two methods.
    factories = {
        "_on_input": ModelCapture._on_input,
        "_on_output": ModelCapture._on_output,
    }

    def timing(method: Any) -> Any:
        def timed(self: ModelCapture, *args: Any) -> None:
            start = time.thread_time()
            try:
                method(self, *args)
            finally:
                spent[0] += time.thread_time() - start

        return timed

    for name, method in factories.items():
        setattr(ModelCapture, name, timing(method))
    try:
        capture = capture_model(model)
        start = time.thread_time()
        capture.__enter__()
        entered = time.thread_time() - start
        with torch.no_grad():
            model(*inputs)
        start = time.thread_time()
        capture.close()
        entered += time.thread_time() - start
    finally:
        for name, method in factories.items():
            setattr(ModelCapture, name, method)
    return spent[0], entered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 x 16 tokens and 3 repetitions")
    parser.add_argument("--repetitions", type=int, help="interleaved repetitions (default 9)")
    args = parser.parse_args()
    repetitions = args.repetitions or (3 if args.quick else 9)
    tokens = 16 if args.quick else 64
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Transformer(
        d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, batch_first=True
    )
    src, tgt = torch.randn(8, tokens, 512), torch.randn(8, tokens, 512)
    modules = sum(1 for _ in model.named_modules())

    wall: dict[str, list[float]] = {"plain": [], "capture": [], "exhausted": []}
    cpu: dict[str, list[float]] = {"plain": [], "capture": [], "exhausted": []}

    def record(name: str, wall_start: float, cpu_start: float) -> None:
        wall[name].append(time.perf_counter() - wall_start)
        cpu[name].append(time.thread_time() - cpu_start)

    exhausted = capture_model(model)
    snapshots = sampled = 0
    with torch.no_grad():
        model(src, tgt)  # warm-up: allocator, kernels
        with exhausted:
            model(src, tgt)
        assert len(exhausted.snapshots) == exhausted.limits.max_tensors
        for _ in range(repetitions):
            w, c = time.perf_counter(), time.thread_time()
            model(src, tgt)
            record("plain", w, c)

            w, c = time.perf_counter(), time.thread_time()
            with capture_model(model) as capture:
                model(src, tgt)
            record("capture", w, c)
            snapshots, sampled = len(capture.snapshots), capture.sampled_bytes

            with exhausted:
                w, c = time.perf_counter(), time.thread_time()
                model(src, tgt)
                record("exhausted", w, c)

    plain_wall, plain_cpu = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    print(
        f"nn.Transformer 6+6, d_model 512, batch 8x{tokens} tokens, {modules} modules hooked, "
        f"1 torch thread; {repetitions} interleaved repetitions, medians"
    )
    print(
        f"  plain forward          wall {plain_wall * 1e3:8.1f} ms   cpu {plain_cpu * 1e3:8.1f} ms"
    )
    for name, label, target in (
        ("capture", "capture (default)", 1.05),
        ("exhausted", "quotas exhausted", 1.02),
    ):
        wall_ratio = statistics.median(wall[name]) / plain_wall
        cpu_ratio = statistics.median(cpu[name]) / plain_cpu
        verdict = "PASS" if cpu_ratio <= target else "MISS"
        print(
            f"  {label:<22} wall {statistics.median(wall[name]) * 1e3:8.1f} ms   "
            f"cpu {statistics.median(cpu[name]) * 1e3:8.1f} ms   "
            f"ratio {wall_ratio:.3f}x wall, {cpu_ratio:.3f}x cpu (target <= {target}x) {verdict}"
        )
    print(f"  one capture kept {snapshots} snapshots, {sampled:,} sampled bytes")
    hooks, entry = attributed_cost(model, (src, tgt))
    print(
        f"  CPU inside the capture's own code per forward: hooks {hooks * 1e3:.2f} ms + "
        f"enter/exit {entry * 1e3:.2f} ms = {(hooks + entry) / plain_cpu:.2%} of the plain forward"
    )


if __name__ == "__main__":
    main()
