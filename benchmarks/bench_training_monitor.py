"""Cost of training-time health against plain training steps, with detect_anomaly beside it.

Targets: a monitored loop at ``every=100`` <= 1.03x of a plain loop (amortised), a sampled
step <= 1.5x, ``find_nonfinite_gradient_origin`` <= 2.5x of a plain step, and a monitored
loop writing a run log (``log_dir``) <= 1.01x of the same monitored loop without one (at
``every=100``, amortised the same way from its own per-step check and sampled step). The peer,
``torch.autograd.detect_anomaly(check_nan=True)``, runs on the same steps.

With ``log_dir`` the monitor also logs every step's fingerprints (the root's inputs, each
module's own weight and gradient norms: two float64 ``_foreach_norm`` passes, over the
weights and over the gradients); the column "every=100 with log_dir and fingerprints /
plain" is that logged loop, amortised as above, over the plain one (target <= 1.02x),
with the whole logged unsampled step's ratio (forward included, so its inputs fingerprint
too) beside it.

A step is ``zero_grad``, forward, loss and backward of the light CNNs of
``benchmarks/cnn_models.py`` (torch.nn only, train mode, random weights) on one batch;
the optimizer step (the same in every variant) is left out, so the ratios are the
conservative ones. ``tiny_mlp`` (a 32-64-10 MLP on a batch of 16) is the monitor's own
floor: its step is so short that the per-step check's fixed cost (the saved random states,
the fused finiteness check) shows; its repetitions time 50 steps of a variant in a row.
The unsampled monitored step costs one fused norm over every
gradient, so its ratio is about the time to read the gradients once over the step time:
small batches of a parameter-heavy model (resnet50) are its worst case. Repetitions interleave the variants (in a shuffled order each time); ratios are of median
main-thread CPU time (the best of the repetitions: on a shared machine other work only
ever adds time), torch on one thread. The amortised ratio at ``every=100`` is
``(99 * (plain + check) + sampled) / (100 * plain)``, where ``check`` is what the monitor
adds to an unsampled step, timed on its own (the monitor does nothing else between its
sampled steps); the whole unsampled step's ratio is printed beside it. The per-step checks
return the step's loss tensor, so the logged one reads and records it as a real step does.

Compiled column: the same model behind ``torch.compile`` (inductor; ``--no-compiled`` skips
it), its monitored steps against its own plain compiled steps, measured side by side in the
same repetitions and amortised the same way (target <= 1.03x at ``every=100``). Unsampled
monitored steps run the compiled code untouched; sampled ones run eagerly (see
``vinlens.wrappers``), so their ratio is about the eager step over the compiled one. The
line also prints how many dynamo graphs the monitored steps added (0 expected). Compiling
a model's forward and backward takes a minute or more on a small CPU machine.

    python benchmarks/bench_training_monitor.py [--quick] [--models ...] [--size 128] [--batch 8]
        [--no-compiled]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn

from cnn_models import MODELS
from vinlens.health import TrainingMonitor, find_nonfinite_gradient_origin


def cpu_time(work: Callable[[], object]) -> float:
    start = time.thread_time()
    work()
    return time.thread_time() - start


def repeat(work: Callable[[], object], times: int) -> None:
    for _ in range(times):
        work()


def measure(
    model: nn.Module, batch: torch.Tensor, repetitions: int, log_dir: str, inner: int = 1
) -> dict[str, list[float]]:
    target = torch.randint(0, 10, (batch.shape[0],))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(batch), target)
        loss.backward()
        return loss

    # every=1 samples each step, every=2**62 never does after step 0: the two kinds of
    # monitored step, measured side by side with the plain one. On the shared machine a
    # whole unsampled step is too noisy to show a 1% cost, so what the monitor adds to
    # one ("check": run_step of a step that does nothing, on the gradients the last step
    # left: the saved RNG state and the fused norm) is also timed on its own.
    sampled = TrainingMonitor(model, every=1)
    unsampled = TrainingMonitor(model, every=2**62)
    unsampled.run_step(step)  # step 0 is sampled; from here on it never is
    # The same two with a run log (a local directory, default flush interval).
    logged_sampled = TrainingMonitor(model, every=1, log_dir=f"{log_dir}/sampled")
    logged = TrainingMonitor(model, every=2**62, log_dir=f"{log_dir}/unsampled")
    logged.run_step(step)
    loss = step()  # warm-up; the loss tensor the checks return

    def anomaly() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # detect_anomaly warns that it is slow
            with torch.autograd.detect_anomaly(check_nan=True):
                step()

    work: dict[str, Callable[[], object]] = {
        "plain": step,
        "unsampled": lambda: unsampled.run_step(step),
        "check": lambda: unsampled.run_step(lambda: loss),
        "sampled": lambda: sampled.run_step(step),
        "logged_check": lambda: logged.run_step(lambda: loss),
        "logged_unsampled": lambda: logged.run_step(step),
        "logged_sampled": lambda: logged_sampled.run_step(step),
        "origin": lambda: find_nonfinite_gradient_origin(model, step),
        "anomaly": anomaly,
    }
    times: dict[str, list[float]] = {name: [] for name in work}
    order = list(work)
    shuffle = random.Random(0).shuffle
    for _ in range(repetitions):
        shuffle(order)  # no variant always runs right after the same other one
        for name in order:
            times[name].append(cpu_time(lambda run=work[name]: repeat(run, inner)) / inner)
    logged.close()
    logged_sampled.close()
    return times


# The monitor's own floor (issue 30.10): a tiny MLP's step is so short that what the
# monitor adds to every step (the saved random states, the fused finiteness check) shows.
# Each repetition times TINY_INNER steps of a variant in a row (one is too short to time).
TINY = {"tiny_mlp": (32, 64, 16)}  # input width, hidden width, batch
TINY_INNER = 50


def tiny_case(name: str) -> tuple[nn.Module, torch.Tensor, int]:
    width, hidden, batch = TINY[name]
    model = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    return model, torch.randn(batch, width), TINY_INNER


# ---- compiled column (torch.compile, inductor) ------------------------------------------


def measure_compiled(
    model: nn.Module, batch: torch.Tensor, repetitions: int
) -> tuple[dict[str, list[float]], int]:
    """Plain and monitored steps of ``torch.compile(model)``, interleaved: (times, graphs
    the monitored steps added to those of the plain compiled steps)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model)
    target = torch.randint(0, 10, (batch.shape[0],))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = loss_fn(compiled(batch), target)
        loss.backward()
        return loss

    step()  # compiles the forward and the backward
    loss = step()
    plain_graphs = int(counters["stats"]["unique_graphs"])
    sampled = TrainingMonitor(compiled, every=1)
    unsampled = TrainingMonitor(compiled, every=2**62)
    unsampled.run_step(step)  # step 0 is sampled; from here on it never is
    work: dict[str, Callable[[], object]] = {
        "plain": step,
        "unsampled": lambda: unsampled.run_step(step),
        "check": lambda: unsampled.run_step(lambda: loss),
        "sampled": lambda: sampled.run_step(step),
    }
    times: dict[str, list[float]] = {name: [] for name in work}
    order = list(work)
    shuffle = random.Random(1).shuffle
    for _ in range(repetitions):
        shuffle(order)
        for name in order:
            times[name].append(cpu_time(work[name]))
    added = int(counters["stats"]["unique_graphs"]) - plain_graphs
    torch._dynamo.reset()
    return times, added


