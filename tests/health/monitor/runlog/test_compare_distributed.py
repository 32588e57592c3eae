"""compare_runs on 2-process gloo DDP runs with a change planted on rank 1 only."""

from __future__ import annotations

from pathlib import Path

import pytest
from dist_launch import run_worker_ranks

from vinlens.health import TrainingMonitor, compare_runs

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)


def ddp_run(log_dir: Path, plant: str) -> Path:
    """Two gloo ranks of ``distributed_worker.py diverge``, logging to ``log_dir``."""
    env = {"VINLENS_TEST_PLANT": plant, "VINLENS_TEST_LOG_DIR": str(log_dir)}
    run_worker_ranks("diverge", [Path(f"{log_dir}.{r}.json") for r in range(2)], env=env)
    return log_dir


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ddp_run(tmp_path_factory.mktemp("ddp") / "base", "none")


@pytest.mark.timeout(300)
def test_ddp_twins_are_identical_and_a_planted_change_names_rank_1(
    base: Path, tmp_path: Path
) -> None:
    same = compare_runs(base, ddp_run(tmp_path / "same", "none"))
    assert same.identical and same.ranks == (0, 1) and same.unmatched == ()
    data = compare_runs(base, ddp_run(tmp_path / "data", "data"))
    assert (data.first_step, data.cause, data.rank, data.module) == (3, "data", 1, None)
    forward = compare_runs(base, ddp_run(tmp_path / "forward", "forward"))
    assert (forward.first_step, forward.cause, forward.rank) == (2, "forward", 1)
    assert forward.module == "mid"  # the original module's path, no "module." prefix
    # Rank 0 alone sees only the all-reduced gradients of the same step.
    alone = compare_runs(base, tmp_path / "forward", ranks=[0])
    assert (alone.first_step, alone.cause, alone.rank) == (2, "backward", 0)


def test_other_world_sizes_are_refused(base: Path, tmp_path: Path) -> None:
    from torch import nn

    single = tmp_path / "single"
    TrainingMonitor(nn.Linear(2, 2), log_dir=single).close()
    with pytest.raises(ValueError, match="different world sizes"):
        compare_runs(base, single)
