"""CoverageHeatmapWidget: tar-scan progress and cancel, per-scene payload, snippet lists, export."""

from __future__ import annotations

import csv
import io
import json
import tarfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fsspec
import numpy as np
import pytest
from payload_decode import table_column

from vinlens.store.coverage import collect_vin_offline_dataset_coverage
from vinlens.store.synthetic import (
    SyntheticRawSpec,
    SyntheticStoreSpec,
    write_synthetic_dataset,
    write_synthetic_store,
)
from vinlens.widgets.coverage_heatmap import CoverageHeatmapWidget

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def dataset(tmp_path: Path):
    # 8 raw snippets per scene missing from the store: 28 missing pairs in all, more than
    # the engine's 20 examples, so some scenes need the header listing.
    return write_synthetic_dataset(
        tmp_path / "ds", raw_spec=SyntheticRawSpec(missing_snippets_per_scene=8)
    )


@pytest.fixture
def recorded(monkeypatch):
    """Every message the widgets send, from the first one (the scan starts in __init__)."""
    sent: list[dict] = []
    monkeypatch.setattr(
        CoverageHeatmapWidget, "send", lambda self, content, buffers=None: sent.append(content)
    )
    return sent


def scan(config, **kwargs) -> CoverageHeatmapWidget:
    w = CoverageHeatmapWidget(config, **kwargs)
    w.wait(120)
    return w


def test_scan_runs_on_construction_with_progress_per_tar(dataset, recorded):
    w = scan(dataset.config)
    tars = len(dataset.raw.tar_paths)
    progress = [(m["done"], m["total"]) for m in recorded if m["kind"] == "progress"]
    assert (0, tars) in progress and progress[-1] == (tars, tars)
    assert [d for d, _ in progress if _ == tars] == list(range(tars + 1))
    assert w.acquisition["state"] == "done" and w.acquisition["total"] == tars
    assert w.status == "idle" and w.error == ""


def test_payload_totals_and_per_scene_table_match_the_engine(dataset):
    w = scan(dataset.config)
    expected = collect_vin_offline_dataset_coverage(dataset.config)
    totals = w.coverage["totals"]
    for key in ("dataset_snippets", "store_snippets", "covered_snippets", "missing_in_store",
                "outside_dataset", "dataset_scenes", "store_scenes", "tar_shards_scanned"):  # fmt: skip
        assert totals[key] == getattr(expected, key)
    assert totals["missing_in_store"] == len(dataset.raw.missing_in_store) == 28
    assert totals["unparseable_members"] == len(dataset.raw.unparseable_members)
    scenes = w.coverage["scenes"]
    ids = table_column(scenes, "scene_id")
    assert ids == [r.scene_id for r in expected.per_scene]
    np.testing.assert_array_equal(
        table_column(scenes, "missing_in_store"), [r.missing_in_store for r in expected.per_scene]
    )
    coverage = table_column(scenes, "coverage")
    assert coverage.dtype == np.float64
    np.testing.assert_allclose(coverage, [r.coverage for r in expected.per_scene])


def test_undefined_coverage_is_nan_not_zero(tmp_path):
    # Every store snippet of every scene is left out of the raw data, and the raw data has
    # one extra scene: store scenes have no raw snippet at all (coverage undefined).
    record = write_synthetic_dataset(
        tmp_path / "ds",
        SyntheticStoreSpec(num_scenes=2, snippets_per_scene=2, outside_snippets_per_scene=2),
        SyntheticRawSpec(missing_snippets_per_scene=0, raw_only_scenes=1),
    )
    w = scan(record.config)
    ids = table_column(w.coverage["scenes"], "scene_id")
    coverage = dict(zip(ids, table_column(w.coverage["scenes"], "coverage"), strict=True))
    assert np.isnan(coverage["scene_000001"]) and np.isnan(coverage["scene_000002"])
    assert coverage["scene_000003"] == 0.0


def test_scene_snippets_lists_exactly_the_planted_gaps(dataset, recorded):
    w = scan(dataset.config)
    by_scene: dict[str, dict[str, list[str]]] = {}
    for scene, snippet in dataset.raw.missing_in_store:
        by_scene.setdefault(scene, {"missing": [], "outside": []})["missing"].append(snippet)
    for scene, snippet in dataset.raw.outside_dataset:
        by_scene.setdefault(scene, {"missing": [], "outside": []})["outside"].append(snippet)
    sources = {}
    for scene, expected in by_scene.items():
        reply = w.run_command("scene_snippets", {"scene_id": scene})
        assert reply["kind"] == "result", reply
        data = reply["data"]
        assert data["missing_in_store"] == sorted(expected["missing"])
        assert data["outside_dataset"] == sorted(expected["outside"])
        sources[scene] = data["source"]
        assert w.selected_scene == scene
    # scene_000001 fits in the engine's examples; scene_000003 needs the header listing.
    assert sources["scene_000001"] == "record"
    assert sources["scene_000003"] == "header listing"
    # The header listing reports progress per tar to the command that asked.
    listing = [m for m in recorded if m["kind"] == "progress" and not m["id"].startswith("scan-")]
    assert listing and listing[-1]["total"] == len(dataset.raw.tar_paths)


