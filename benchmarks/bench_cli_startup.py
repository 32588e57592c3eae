"""CLI start-up: ``vinlens --help`` and an argument error against a bare interpreter.

Runs, alternating in one loop so machine noise hits all of them alike,

  * ``python -c pass`` (the floor: interpreter start-up with site-packages);
  * ``vinlens --help``, exactly as the console script runs it
    (``from vinlens.cli import main; sys.exit(main())``);
  * ``vinlens store stats /nowhere --max-samples -1`` (an argument error);
  * ``python -c "import torch"`` (what every command paid before imports were deferred);

and prints the median wall time of each in ms, and each ratio to ``python -c pass``.
Target: ``vinlens --help`` and argument errors under 500 ms.

Usage: ``python benchmarks/bench_cli_startup.py [--quick] [--repeat N] [--baseline-src DIR]``;
``--quick`` runs 5 rounds instead of 15. The ``src`` tree beside this script is what gets
imported; ``--baseline-src`` adds ``vinlens --help`` from another tree (e.g. an older
commit: ``git archive REV src | tar -x -C /tmp/old``, then ``--baseline-src /tmp/old/src``)
to the same loop.
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
    """Wall time of one interpreter run of ``args`` (output discarded)."""
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
    parser.add_argument(
        "--baseline-src", type=Path, default=None, help="another src tree to time --help from"
    )
    args = parser.parse_args()
    rounds = args.repeat or (5 if args.quick else 15)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    cases = {name: (case, env) for name, case in CASES.items()}
    if args.baseline_src is not None:
        baseline_env = dict(os.environ, PYTHONPATH=str(args.baseline_src.resolve()))
        cases["vinlens --help (baseline src)"] = (CASES["vinlens --help"], baseline_env)

    for case, case_env in cases.values():  # warm the page cache once
        _time_once(case, case_env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (case, case_env) in cases.items():
            times[name].append(_time_once(case, case_env))

    base = statistics.median(times["python -c pass"])
    print(f"median of {rounds} rounds, interleaved; src = {SRC}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:<30} {median * 1000:8.1f} ms   {median / base:6.2f}x python -c pass")
    help_ms = statistics.median(times["vinlens --help"]) * 1000
    error_ms = statistics.median(times["vinlens (argument error)"]) * 1000
    verdict = "ok" if max(help_ms, error_ms) < 500 else "OVER"
    print(f"target: --help and argument errors < 500 ms: {verdict}")
    if args.baseline_src is not None:
        old = statistics.median(times["vinlens --help (baseline src)"]) * 1000
        print(f"vinlens --help, baseline / this tree: {old / help_ms:.1f}x")


if __name__ == "__main__":
    main()
