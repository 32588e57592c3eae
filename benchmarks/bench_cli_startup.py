"""CLI start-up: ``vinlens --help`` and an argument error against a bare interpreter.

Runs, alternating in one loop so machine noise hits all of them alike,

  * ``python -c pass`` (the floor: interpreter start-up with site-packages);
  * ``vinlens --help``, exactly as the console script runs it
    (``from vinlens.cli import main; sys.exit(main())``);
  * ``vinlens store stats /nowhere --max-samples -1`` (an argument error);
  * ``python -c "import torch"`` (what every command paid before imports were deferred);

and prints the median wall time of each in ms, and each ratio to ``python -c pass``.
Target: ``vinlens --help`` and argument errors under 500 ms.

Usage: ``python benchmarks/bench_cli_startup.py [--quick] [--repeat N]``; ``--quick`` runs
5 rounds instead of 15. The ``src`` tree beside this script is what gets imported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ENTRY = "import sys; from vinlens.cli import main; sys.exit(main())"

CASES: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "vinlens --help": ["-c", ENTRY, "--help"],
    "vinlens (argument error)": ["-c", ENTRY, "store", "stats", "/nowhere", "--max-samples", "-1"],
    "python -c 'import torch'": ["-c", "import torch"],
}


def _time_once(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (overrides --quick)")
    args = parser.parse_args()
    rounds = args.repeat or (5 if args.quick else 15)
    env = dict(os.environ, PYTHONPATH=str(SRC))

    for case in CASES.values():  # warm the page cache once
        _time_once(case, env)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(rounds):
        for name, case in CASES.items():
            times[name].append(_time_once(case, env))

    base = statistics.median(times["python -c pass"])
    print(f"median of {rounds} rounds, interleaved; src = {SRC}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:<28} {median * 1000:8.1f} ms   {median / base:6.2f}x python -c pass")
    help_ms = statistics.median(times["vinlens --help"]) * 1000
    error_ms = statistics.median(times["vinlens (argument error)"]) * 1000
    verdict = "ok" if max(help_ms, error_ms) < 500 else "OVER"
    print(f"target: --help and argument errors < 500 ms: {verdict}")


if __name__ == "__main__":
    main()
