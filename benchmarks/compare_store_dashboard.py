"""Store dashboard overhead of two source trees, side by side in one run, interleaved.

``bench_store_dashboard.py`` run twice, at different times on a shared machine, cannot
say whether a change made the widget slower: the engine's wall time alone moves by 2-4x
between runs. This runs each tree's own ``benchmarks/bench_store_dashboard.py`` in a
worker process of its own (its ``src`` first on ``sys.path``), on the same store, and
alternates the two (engine, then widget, per tree; the order flips every round), so
drift hits both. Per tree it prints the engine, the widget (kernel to synced payload),
what the widget adds around its engine call, the browser render to frame, and the
ratios ``(kernel + browser) / engine``: from wall medians, the median of per-round
ratios, engine + same-run overhead, and in process CPU seconds. Example, against the
commit before a change::

    git worktree add /tmp/bench-old <commit> && ln -s $PWD/node_modules /tmp/bench-old/node_modules
    (cd /tmp/bench-old && npm run build)
    python benchmarks/compare_store_dashboard.py --quick old=/tmp/bench-old new=.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]


def worker(root: Path) -> int:
    """Answer one JSON request per stdin line with one JSON line, using ``root``'s code."""
    if not (root / "benchmarks" / "bench_store_dashboard.py").is_file():
        print(f"{root} has no benchmarks/bench_store_dashboard.py", file=sys.stderr)
        return 2
    # The tree's own benchmark and source, ahead of this script's directory.
    sys.path[:0] = [str(root / "src"), str(root / "benchmarks")]
    import bench_store_dashboard as bench
    from vinlens.store.synthetic import SyntheticStoreSpec

    answer, sys.stdout = sys.stdout, sys.stderr  # the benchmark's prints stay off the pipe
    store: Path | None = None
    sync: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "store":
            spec = SyntheticStoreSpec(
                num_scenes=request["scenes"],
                snippets_per_scene=10,
                samples_per_snippet=10,
                rows_per_shard=4096,
            )
            store = bench.ensure_store(Path(request["dir"]), spec)
            reply: dict[str, Any] = {"bench": bench.__file__}
        elif op == "engine":
            assert store is not None
            started, cpu = time.perf_counter(), time.process_time()
            bench.engine_once(store, request["max_samples"])
            reply = {"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu}
        elif op == "kernel":
            assert store is not None
            cpu = time.process_time()
            wall, inner, sync = bench.kernel_once(store, request["max_samples"])
            reply = {"wall": wall, "inner": inner, "cpu": time.process_time() - cpu}
        elif op == "browser":
            frames = bench.browser_times(sync, request["rounds"])
            reply = {"frame": [r["frame_ms"] / 1000 for r in frames]}
        else:
            return 0
        answer.write(json.dumps(reply) + "\n")
        answer.flush()
    return 0


class Side:
    """One tree's worker process."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.engine: list[float] = []
        self.engine_cpu: list[float] = []
        self.kernel: list[float] = []
        self.kernel_cpu: list[float] = []
        self.overhead: list[float] = []
        self.frames: list[float] = []

    def ask(self, **request: Any) -> dict[str, Any]:
        stdin: IO[str] | None = self.process.stdin
        stdout: IO[str] | None = self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} worker ended (see its error output above)")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def round(self, max_samples: int) -> None:
        engine = self.ask(op="engine", max_samples=max_samples)
        self.engine.append(engine["wall"])
        self.engine_cpu.append(engine["cpu"])
        kernel = self.ask(op="kernel", max_samples=max_samples)
        self.kernel.append(kernel["wall"])
        self.kernel_cpu.append(kernel["cpu"])
        self.overhead.append(kernel["wall"] - kernel["inner"])

    def close(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()  # the worker's loop ends at end of input
        self.process.wait(60)

    def report(self) -> None:
        med = statistics.median
        e, k, o, b = med(self.engine), med(self.kernel), med(self.overhead), med(self.frames)
        ec, kc = med(self.engine_cpu), med(self.kernel_cpu)
        paired = med((kk + b) / ee for kk, ee in zip(self.kernel, self.engine, strict=True))
        ms = 1000
        print(
            f"{self.name}: engine {e * ms:.1f} ms (cpu {ec * ms:.1f}), kernel {k * ms:.1f} ms "
            f"(cpu {kc * ms:.1f}), around the engine call {o * ms:.1f} ms, "
            f"browser to frame {b * ms:.1f} ms"
        )
        print(
            f"  (kernel + browser) / engine: medians {(k + b) / e:.3f}x, "
            f"per-round median {paired:.3f}x, engine + overhead {(e + o + b) / e:.3f}x, "
            f"CPU {(kc + b) / ec:.3f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sides", nargs="*", help="name=source-tree (two or more)")
    parser.add_argument("--quick", action="store_true", help="100 scenes, 10,000 samples")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--max-samples", type=int, default=512)
    parser.add_argument("--store-dir", type=Path, default=REPO / "artifacts" / "bench")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker.resolve())
    if len(args.sides) < 2 or any("=" not in s for s in args.sides):
        parser.error("give two or more name=source-tree arguments, e.g. old=/tmp/bench-old new=.")
    scenes = 100 if args.quick else 1000
    sides = [Side(n, Path(r).resolve()) for n, r in (s.split("=", 1) for s in args.sides)]
    try:
        # Every tree reads the store the first one wrote (the format is versioned).
        directory = str(args.store_dir / f"store-{scenes * 100}")
        for side in sides:
            print(f"{side.name}: {side.ask(op='store', scenes=scenes, dir=directory)['bench']}")
        for side in sides:  # warm-up (imports, torch, page cache), not timed
            side.ask(op="engine", max_samples=args.max_samples)
            side.ask(op="kernel", max_samples=args.max_samples)
        for i in range(args.rounds):
            for side in sides if i % 2 == 0 else sides[::-1]:
                side.round(args.max_samples)
        for side in sides:
            side.frames = side.ask(op="browser", rounds=args.rounds)["frame"]
        print(
            f"{scenes:,} scenes, max_samples={args.max_samples}, {args.rounds} rounds, target <= 1.2"
        )
        for side in sides:
            side.report()
    finally:
        for side in sides:
            side.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
