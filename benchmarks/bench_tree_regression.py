"""No regression from the architecture rework: this tree against the old one, side by side.

The old tree is commit ``1a09f8a`` (before issue 20), checked out with ``git worktree`` in
a temporary directory. Two worker processes run the same core loops, one importing
``vinlens`` from the old tree and one from this tree (``PYTHONPATH``); the parent asks
them in turn, workload by workload and round by round, so drifting load on a shared
machine hits both alike. Each figure is the median over rounds of the best of
``--repeats`` calls' CPU time of the worker's main thread (torch on one thread); the
verdict is the median over rounds of each round's ``new / old`` (target <= 1.05, i.e. no
regression beyond noise).

Workloads (the core loops of the named benchmarks):

* ``store_stats`` (``bench_store_stats.py``): ``collect_vin_offline_dataset_stats(store,
  max_samples=None)`` on one VIN-like store written by this tree (format v1, read by both);
* ``aggregation`` (``bench_attr_aggregate.py``): ``aggregate_attributions`` of the demo
  model over batches of camera images, Grad-CAM, ``.finish()``;
* ``capture`` (``bench_capture_cnn.py``): ``with capture_model(model): model(image)`` at
  default limits on the CNNs of ``cnn_models.py``;
* ``health_stats`` and ``nan_origin`` (``bench_health.py``): ``collect_activation_stats``
  over batches and ``find_nonfinite_origin`` of one forward;
* ``diff`` (``bench_health.py``): ``compare_models(model, twin, run)`` of two copies in
  lockstep (worker process CPU time: model B's forward runs in a thread);
* ``monitor_step`` (``bench_training_monitor.py``): one sampled step of
  ``TrainingMonitor(model, every=1).run_step(step)`` (zero_grad, forward, loss, backward).

A workload whose API the old tree lacks is left out of the comparison (the two trees are
compared on the workloads both have). To quote a change against the tree just before it,
pass ``--old <commit before the change>``.

    python benchmarks/bench_tree_regression.py [--quick] [--old COMMIT] [--rounds N] [--repeats N]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OLD_COMMIT = "1a09f8a"
TARGET = 1.05
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# --------------------------------------------------------------------------------------
# Worker side: runs in a subprocess whose vinlens comes from one tree
# --------------------------------------------------------------------------------------


def _build_workloads(store: str, quick: bool) -> dict[str, Callable[[], object]]:
    import torch

    from cnn_models import MODELS
    from vinlens.attribution import aggregate_attributions
    from vinlens.demo import EVIDENCE_CLASS, MultiCameraDemoModel, make_camera_images
    from vinlens.health import collect_activation_stats, find_nonfinite_origin
    from vinlens.model_inspection import capture_model
    from vinlens.store.diagnostics import collect_vin_offline_dataset_stats

    torch.set_num_threads(1)
    torch.manual_seed(0)
    names = ["mobilenet_v3_large"] if quick else list(MODELS)
    models = {name: MODELS[name]().eval() for name in names}
    image = torch.randn(1, 3, 128, 128)
    batches = [torch.randn(4, 3, 128 if not quick else 96, 128 if not quick else 96)]
    batches *= 2 if quick else 4
    evidence = {"rgb": (40, 40), "slam-left": (30, 30)}
    camera_batches = [
        make_camera_images(4, evidence=evidence, seed=s) for s in range(3 if quick else 8)
    ]
    demo = MultiCameraDemoModel("dedicated_layer")
    targets = demo.camera_targets()

    def store_stats() -> object:
        return collect_vin_offline_dataset_stats(store, max_samples=None)

    def aggregation() -> object:
        return aggregate_attributions(
            demo, camera_batches, targets, score=EVIDENCE_CLASS, method="grad_cam"
        ).finish()

    workloads: dict[str, Callable[[], object]] = {
        "store_stats": store_stats,
        "aggregation": aggregation,
    }
    try:  # engines an old tree may not have
        from vinlens.health import TrainingMonitor, compare_models
    except ImportError:
        TrainingMonitor = compare_models = None  # type: ignore[assignment,misc]
    for name, model in models.items():

        def capture(model: Any = model) -> object:
            with torch.no_grad(), capture_model(model):
                return model(image)

        def health_stats(model: Any = model) -> object:
            with torch.no_grad():
                return collect_activation_stats(model, batches)

        def nan_origin(model: Any = model) -> object:
            with torch.no_grad():
                return find_nonfinite_origin(model, lambda: model(batches[0]))

        workloads[f"capture/{name}"] = capture
        workloads[f"health_stats/{name}"] = health_stats
        workloads[f"nan_origin/{name}"] = nan_origin
        if compare_models is not None:
            twin = copy.deepcopy(model)

            def diff(model: Any = model, twin: Any = twin) -> object:
                with torch.no_grad():
                    return compare_models(model, twin, lambda m: m(batches[0]))

            workloads[f"diff/{name}"] = diff
        if TrainingMonitor is not None:
            trained = copy.deepcopy(model).train()
            monitor = TrainingMonitor(trained, every=1)
            target = torch.randint(0, 10, (batches[0].shape[0],))

            def step(trained: Any = trained, target: Any = target) -> object:
                trained.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(trained(batches[0]), target)
                loss.backward()
                return loss

            def monitor_step(monitor: Any = monitor, step: Any = step) -> object:
                return monitor.run_step(step)

            workloads[f"monitor_step/{name}"] = monitor_step
    return workloads


def worker(store: str, quick: bool) -> None:
    """Answer ``name`` lines on stdin with the CPU seconds of one call, as JSON."""
    import vinlens

    workloads = _build_workloads(store, quick)
    for work in workloads.values():  # warm-up: allocator, kernels, caches
        work()
    print(json.dumps({"ready": sorted(workloads), "vinlens": vinlens.__file__}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        name, _, count = name.partition(" ")
        best = float("inf")
        # The best of a few calls: other tenants of a shared machine only ever add time.
        # The diff runs model B in a thread: process CPU time counts both forwards.
        clock = time.process_time if name.startswith("diff/") else time.thread_time
        for _ in range(int(count or 1)):
            start = clock()
            workloads[name]()
            best = min(best, clock() - start)
        print(json.dumps({"name": name, "seconds": best}), flush=True)


# --------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------


class Tree:
    """One worker process importing vinlens from ``src``."""

    def __init__(self, label: str, src: Path, store: Path, quick: bool) -> None:
        self.label = label
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE)])
        env["OMP_NUM_THREADS"] = "1"
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(store)]
        if quick:
            command.append("--quick")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, cwd=src
        )
        ready = self._read()
        self.names: list[str] = ready["ready"]
        module = Path(ready["vinlens"]).resolve()
        if not module.is_relative_to(src.resolve()):
            raise RuntimeError(f"{label} tree imported vinlens from {module}, not from {src}")

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} worker exited (code {self.process.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def run(self, name: str, repeats: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{name} {repeats}\n")
        self.process.stdin.flush()
        return float(self._read()["seconds"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def _write_store(path: Path, size_mb: float) -> int:
    from bench_store_stats import write_store

    return write_store(path, size_mb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one CNN, smaller inputs, 7 rounds")
    parser.add_argument("--old", default=OLD_COMMIT, help=f"old commit (default {OLD_COMMIT})")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 7, or 11)")
    parser.add_argument("--repeats", type=int, default=3, help="calls per figure (best of)")
    parser.add_argument("--size-mb", type=float, default=None, help="store size (12, or 60)")
    parser.add_argument("--worker", metavar="STORE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.quick)
        return 0
    rounds = args.rounds or (7 if args.quick else 11)
    repeats = max(1, args.repeats)
    size_mb = args.size_mb or (12.0 if args.quick else 60.0)
    with tempfile.TemporaryDirectory(prefix="vinlens-tree-regression-") as tmp:
        old_root = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_root), args.old],
            check=True,
            capture_output=True,
        )
        trees: list[Tree] = []
        try:
            store = Path(tmp) / "store"
            rows = _write_store(store, size_mb)
            old = Tree("old", old_root / "src", store, args.quick)
            trees.append(old)
            new = Tree("new", ROOT / "src", store, args.quick)
            trees.append(new)
            names = [n for n in new.names if n in old.names]
            times: dict[str, dict[str, list[float]]] = {n: {"old": [], "new": []} for n in names}
            for round_index in range(rounds):
                for name in names:
                    # Alternate which tree goes first, so neither always follows the other.
                    pair = (old, new) if round_index % 2 == 0 else (new, old)
                    for tree in pair:
                        times[name][tree.label].append(tree.run(name, repeats))
        finally:
            for tree in trees:
                tree.close()
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_root)],
                check=False,
                capture_output=True,
            )
            shutil.rmtree(old_root, ignore_errors=True)
    print(
        f"new tree vs {args.old}: {rounds} interleaved rounds, medians of the best of {repeats} "
        f"calls' worker main-thread CPU time, torch on 1 thread; store of {rows} rows "
        f"(~{size_mb:g} MB)"
    )
    worst = 0.0
    for name in names:
        o = statistics.median(times[name]["old"])
        n = statistics.median(times[name]["new"])
        # Paired: each round's two figures were taken next to each other, under one load.
        paired = statistics.median(
            a / b for a, b in zip(times[name]["new"], times[name]["old"], strict=True)
        )
        worst = max(worst, paired)
        print(
            f"  {name:<36} old {o * 1e3:9.1f} ms  new {n * 1e3:9.1f} ms  "
            f"new/old {n / o:.3f} (median of paired rounds {paired:.3f})"
        )
    print(f"worst new/old {worst:.3f} (target <= {TARGET}) {'PASS' if worst <= TARGET else 'MISS'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
