"""The ranks of one distributed run share its run identity (gloo, 2 processes), with
``ranks="all"`` and ``ranks="local"`` alike, so ``open_run`` reads them as one run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dist_launch import free_port

from vinlens.health import open_run

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORKER = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from vinlens.health import TrainingMonitor

    rank, port, log, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    if mode == "all":
        model = DistributedDataParallel(model)
    with TrainingMonitor(model, every=1, log_dir=log, ranks=mode) as monitor:
        for _ in range(3):
            def step_fn():
                model.zero_grad()
                loss = model(torch.ones(2, 3)).sum()
                loss.backward()
                return loss
            monitor.run_step(step_fn)
    dist.destroy_process_group()
    """
)


@pytest.mark.timeout(180)
def test_the_ranks_of_one_run_share_its_identity(tmp_path: Path) -> None:
    log, port = tmp_path / "run", str(free_port())
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    for mode in ("all", "local"):  # the directory reused: two runs of two ranks each
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(rank), port, str(log), mode],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for rank in range(2)
        ]
        outputs = [proc.communicate(timeout=120)[0].decode(errors="replace") for proc in procs]
        for proc, output in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, output[-3000:]
        port = str(free_port())
    run = open_run(log)
    assert run.ranks == (0, 1)
    first, latest = run.runs
    assert first.ranks == latest.ranks == (0, 1) and latest.run_id == run.run_id
    for rank in (0, 1):
        assert run.step_series(rank).steps.tolist() == [0, 1, 2]
