"""Launch the ranks of a multi-process test on 127.0.0.1 and wait for every one of them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

WORKER = Path(__file__).with_name("distributed_worker.py")
SRC = Path(__file__).parents[2] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_worker_ranks(
    scenario: str,
    outs: Sequence[Path],
    *,
    backend: str = "gloo",
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> None:
    """Run ``distributed_worker.py SCENARIO RANK WORLD PORT OUT`` once per ``outs`` entry (the
    world is their count); fails naming the rank and its output when one does not exit 0."""
    port = free_port()
    environ = dict(os.environ, OMP_NUM_THREADS="1", VINLENS_TEST_DIST_BACKEND=backend)
    environ |= dict(env or {})
    environ["PYTHONPATH"] = os.pathsep.join([str(SRC), environ.get("PYTHONPATH", "")])
    world = len(outs)
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), scenario, str(r), str(world), str(port), str(out)],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r, out in enumerate(outs)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=timeout)[0].decode(errors="replace"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} failed:\n{logs[rank][-4000:]}"
