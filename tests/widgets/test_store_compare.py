"""StoreCompareWidget: the engine's comparison as a payload, progress, cancel and exports."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest

from vinlens.store import compare_vin_offline_stores
from vinlens.store.compare import DRIFT_METRICS, ranked_fields
from vinlens.store.synthetic import (
    SyntheticStoreSpec,
    make_synthetic_samples,
    write_synthetic_samples,
)
from vinlens.widgets import StoreCompareWidget

SPEC = SyntheticStoreSpec(num_scenes=4, snippets_per_scene=3, rows_per_shard=4, seed=2)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("widget-compare")
    samples = make_synthetic_samples(SPEC)
    shifted = []
    for s in samples:
        if s.scene_id == "scene_000004":
            continue
        assert s.rri is not None
        shifted.append(dataclasses.replace(s, rri=(s.rri + np.float32(0.2)).astype(np.float32)))
    kw = {"num_candidates": SPEC.num_candidates, "rows_per_shard": SPEC.rows_per_shard}
    return (
        write_synthetic_samples(root / "a", samples, **kw),  # type: ignore[arg-type]
        write_synthetic_samples(root / "b", shifted, **kw),  # type: ignore[arg-type]
    )


def test_payload_is_the_engines_comparison_and_ranking(stores: tuple[Path, Path]) -> None:
    a, b = stores
    w = StoreCompareWidget(a, b, max_samples=None)
    result = w.wait(120)
    assert result == compare_vin_offline_stores(a, b, max_samples=None)
    assert w.acquisition["state"] == "done" and w.acquisition["unit"] == "rows"
    assert w.status == "idle" and w.error == ""
    payload = w.payload
    names = [f.name for f in result.fields]
    for metric in DRIFT_METRICS:
        assert [names[i] for i in payload["rankings"][metric]] == [
            f.name for f in ranked_fields(result.fields, metric)
        ]
    assert names[payload["rankings"]["js_distance"][0]] == "rri"
    assert payload["scenes_only_in_a"] == ["scene_000004"]
    assert payload["samples_only_in_a"] == result.samples_only_in_a > 0
    assert payload["header"]["psi_epsilon"] == result.psi_epsilon
    rri = names.index("rri")
    hist = payload["histograms"][rri]
    assert (
        np.frombuffer(hist["a"]["$array"]["data"], dtype=np.float64).sum()
        == result.field("rri").count_a
    )
    assert w.to_rows()[0]["name"] == "rri"
    assert "scene_000004" in w._repr_html_()


def test_exports_are_csv_of_the_exact_lists(stores: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = stores
    w = StoreCompareWidget(a, b, max_samples=None)
    result = w.wait(120)
    reply = w.run_command("export", {"what": "samples_only_in_a"})
    assert reply["kind"] == "result", reply
    rows = list(csv.DictReader(io.StringIO(reply["data"]["text"])))
    assert [r["sample_key"] for r in rows] == list(result.sample_keys_only_in_a)
    reply = w.run_command("export", {"what": "scenes_only_in_a"})
    assert reply["data"]["text"].split() == ["scene_id", "scene_000004"]
    reply = w.run_command("export", {"what": "fields"})
    rows = list(csv.DictReader(io.StringIO(reply["data"]["text"])))
    assert rows[0]["name"] == "rri" and len(rows) == len(result.fields)
    reply = w.run_command("export", {"what": "everything"})
    assert reply["kind"] == "error" and "samples_only_in_b" in reply["message"]
    path = w.export(tmp_path / "fields.csv")
    assert path.read_text(encoding="utf-8").startswith("name,")


def test_metric_choice_and_bad_arguments(stores: tuple[Path, Path]) -> None:
    a, b = stores
    w = StoreCompareWidget(a, b, max_samples=8, metric="wasserstein")
    w.wait(120)
    assert w.comparison is not None and w.comparison.sampled_samples_a == 8
    ranked = ranked_fields(w.comparison.fields, "wasserstein")
    assert [r["name"] for r in w.to_rows()] == [f.name for f in ranked]
    with pytest.raises(TypeError, match="metrc"):
        StoreCompareWidget(a, b, metrc="psi")
    with pytest.raises(ValueError, match="max_samples"):
        StoreCompareWidget(a, b, max_samples=-2)
    reply = w.run_command("refresh", {"max_samples": "many"})
    assert reply["kind"] == "error" and "'many'" in reply["message"]


def test_progress_and_a_cancel_stop_the_scan(
    stores: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = stores
    sent: list[dict] = []

    def send(self, content, buffers=None):  # type: ignore[no-untyped-def]
        sent.append(content)
        if content.get("kind") == "progress" and content["total"] and content["done"] >= 8:
            self._dispatch({"kind": "cancel", "id": content["id"]})

    monkeypatch.setattr(StoreCompareWidget, "send", send)
    w = StoreCompareWidget(a, b, max_samples=None)
    with pytest.raises(RuntimeError, match="no comparison"):
        w.wait(120)
    assert w.acquisition["state"] == "cancelled" and w.payload == {}
    progress = [m for m in sent if m.get("kind") == "progress" and m["total"]]
    assert progress and progress[-1]["done"] < progress[-1]["total"]


def test_missing_store_is_a_clear_error(stores: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = stores
    w = StoreCompareWidget(a, tmp_path / "nope")
    with pytest.raises(Exception, match="nope"):
        w.wait(120)
    assert w.acquisition["state"] == "failed" and "nope" in w.error


def test_python_refresh_rescans_with_a_new_budget_and_refuses_a_bad_one(
    stores: tuple[Path, Path],
) -> None:
    a, b = stores
    w = StoreCompareWidget(a, b, max_samples=4)
    assert w.wait(120).sampled_samples_a == 4
    w.refresh(max_samples=6)
    result = w.wait(120)
    assert w.max_samples == 6 and result.sampled_samples_a == result.sampled_samples_b == 6
    assert w.acquisition["trigger"] == "refresh()" and w.acquisition["state"] == "done"
    with pytest.raises(ValueError, match="max_samples"):
        w.refresh(max_samples=-1)  # refused in the caller, before any scan starts
    assert w.max_samples == 6 and w.comparison == result