def test_scene_snippets_errors_are_replies(dataset):
    w = scan(dataset.config)
    reply = w.run_command("scene_snippets", {"scene_id": "scene_999999"})
    assert reply["kind"] == "error" and "'scene_999999'" in reply["message"]
    reply = w.run_command("scene_snippets", {"scene_id": 5})
    assert reply["kind"] == "error" and "scene_id" in reply["message"]
    assert w.status == "error"


def test_a_failing_side_command_beside_a_scan_leaves_the_status_to_the_scan(dataset, monkeypatch):
    # Issue 30.12: a scene_snippets that fails while the rescan runs got its error reply
    # but also set status "error" although the scan went on (and then finished).
    seen: dict[str, object] = {}

    def send(self, content, buffers=None):
        if (
            content.get("kind") == "progress"
            and str(content["id"]).startswith("scan-")
            and content["done"] == 1
            and "reply" not in seen
        ):
            self._dispatch(
                {"kind": "command", "id": "side", "name": "scene_snippets", "args": {"scene_id": 5}}
            )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "reply" not in seen:
                found = [r for r in self.replies if r.get("id") == "side"]
                if found:
                    seen["reply"] = found[-1]
                    seen["status"], seen["error"] = self.status, self.error
                time.sleep(0.005)

    monkeypatch.setattr(CoverageHeatmapWidget, "send", send)
    w = scan(dataset.config)
    reply = seen["reply"]
    assert reply["kind"] == "error" and "scene_id" in reply["message"]
    assert seen["status"] == "busy" and seen["error"] == ""
    assert w.status == "idle" and w.error == "" and w.acquisition["state"] == "done"


def test_cancel_stops_the_scan_between_tars(dataset, monkeypatch):
    sent: list[dict] = []

    def send(self, content, buffers=None):
        sent.append(content)
        if content.get("kind") == "progress" and content["done"] == 1:
            self._dispatch({"kind": "cancel", "id": content["id"]})

    monkeypatch.setattr(CoverageHeatmapWidget, "send", send)
    w = CoverageHeatmapWidget(dataset.config)
    with pytest.raises(RuntimeError, match="no coverage"):
        w.wait(60)
    assert w.acquisition["state"] == "cancelled" and w.acquisition["done"] == 1
    assert w.coverage == {} and w.status == "idle"
    monkeypatch.setattr(CoverageHeatmapWidget, "send", lambda self, content, buffers=None: None)
    reply = w.run_command("rescan")
    assert reply["kind"] == "result" and w.coverage["totals"]["missing_in_store"] == 28


def test_replaced_store_is_reported_on_rescan_and_refused_for_lists(dataset):
    w = scan(dataset.config)
    assert w.replacement == {"replaced": False}
    write_synthetic_store(
        dataset.config.store_dir, SyntheticStoreSpec(num_scenes=2, seed=4), replace=True
    )
    # Lists that need the store side again are refused: the shown coverage is stale.
    reply = w.run_command("scene_snippets", {"scene_id": "scene_000003"})
    assert reply["kind"] == "error" and "replaced" in reply["message"]
    reply = w.run_command("rescan")
    assert reply["kind"] == "result"
    assert w.replacement["replaced"] is True
    assert str(dataset.config.store_dir) in w.replacement["message"]
    assert w.coverage["totals"]["store_scenes"] == 2


def test_export_api_and_csv_command_share_one_exporter(dataset, tmp_path):
    w = scan(dataset.config)
    rows = w.to_rows()
    assert [r["scene_id"] for r in rows] == [r.scene_id for r in w.record.per_scene]
    assert set(rows[0]) >= {"scene_id", "missing_in_store", "outside_dataset", "coverage"}
    frame = w.to_dataframe()
    assert len(frame) == len(rows) and list(frame["scene_id"]) == [r["scene_id"] for r in rows]
    path = w.export(tmp_path / "coverage.csv")
    reply = w.run_command("csv")
    assert reply["kind"] == "result"
    assert reply["data"]["text"] == path.read_text(encoding="utf-8")
    assert reply["data"]["filename"] == "store-coverage.csv"
    parsed = list(csv.DictReader(io.StringIO(reply["data"]["text"])))
    assert int(parsed[0]["missing_in_store"]) == rows[0]["missing_in_store"]
    as_json = json.loads(w.export(tmp_path / "coverage.json").read_text())
    assert len(as_json) == len(rows)


