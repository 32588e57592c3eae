"""StoreDashboardWidget: background acquisition, payload, commands, replacement, fallback."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fsspec
import numpy as np
import pytest
from payload_decode import table_column

from vinlens.store.diagnostics import (
    capture_vin_offline_dataset_stats_request,
    collect_vin_offline_dataset_stats,
    rri_pair_arrays,
)
from vinlens.store.synthetic import SyntheticStoreSpec, write_synthetic_store
from vinlens.widgets import store_dashboard as dashboard_module
from vinlens.widgets._payload import split_buffers
from vinlens.widgets.store_dashboard import StoreDashboardWidget, dashboard_payload


def decode_array(node):
    a = node["$array"]
    return np.frombuffer(a["data"], dtype=a["dtype"]).reshape(a["shape"])


@pytest.fixture
def store(tmp_path: Path):
    return write_synthetic_store(tmp_path / "store")


def widget_for(path, **kwargs) -> StoreDashboardWidget:
    w = StoreDashboardWidget(path, **kwargs)
    w.wait(120)
    return w


def test_first_acquisition_starts_on_construction_and_matches_the_engine(store):
    w = widget_for(store.config.store_dir, max_samples=16)
    stats = w.stats
    assert w.acquisition["state"] == "done" and w.acquisition["trigger"] == "construction"
    assert w.status == "idle" and w.error == ""
    expected = collect_vin_offline_dataset_stats(store.config, max_samples=16)
    header = w.payload["header"]
    assert header["num_samples"] == expected.num_samples == store.num_samples
    assert header["sampled_samples"] == 16
    assert header["split_counts"] == dict(store.split_counts)
    assert header["num_scenes"] == 3 and header["num_snippets"] == 12
    assert header["version"] == 1 and header["store_dir"] == str(store.config.store_dir)
    # The digest shown is the request's: a fresh capture of the same store gives the same one.
    request = capture_vin_offline_dataset_stats_request(store.config, max_samples=16)
    assert header["digest"] == request.digest() == w.request.digest()
    # Histogram values are the engine's sampled values, sent as binary float32.
    series = {s["key"]: s for s in w.payload["histograms"]}
    np.testing.assert_allclose(decode_array(series["rri"]["values"]), stats.rri_values, rtol=1e-6)
    assert decode_array(series["candidate_count"]["values"]).tolist() == [
        float(v) for v in stats.candidate_count_values
    ]
    assert series["vin_points"]["summary"]["maximum"] == stats.vin_points.maximum
    comps = {s["key"]: s for s in w.payload["components"]}
    assert set(comps) == {"component:novelty", "component:visibility"}


def test_pairs_scatter_and_unpaired_count(store):
    w = widget_for(store.config.store_dir, max_samples=None)
    stats = w.stats
    pairs = {p["name"]: p for p in w.payload["pairs"]["components"]}
    novelty = pairs["novelty"]
    engine = np.asarray(stats.rri_component_pairs["novelty"], dtype=np.float32)
    assert novelty["count"] == len(engine) > 0
    np.testing.assert_array_equal(decode_array(novelty["rri"]), engine[:, 0])
    np.testing.assert_array_equal(decode_array(novelty["value"]), engine[:, 1])
    # Components are built as rri * 0.5 + noise: strongly correlated, r from the kernel.
    assert novelty["pearson"] > 0.8
    # Every sample of the id-less trailing shard is unpaired, and the dashboard says so.
    assert w.payload["pairs"]["unpaired_count"] == len(store.unpaired_sample_keys) > 0
    assert set(w.payload["pairs"]["unpaired_examples"]) <= set(store.unpaired_sample_keys)
    notices = [p for p in w.payload["problems"] if "without candidate IDs" in p["title"]]
    assert notices and notices[0]["severity"] == "notice"
    warning = next(p for p in w.payload["problems"] if "without any valid candidate" in p["title"])
    assert warning["detail"] == store.no_valid_candidate_sample_keys[0]


def test_block_table_memory_backbone_and_batch_preview(store):
    w = widget_for(store.config.store_dir)
    stats = w.stats
    blocks = w.payload["blocks"]
    assert blocks["$table"]["length"] == len(stats.block_diagnostics)
    names = table_column(blocks, "name")
    est = table_column(blocks, "estimated_bytes")
    by_name = {(b.shard_id, b.name): b for b in stats.block_diagnostics}
    shards = table_column(blocks, "shard_id")
    for shard, name, value in zip(shards, names, est, strict=True):
        expected = by_name[(shard, name)].estimated_bytes
        assert (np.isnan(value) and expected is None) or value == expected
    assert np.nansum(est) == stats.numeric_bytes
    assert [m["component"] for m in w.payload["memory"]] == [
        m.component for m in stats.memory_diagnostics
    ]
    assert {b["field"] for b in w.payload["backbone"]} == {"voxel_features", "global_features"}
    shapes = {s["name"]: s["shape"] for s in w.payload["batch_shapes"]}
    assert shapes["candidate_poses"].endswith(", 16, 7]")
    poses = {p["title"]: p for p in w.payload["poses"]}
    assert set(poses) == set(stats.candidate_pose_summaries) >= {"distance_m"}
    np.testing.assert_allclose(
        decode_array(poses["distance_m"]["values"]),
        stats.candidate_pose_values["distance_m"],
        rtol=1e-6,
    )


def test_payload_crosses_as_buffers_not_json_lists(store):
    w = widget_for(store.config.store_dir)
    content, buffers = split_buffers(w.payload)
    text = json.dumps(content)
    assert len(buffers) >= 10
    # No per-value JSON: the 200+ RRI values are not in the JSON text.
    assert len(text) < 20_000
    assert str(w.stats.rri_values[0])[:8] not in text


def test_refresh_detects_a_store_replaced_between_acquisitions(tmp_path):
    path = tmp_path / "store"
    write_synthetic_store(path)
    w = widget_for(path)
    first = w.payload["header"]["digest"]
    reply = w.run_command("refresh", {})
    assert reply["kind"] == "result" and reply["data"]["replaced"] is False
    assert w.replacement == {"replaced": False}
    assert w.payload["header"]["digest"] == first

    # Replace the store on disk (a new directory renamed into place, as the writer does).
    write_synthetic_store(path, SyntheticStoreSpec(num_scenes=4, seed=3), replace=True)
    reply = w.run_command("refresh", {})
    assert reply["kind"] == "result" and reply["data"]["replaced"] is True
    assert w.replacement["replaced"] is True and w.replacement["when"] == "between"
    assert "was replaced" in w.replacement["message"] and str(path) in w.replacement["message"]
    assert w.replacement["previous_digest"] == first
    assert w.payload["header"]["digest"] == w.replacement["current_digest"] != first
    assert w.payload["header"]["num_scenes"] == 4 and w.stale is False

    # The next refresh of the same store clears the banner.
    assert w.run_command("refresh", {})["data"]["replaced"] is False
    assert w.replacement == {"replaced": False}


def test_replacement_during_the_read_is_refused_and_old_numbers_marked_stale(tmp_path, monkeypatch):
    path = tmp_path / "store"
    write_synthetic_store(path)
    w = widget_for(path)
    old = w.payload["header"]["digest"]
    real_inspect = dashboard_module.inspect_vin_offline_dataset_stats_with_progress

    def replace_then_inspect(request, progress_cb, **kwargs):
        write_synthetic_store(path, SyntheticStoreSpec(seed=9), replace=True)
        return real_inspect(request, progress_cb, **kwargs)

    monkeypatch.setattr(
        dashboard_module, "inspect_vin_offline_dataset_stats_with_progress", replace_then_inspect
    )
    reply = w.run_command("refresh", {})
    assert reply["kind"] == "error" and "replaced" in reply["message"]
    assert w.status == "error" and "replaced" in w.error
    assert w.replacement["when"] == "during" and str(path) in w.replacement["message"]
    assert w.stale is True and w.payload["header"]["digest"] == old
    assert w.acquisition["state"] == "failed"

    monkeypatch.setattr(
        dashboard_module, "inspect_vin_offline_dataset_stats_with_progress", real_inspect
    )
    reply = w.run_command("refresh", {})
    assert reply["kind"] == "result" and reply["data"]["replaced"] is True
    assert w.stale is False and w.payload["header"]["digest"] != old


def test_cancel_returns_at_once_and_keeps_the_shown_numbers(store, monkeypatch):
    w = widget_for(store.config.store_dir)
    shown = w.payload["header"]["digest"]
    entered, release = threading.Event(), threading.Event()
    real_inspect = dashboard_module.inspect_vin_offline_dataset_stats_with_progress

    def blocking_inspect(request, progress_cb, **kwargs):
        entered.set()
        release.wait(30)
        return real_inspect(request, progress_cb, **kwargs)

    monkeypatch.setattr(
        dashboard_module, "inspect_vin_offline_dataset_stats_with_progress", blocking_inspect
    )
    w._dispatch({"kind": "command", "id": "r1", "name": "refresh", "args": {}})
    assert entered.wait(30)
    assert w.acquisition["state"] == "running" and w.acquisition["step"] == "reading store"
    # A second refresh while one runs is refused with a clear message.
    reply = w.run_command("refresh", {})
    assert reply["kind"] == "error" and "already running" in reply["message"]
    w._dispatch({"kind": "cancel", "id": "r1"})
    for _ in range(500):
        if any(r["id"] == "r1" for r in w.replies):
            break
        threading.Event().wait(0.01)
    reply = next(r for r in w.replies if r["id"] == "r1")
    release.set()
    assert reply["kind"] == "error" and reply["cancelled"] is True
    assert w.acquisition["state"] == "cancelled"
    assert w.payload["header"]["digest"] == shown and w.status == "idle"


def test_progress_counts_rows_and_a_cancel_stops_the_engine_at_a_shard(tmp_path, monkeypatch):
    path = tmp_path / "store"
    write_synthetic_store(path, SyntheticStoreSpec(num_scenes=4, rows_per_shard=4))
    sent: list[dict] = []
    calls: list[tuple[int, int]] = []
    real_inspect = dashboard_module.inspect_vin_offline_dataset_stats_with_progress

    def counting_inspect(request, progress_cb, **kwargs):
        def cb(done, total):
            calls.append((done, total))
            progress_cb(done, total)

        return real_inspect(request, cb, **kwargs)

    def send(self, content, buffers=None):
        sent.append(content)
        if content.get("kind") == "progress" and content["total"] and content["done"] >= 8:
            self._dispatch({"kind": "cancel", "id": content["id"]})

    monkeypatch.setattr(
        dashboard_module, "inspect_vin_offline_dataset_stats_with_progress", counting_inspect
    )
    monkeypatch.setattr(StoreDashboardWidget, "send", send)
    w = StoreDashboardWidget(path, max_samples=None)
    with pytest.raises(RuntimeError, match="no statistics"):
        w.wait(120)
    assert w.acquisition["state"] == "cancelled" and w.acquisition["unit"] == "rows"
    # Rows are reported per 4-row shard out of all 32; the engine stopped after the
    # second shard instead of reading the remaining six.
    assert calls[:3] == [(0, 32), (4, 32), (8, 32)]
    threading.Event().wait(0.5)
    assert len(calls) == 3 and w.payload == {}


def test_bad_arguments_and_missing_store_are_clear_errors(tmp_path, store):
    with pytest.raises(ValueError, match="max_samples must be None or an integer >= 0"):
        StoreDashboardWidget(store.config, max_samples=-1)
    with pytest.raises(TypeError, match=r"max_sample$"):
        StoreDashboardWidget(store.config, max_sample=8)
    w = widget_for(store.config)
    reply = w.run_command("refresh", {"max_samples": "lots"})
    assert reply["kind"] == "error" and "'lots'" in reply["message"]
    reply = w.run_command("refresh", {"max_samples": 8})
    assert reply["kind"] == "result" and w.payload["header"]["sampled_samples"] == 8

    missing = tmp_path / "no-store-here"
    w = StoreDashboardWidget(missing)
    with pytest.raises(Exception, match="no-store-here"):
        w.wait(60)
    assert w.status == "error" and str(missing) in w.error
    assert w.acquisition["state"] == "failed" and w.payload == {}
    assert "acquisition failed" in w._repr_html_()


def test_unlabelled_store_reports_unavailable_not_zero(tmp_path):
    path = tmp_path / "store"
    write_synthetic_store(path, SyntheticStoreSpec(scene_labels=False))
    w = widget_for(path)
    series = {s["key"]: s for s in w.payload["histograms"]}
    assert series["candidate_count"]["values"] is None
    assert series["candidate_count"]["unavailable"] == "no scene labels in this store"
    assert series["rri"]["summary"] is None
    assert series["vin_points"]["values"] is not None
    assert any(p["title"] == "No scene supervision in this store" for p in w.payload["problems"])


def test_missing_chunk_is_an_integrity_error_shown_first(tmp_path):
    path = tmp_path / "store"
    record = write_synthetic_store(path)
    chunk = next((path / "shards" / record.shard_ids[0] / "arrays" / "rri" / "c").rglob("*"))
    while chunk.is_dir():
        chunk = next(chunk.iterdir())
    chunk.unlink()
    w = widget_for(path)
    first = w.payload["problems"][0]
    assert first["severity"] == "error"
    assert "MissingChunks" in first["title"] and record.shard_ids[0] in first["title"]


def test_static_html_is_escaped_and_script_free(tmp_path):
    hostile = tmp_path / "<img src=x onerror=alert(1)>"
    write_synthetic_store(hostile)
    w = widget_for(hostile)
    out = w._repr_html_()
    assert "<img src=x" not in out and "&lt;img src=x onerror=alert(1)&gt;" in out
    assert "<script" not in out.lower()
    assert w.payload["header"]["digest"] in out
    assert "24 (all 24 rows scanned)" in out


def test_dashboard_payload_is_a_pure_function_of_the_records(store):
    request = capture_vin_offline_dataset_stats_request(store.config, max_samples=4)
    stats = collect_vin_offline_dataset_stats(store.config, max_samples=4)
    a = dashboard_payload(stats, request)
    b = dashboard_payload(stats, request)
    a["header"].pop("acquired_at"), b["header"].pop("acquired_at")
    assert split_buffers(a) == split_buffers(b)
    shutil.rmtree(store.config.store_dir)  # the payload needs no files once acquired
    assert dashboard_payload(stats, request)["header"]["digest"] == request.digest()


def test_executor_computes_the_shards_and_progress_follows_the_workers(tmp_path, monkeypatch):
    path = tmp_path / "store"
    spec = SyntheticStoreSpec(
        num_scenes=32, snippets_per_scene=8, rows_per_shard=256, num_candidates=4
    )
    write_synthetic_store(path, spec)
    sent: list[dict] = []
    monkeypatch.setattr(
        StoreDashboardWidget, "send", lambda self, content, buffers=None: sent.append(content)
    )
    submitted: list[object] = []

    class Counting(ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            submitted.append(args[0])
            return super().submit(*args, **kwargs)

    with Counting(max_workers=2) as executor:
        w = StoreDashboardWidget(path, max_samples=None, executor=executor)
        stats = w.wait(120)
    assert submitted  # the engine's shard tasks ran on the given executor
    assert stats == collect_vin_offline_dataset_stats(path, max_samples=None)
    # One progress report before the first task and one as each task finishes.
    rows = [(m["done"], m["total"]) for m in sent if m["kind"] == "progress" and m["total"]]
    assert len(rows) == len(submitted) + 1
    assert rows[0] == (0, 512) and rows[-1] == (512, 512)
    assert [d for d, _ in rows] == sorted(d for d, _ in rows)
    assert w.acquisition["state"] == "done"


def test_storage_options_replace_the_configs(store):
    w = StoreDashboardWidget(store.config, storage_options={"anon": True})
    w.wait(120)
    assert w.config.storage_options == {"anon": True}
    assert w.config.store_dir == store.config.store_dir  # local paths ignore the options


def test_the_problem_list_is_the_engines(store):
    from vinlens.store import diagnostics

    w = widget_for(store.config.store_dir, max_samples=None)
    assert dashboard_module.dashboard_problems is diagnostics.dashboard_problems
    assert w.payload["problems"] == diagnostics.dashboard_problems(w.stats)
    assert any(p["severity"] == "notice" for p in w.payload["problems"])
    # Every unpaired key the engine sampled is sent (the browser collapses long lists).
    assert (
        w.payload["pairs"]["unpaired_examples"]
        == [str(k) for k in w.stats.rri_pairing_unavailable_sample_keys][
            : dashboard_module.MAX_UNPAIRED_EXAMPLES
        ]
    )


def test_a_url_store_on_an_executor_shows_the_same_numbers(store, monkeypatch):
    fs = fsspec.filesystem("memory")
    root = f"/vinlens-dashboard-{uuid.uuid4().hex}"
    fs.put(str(store.config.store_dir), f"{root}/store", recursive=True)
    url = f"memory://{root}/store"
    with ThreadPoolExecutor(max_workers=2) as executor:
        w = StoreDashboardWidget(url, max_samples=None, executor=executor)
        stats = w.wait(120)
        reply = w.run_command("refresh", {})
        assert reply["kind"] == "result" and reply["data"]["replaced"] is False
    # The executor is the caller's: once it is shut down, a refresh is an error reply.
    reply = w.run_command("refresh", {})
    assert reply["kind"] == "error" and "shutdown" in reply["message"], reply["message"]
    local = collect_vin_offline_dataset_stats(store.config, max_samples=None)
    # Everything but where the store is (its path and generation) equals the local read.
    assert (
        dataclasses.replace(stats, store_dir=local.store_dir, generation=local.generation) == local
    )
    assert w.store_path == url and w.payload["header"]["store_dir"] == url
    fs.rm(root, recursive=True)


def test_payload_arrays_hold_the_engine_values_exactly():
    """The fast array builders give what ``np.asarray`` gives, and refuse malformed pairs."""
    pairs = [(0.1, 2.0), (float("nan"), -1.5), (3.0, float("inf"))]
    rri, value = rri_pair_arrays(pairs)
    reference = np.asarray(pairs, dtype=np.float64)
    np.testing.assert_array_equal(rri, reference[:, 0])
    np.testing.assert_array_equal(value, reference[:, 1])
    assert rri_pair_arrays([])[0].shape == (0,)
    with pytest.raises(ValueError, match="RRI pairs"):
        rri_pair_arrays([(1.0, 2.0, 3.0), (4.0,)])
    values = (1, 2.5, 1e40, -0.0)
    with np.errstate(over="ignore"):  # 1e40 is inf in float32, as asarray makes it
        array = dashboard_module._float_array(values, np.float32)
        np.testing.assert_array_equal(array, np.asarray(values, dtype=np.float32))
    assert array.dtype == np.float32
    grid = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert dashboard_module._float_array(grid, np.float32).shape == (6,)