def compiled_line(model: nn.Module, batch: torch.Tensor, repetitions: int) -> str:
    times, added = measure_compiled(model, batch, repetitions)
    best = {k: min(v) for k, v in times.items()}
    plain = best["plain"]
    check = best["check"] / plain
    sampled = best["sampled"] / plain
    amortised = (99 * (1 + check) + sampled) / 100
    return (
        f"  {'':<20} compiled (inductor): plain step {plain * 1e3:7.1f} ms | monitored "
        f"every=100 {verdict(amortised, 1.03)} (per-step check {best['check'] * 1e3:.1f} ms = "
        f"{check:.2%}; whole unsampled step {best['unsampled'] / plain:.3f}x) | sampled step "
        f"(eager) {sampled:.3f}x of a compiled step | graphs added by the monitor: {added}"
    )


# ---- end of the compiled column --------------------------------------------------------


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.3f}x (<= {target}x {'PASS' if ratio <= target else 'MISS'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 5")
    parser.add_argument(
        "--models", nargs="*", choices=sorted([*MODELS, *TINY]), default=[*MODELS, *TINY]
    )
    parser.add_argument("--size", type=int, default=128, help="image side (default 128)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument(
        "--no-compiled", action="store_true", help="skip the torch.compile (inductor) column"
    )
    args = parser.parse_args()
    repetitions = 3 if args.quick else 5
    torch.set_num_threads(1)
    torch.manual_seed(0)
    batch = torch.randn(args.batch, 3, args.size, args.size)
    print(
        f"training health vs plain steps: batch {args.batch} x 3 x {args.size} x {args.size}, "
        f"train mode, cross-entropy, 1 torch thread; {repetitions} interleaved repetitions, "
        "best of CPU time"
    )
    for name in args.models:
        model, model_batch, inner = (
            tiny_case(name) if name in TINY else (MODELS[name](10), batch, 1)
        )
        model.train()
        with tempfile.TemporaryDirectory(prefix="vinlens-bench-log-") as log_dir:
            times = measure(model, model_batch, repetitions, log_dir, inner)
        best = {k: min(v) for k, v in times.items()}
        plain = best["plain"]
        check = best["check"] / plain
        sampled = best["sampled"] / plain
        amortised = (99 * (1 + check) + sampled) / 100
        logged = (99 * (1 + best["logged_check"] / plain) + best["logged_sampled"] / plain) / 100
        print(
            f"  {name:<20} plain step {plain * 1e3:7.1f} ms | monitored every=100 "
            f"{verdict(amortised, 1.03)} (per-step check {best['check'] * 1e3:.1f} ms = "
            f"{check:.2%}; whole unsampled step {best['unsampled'] / plain:.3f}x) | sampled "
            f"step {verdict(sampled, 1.5)} | gradient origin "
            f"{verdict(best['origin'] / plain, 2.5)} | detect_anomaly "
            f"{best['anomaly'] / plain:.3f}x (peer) | log_dir / without at every=100 "
            f"{verdict(logged / amortised, 1.01)} (per-step check {best['logged_check'] * 1e3:.2f}"
            f" ms vs {best['check'] * 1e3:.2f} ms; sampled step"
            f" {best['logged_sampled'] / best['sampled']:.3f}x) | every=100 with log_dir and"
            f" fingerprints / plain {verdict(logged, 1.02)} (whole logged unsampled step"
            f" {best['logged_unsampled'] / plain:.3f}x)"
        )
        if not args.no_compiled:
            print(compiled_line(model, model_batch, repetitions))


if __name__ == "__main__":
    main()
