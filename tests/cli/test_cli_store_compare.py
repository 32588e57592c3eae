"""``vinlens store compare A B`` through the real command line entry."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from vinlens.cli import main
from vinlens.store.synthetic import (
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_samples,
)

SPEC = SyntheticStoreSpec(num_scenes=3, snippets_per_scene=3, seed=5)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli-compare")
    samples = make_synthetic_samples(SPEC)
    shifted = []
    for s in samples:
        if s.scene_id == "scene_000003":
            continue  # a removed scene
        assert s.rri is not None
        shifted.append(dataclasses.replace(s, rri=(s.rri + np.float32(0.3)).astype(np.float32)))
    kwargs = {"num_candidates": SPEC.num_candidates, "rows_per_shard": SPEC.rows_per_shard}
    return (
        write_synthetic_samples(root / "a", samples, **kwargs),  # type: ignore[arg-type]
        write_synthetic_samples(root / "b", shifted, **kwargs),  # type: ignore[arg-type]
    )


def test_compare_prints_fields_by_drift_and_set_differences(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = stores
    assert main(["store", "compare", str(a), str(b), "--all"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = lines.index("fields by js_distance (largest first)")
    assert lines[header + 1].split()[:3] == ["field", "count", "A"]
    assert lines[header + 3].startswith("rri ")  # the shifted field on top
    assert "scenes only in A   scene_000003" in out
    assert "samples only in B  0" in out
    assert "sample keys only in A" in out
    assert "(all)" in out

    assert main(["store", "compare", str(a), str(b), "--metric", "wasserstein"]) == 0
    out = capsys.readouterr().out
    assert "fields by wasserstein" in out


def test_compare_json_and_workers_agree(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = stores
    assert main(["store", "compare", str(a), str(b), "--all", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["scenes_only_in_a"] == ["scene_000003"]
    fields = {f["name"]: f for f in record["fields"]}
    assert fields["rri"]["wasserstein"] == pytest.approx(0.3, abs=0.02)
    assert main(["store", "compare", str(a), str(b), "--all", "--json", "--workers", "2"]) == 0
    assert json.loads(capsys.readouterr().out) == record


def test_compare_errors(
    stores: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = stores
    with pytest.raises(SystemExit) as exc:
        main(["store", "compare", str(a), str(a), "--workers", "2", "--scheduler", "tcp://x:1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["store", "compare", str(a), str(a), "--metric", "mean"])
    capsys.readouterr()
    code = main(["store", "compare", str(a), str(tmp_path / "missing")])
    assert code != 0
    assert str(tmp_path / "missing") in capsys.readouterr().err