def test_raw_dir_argument_and_its_absence(tmp_path, dataset):
    store_only = dataset.config.model_copy(update={"raw_dataset_dir": None})
    with pytest.raises(ValueError, match="raw dataset directory"):
        CoverageHeatmapWidget(store_only)
    with pytest.raises(TypeError, match=r"raw_dir$"):
        CoverageHeatmapWidget(store_only, raw_dir=dataset.raw.raw_dir)
    w = scan(store_only, raw_dataset_dir=dataset.raw.raw_dir)
    assert w.raw_dataset_dir == str(dataset.raw.raw_dir)
    assert w.coverage["totals"]["missing_in_store"] == 28
    w = CoverageHeatmapWidget(store_only, raw_dataset_dir=tmp_path / "missing-raw")
    with pytest.raises(Exception, match="missing-raw"):
        w.wait(60)
    assert w.status == "error" and "missing-raw" in w.error


def test_hostile_scene_ids_are_escaped_in_the_static_fallback(dataset):
    with tarfile.open(dataset.raw.raw_dir / "zz-hostile.tar", "w") as tar:
        info = tarfile.TarInfo(f"{HOSTILE}/snippet_000001.rgb.jpg")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    w = scan(dataset.config)
    assert HOSTILE in table_column(w.coverage["scenes"], "scene_id")
    reply = w.run_command("scene_snippets", {"scene_id": HOSTILE})
    assert reply["kind"] == "result" and reply["data"]["missing_in_store"] == ["snippet_000001"]
    out = w._repr_html_()
    assert "<img src=x" not in out and "&lt;img src=x onerror=alert(1)&gt;" in out
    assert "<script" not in out.lower()


class CountingExecutor(ThreadPoolExecutor):
    """A real executor that counts the tasks it was given."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


def test_urls_storage_options_and_an_executor(dataset, recorded):
    # The same store and raw tars behind fsspec URLs (memory://), scanned on an executor.
    fs = fsspec.filesystem("memory")
    root = f"/vinlens-widget-{uuid.uuid4().hex}"
    fs.put(str(dataset.config.store_dir), f"{root}/store", recursive=True)
    fs.put(str(dataset.raw.raw_dir), f"{root}/raw", recursive=True)
    local = collect_vin_offline_dataset_coverage(dataset.config)
    with CountingExecutor() as executor:
        w = CoverageHeatmapWidget(
            f"memory://{root}/store",
            raw_dataset_dir=f"memory://{root}/raw",
            storage_options={"skip_instance_cache": False},
            executor=executor,
        )
        record = w.wait(120)
        assert executor.submitted == len(dataset.raw.tar_paths)
    assert w.config.storage_options == {"skip_instance_cache": False}
    assert w.raw_dataset_dir == f"memory://{root}/raw"
    assert record.per_scene == local.per_scene and record.missing_in_store == 28
    # Progress advances per tar as workers finish it.
    tars = len(dataset.raw.tar_paths)
    done = [m["done"] for m in recorded if m["kind"] == "progress" and m["total"] == tars]
    assert done[0] == 0 and done[-1] == tars and sorted(done) == done
    # Per-scene lists that need a header listing read the URL tars too.
    reply = w.run_command("scene_snippets", {"scene_id": "scene_000003"})
    assert reply["kind"] == "result", reply
    assert reply["data"]["source"] == "header listing"
    expected = sorted(s for sc, s in dataset.raw.missing_in_store if sc == "scene_000003")
    assert reply["data"]["missing_in_store"] == expected
    fs.rm(root, recursive=True)


def test_non_utf8_member_names_are_shown_readably_naming_the_tar(dataset, tmp_path):
    latin1 = b"sc\xe8ne_latin/snippet_000001.rgb.jpg"
    with tarfile.open(dataset.raw.raw_dir / "zz-latin1.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(latin1.decode("utf-8", "surrogateescape"))
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    w = scan(dataset.config)
    shown = "sc\\xe8ne_latin"
    assert shown in table_column(w.coverage["scenes"], "scene_id")
    totals = w.coverage["totals"]
    assert totals["non_utf8_members"] == 1
    assert totals["non_utf8_examples"] == [f"zz-latin1.tar: {shown}/snippet_000001.rgb.jpg"]
    # The scene is clickable by the id the browser shows, lists come from a header listing.
    reply = w.run_command("scene_snippets", {"scene_id": shown})
    assert reply["kind"] == "result", reply
    assert reply["data"]["missing_in_store"] == ["snippet_000001"]
    # CSV (browser download and file), JSON and the static fallback all carry it as text.
    reply = w.run_command("csv")
    assert reply["kind"] == "result" and shown in reply["data"]["text"]
    assert shown in w.export(tmp_path / "c.csv").read_text(encoding="utf-8")
    assert (
        shown
        in json.loads(w.export(tmp_path / "c.json").read_text(encoding="utf-8"))[-1]["scene_id"]
    )
    html_text = w._repr_html_()
    html_text.encode("utf-8")
    assert "zz-latin1.tar" in html_text
