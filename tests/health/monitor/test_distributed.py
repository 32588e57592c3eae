"""TrainingMonitor on DDP (gloo, 2 processes on 127.0.0.1), a NaN planted on rank 1 only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dist_launch import run_worker_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)


def run_ranks(
    scenario: str, tmp_path: Path, world: int = 2, backend: str = "gloo"
) -> list[dict[str, object]]:
    outs = [tmp_path / f"rank{r}.json" for r in range(world)]
    run_worker_ranks(scenario, outs, backend=backend)
    return [json.loads(out.read_text()) for out in outs]


_NCCL = pytest.mark.skipif(
    not (dist.is_nccl_available() and torch.cuda.device_count() >= 2),
    reason="NCCL needs two CUDA devices (one per rank)",
)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=_NCCL)])
def test_ddp_nan_on_rank_1_raises_on_both_ranks(tmp_path: Path, backend: str) -> None:
    ranks = run_ranks("all", tmp_path, backend=backend)
    for found in ranks:
        assert found["paths"] == ["<root>", "enc", "mid", "dec"]  # no "module." prefix
        assert found["raised"] is True
        assert found["made_on_ranks"] == [1]
        assert found["event_rank"] == found["rank"]
        assert found["leftover"] == []
    assert ranks[1]["origin"] == "mid"
    assert ranks[0]["origin"] is None
    assert "origin on rank(s) 1" in str(ranks[0]["message"])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=_NCCL)])
def test_one_rank_monitoring_is_refused_or_local_and_never_crashes_the_peer(
    tmp_path: Path, backend: str
) -> None:
    rank0, rank1 = run_ranks("refused", tmp_path, backend=backend)
    assert "rank(s) 1 of 2 constructed no monitor" in str(rank0["refused"])
    assert "ranks='local'" in str(rank0["refused"])
    # rank 0 alone sees the NaN the all-reduce brought; its own replay stays finite
    assert rank0["made_on_ranks"] == []
    assert rank0["origin"] is None
    assert rank0["trained_on"] is True and rank1["trained_on"] is True
    assert rank0["leftover"] == [] and rank1["leftover"] == []


@pytest.mark.timeout(180)
def test_fsdp2_norms_are_the_unsharded_models_and_every_shard_is_checked(
    tmp_path: Path,
) -> None:
    ranks = run_ranks("fsdp", tmp_path)
    assert ranks[0]["events"] == ranks[1]["events"]  # made_on_ranks: the same on every rank
    for found in ranks:
        norms, reference = found["norms"], found["reference"]
        assert isinstance(norms, dict) and isinstance(reference, dict)
        for path in ("enc", "dec"):  # float32 sums in another order: a few ulps
            assert norms[path] == pytest.approx(reference[path], rel=1e-5)
        assert "(ranks='local') cannot watch" in str(found["refused_local"])
        # the NaN sits in rank 1's shard: both ranks record the step
        assert len(found["events"]) == 1  # type: ignore[arg-type]
        assert found["leftover"] == found["fsdp_hooks"]  # only FSDP's own hooks remain
