"""CoverageHeatmapWidget: which raw ASE snippets one VIN offline store contains, per scene.

The numbers come from :func:`vinlens.store.coverage.collect_vin_offline_dataset_coverage`;
its ``progress_cb`` drives the widget's progress bar (one step per tar shard) and is also
where a cancel from the browser lands, so a long scan stops between two tars.

The engine's per-scene rows carry *counts*, and its example lists are capped. Clicking a
scene needs the snippet ids themselves, so :meth:`CoverageHeatmapWidget.scene_snippets`
answers from the engine's record when its examples already hold every missing and outside
snippet of that scene, and otherwise lists the raw tar headers once more with the engine's
own functions (:func:`~vinlens.store.coverage.find_raw_tar_shards`,
:func:`~vinlens.store.coverage.list_tar_member_names`,
:func:`~vinlens.store.coverage.snippet_pairs_from_member_names`), caching the result for
the lifetime of that coverage record. The store side is the sample index of the very
generation the coverage was computed against; a store replaced since then is refused.
"""

from __future__ import annotations

import io
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np
import traitlets

from vinlens.export import display_text
from vinlens.store.coverage import (
    VinOfflineCoverageSceneDiagnostic,
    VinOfflineCoverageStats,
    collect_vin_offline_dataset_coverage,
    raw_snippets_by_scene,
)
from vinlens.store.errors import StoreAccessError, StoreReplacedError, TarScanError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import (
    StoreGeneration,
    VinOfflineStoreReader,
    capture_store_generation,
)
from vinlens.widgets._base import (
    BrowserSafeState,
    CommandContext,
    CommandError,
    TableExport,
    command,
    reject_unknown_kwargs,
    widget_asset,
)
from vinlens.widgets._payload import encode_float, encode_table
from vinlens.widgets._store_common import AcquisitionState, esc, static_png_html, store_config

__all__ = ["CoverageHeatmapWidget", "coverage_payload"]

SnippetPair = tuple[str, str]


def _ratio(value: float | None) -> Any:
    return None if value is None else encode_float(float(value))


def coverage_payload(record: VinOfflineCoverageStats) -> dict[str, Any]:
    """Totals as JSON and the per-scene rows as one binary columnar table."""
    rows = record.per_scene
    scenes = encode_table(
        {
            "scene_id": [r.scene_id for r in rows],
            "dataset_snippets": np.asarray([r.dataset_snippets for r in rows], dtype=np.int64),
            "store_snippets": np.asarray([r.store_snippets for r in rows], dtype=np.int64),
            "covered_snippets": np.asarray([r.covered_snippets for r in rows], dtype=np.int64),
            "missing_in_store": np.asarray([r.missing_in_store for r in rows], dtype=np.int64),
            "outside_dataset": np.asarray([r.outside_dataset for r in rows], dtype=np.int64),
            # NaN stands for "undefined" (no raw snippet of the scene), never for 0.
            "coverage": np.asarray(
                [np.nan if r.coverage is None else r.coverage for r in rows], dtype=np.float64
            ),
        }
    )
    totals = {
        "store_dir": record.store_dir,
        "raw_dataset_dir": record.raw_dataset_dir,
        "tar_shards_scanned": record.tar_shards_scanned,
        "tar_shards_found": record.tar_shards_found,
        "members_scanned": record.members_scanned,
        "dataset_scenes": record.dataset_scenes,
        "store_scenes": record.store_scenes,
        "dataset_snippets": record.dataset_snippets,
        "store_snippets": record.store_snippets,
        "covered_snippets": record.covered_snippets,
        "missing_in_store": record.missing_in_store,
        "outside_dataset": record.outside_dataset,
        "coverage": _ratio(record.coverage),
        "unparseable_members": record.unparseable_members,
        "unparseable_examples": list(record.unparseable_examples),
        "meta_members_skipped": record.meta_members_skipped,
        # Names that were not valid UTF-8, as "<tar>: <member>" with \xNN escapes.
        "non_utf8_members": record.non_utf8_members,
        "non_utf8_examples": list(record.non_utf8_examples),
    }
    return {
        "totals": totals,
        "scenes": scenes,
        "missing_examples": [list(p) for p in record.missing_examples],
        "outside_examples": [list(p) for p in record.outside_examples],
    }


class CoverageHeatmapWidget(BrowserSafeState, TableExport):
    """Per-scene raw-dataset coverage of a store as a heatmap, with per-scene snippet lists.

    ``store`` is a :class:`~vinlens.store.format.VinOfflineStoreConfig`, a path or an
    fsspec URL; ``raw_dataset_dir`` (a path or URL) overrides or supplies the config's raw
    dataset directory, and ``storage_options`` (for fsspec) the config's. ``executor`` (any
    ``concurrent.futures.Executor``) scans the tars in parallel; the progress bar advances
    as each tar finishes. The tar scan starts immediately in the background; :meth:`wait`
    blocks until it is done.
    The per-scene table exports like every vinlens table: :meth:`to_rows`,
    :meth:`to_dataframe`, :meth:`export`.
    """

    _esm = widget_asset("coverage_heatmap.js")
    _css = widget_asset("coverage_heatmap.css")

    store_path = traitlets.Unicode("").tag(sync=True)
    raw_dataset_dir = traitlets.Unicode("").tag(sync=True)
    #: {"id", "state": running|done|failed|cancelled, "step", "done", "total", "message"}
    acquisition = traitlets.Dict().tag(sync=True)
    #: See :func:`coverage_payload`; empty until the first scan finishes.
    coverage = traitlets.Dict().tag(sync=True)
    #: {"replaced", "message"}: the store at the path is another generation than at the
    #: previous scan (the browser shows a banner).
    replacement = traitlets.Dict().tag(sync=True)
    #: The scene whose snippets the browser lists (set by a click or from Python).
    selected_scene = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        store: VinOfflineStoreConfig | str | Path,
        raw_dataset_dir: str | Path | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        executor: Executor | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown_kwargs(type(self), kwargs)
        config = store_config(
            store, raw_dataset_dir=raw_dataset_dir, storage_options=storage_options
        )
        if config.raw_dataset_dir is None:
            raise ValueError(
                f"{config.store_dir}: coverage needs the raw dataset directory; pass "
                "raw_dataset_dir=... or set VinOfflineStoreConfig.raw_dataset_dir"
            )
        super().__init__(
            store_path=str(config.store_dir),
            raw_dataset_dir=str(config.raw_dataset_dir),
            **kwargs,
        )
        self._config = config
        self._store_executor = executor
        self._record: VinOfflineCoverageStats | None = None
        self._generation: StoreGeneration | None = None
        self._store_by_scene: dict[str, set[str]] = {}
        self._raw_by_scene: Mapping[str, frozenset[str]] | None = None
        self._index_lock = threading.Lock()
        self._acq = AcquisitionState(self)
        self.acquisition = {"id": "", "state": "idle", "step": "", "done": 0, "total": 0}
        self.replacement = {"replaced": False}
        self.start_command("rescan", trigger="construction", id_prefix="scan")

    # -- public Python API --------------------------------------------------------------
    @property
    def config(self) -> VinOfflineStoreConfig:
        return self._config

    @property
    def record(self) -> VinOfflineCoverageStats | None:
        """The coverage record shown now (None before the first scan finishes)."""
        return self._record

    def wait(self, timeout: float | None = None) -> VinOfflineCoverageStats:
        """Block until the running scan ends; return the record or raise its error."""
        self._acq.wait(timeout, f"coverage of {self._config.store_dir}")
        if self._record is None:
            raise RuntimeError(f"no coverage was computed for {self._config.store_dir}")
        return self._record

    def rescan(self) -> None:
        """Scan the raw tars again in the background (e.g. after the store was rebuilt)."""
        self.start_command("rescan", trigger="rescan()", id_prefix="scan")

    def scene_snippets(self, scene_id: str) -> dict[str, Any]:
        """Missing and outside snippet ids of one scene (see the module docstring)."""
        return self._scene_snippets(scene_id, None)

    # -- commands ----------------------------------------------------------------------
    @command(
        "rescan",
        background=True,
        exclusive=True,
        busy="a coverage scan is already running; wait for it or cancel it",
    )
    def _rescan_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        record = self._scan(ctx, ctx.trigger)
        return {"scenes": len(record.per_scene)}

    @command("scene_snippets", background=True)
    def _scene_snippets_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        scene_id = args.get("scene_id")
        if not isinstance(scene_id, str) or not scene_id:
            raise CommandError(
                f"scene_snippets needs a non-empty string 'scene_id', got {scene_id!r}"
            )
        self.selected_scene = scene_id
        return self._scene_snippets(scene_id, ctx)

    @command("csv")
    def _csv_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        """The per-scene table as CSV text, written by the same exporter as :meth:`export`."""
        record = self._require_record()
        with tempfile.TemporaryDirectory(prefix="vinlens-coverage-") as tmp:
            path = self.export(Path(tmp) / "coverage.csv")
            text = path.read_text(encoding="utf-8")
        name = Path(record.store_dir).name or "store"
        return {"filename": f"{name}-coverage.csv", "text": text}

    # -- scanning ----------------------------------------------------------------------
    def _export_records(self) -> list[VinOfflineCoverageSceneDiagnostic]:
        return list(self._require_record().per_scene)

    def _require_record(self) -> VinOfflineCoverageStats:
        if self._record is None:
            raise CommandError(
                f"no coverage for {self._config.store_dir} yet; wait() for the scan to finish"
            )
        return self._record

    def _progress(self, ctx: CommandContext, trigger: str, step: str) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            self._acq.publish_running(ctx, trigger, step, done, total)
            ctx.progress(done, total)  # raises CommandCancelled between two tars

        return report

    def _scan(self, ctx: CommandContext, trigger: str) -> VinOfflineCoverageStats:
        with self._acq.outcome(ctx, trigger):
            progress = self._progress(ctx, trigger, "scanning raw tar headers")
            progress(0, 0)
            generation = capture_store_generation(self._config)
            record = collect_vin_offline_dataset_coverage(
                self._config,
                progress_cb=progress,
                executor=self._store_executor,
                cancel=ctx.cancel_token,
            )
            # The store side of the per-scene lists: the sample index of the generation
            # the coverage was computed against (the engine checked it did not change).
            with VinOfflineStoreReader(self._config) as reader:
                if reader.generation != generation:
                    raise StoreReplacedError(
                        "the store was replaced while its coverage was computed",
                        path=str(reader.store_dir),
                    )
                store_by_scene: dict[str, set[str]] = defaultdict(set)
                for row in reader.samples:
                    store_by_scene[row.scene_id].add(row.snippet_id)
            ctx.check_cancelled()
            previous = self._generation
            if previous is not None and previous != generation:
                self.replacement = {
                    "replaced": True,
                    "message": f"The store at {self._config.store_dir} was replaced since the "
                    "previous scan; the coverage below compares the new store.",
                }
            else:
                self.replacement = {"replaced": False}
            with self._index_lock:
                self._record = record
                self._generation = generation
                self._store_by_scene = dict(store_by_scene)
                self._raw_by_scene = None
            self.coverage = coverage_payload(record)
            self._acq.finish(ctx, trigger, "done")
            self.status = "idle"
            return record

    # -- per-scene snippet lists -------------------------------------------------------
    def _scene_row(self, scene_id: str) -> VinOfflineCoverageSceneDiagnostic:
        record = self._require_record()
        for row in record.per_scene:
            if row.scene_id == scene_id:
                return row
        raise CommandError(
            f"scene {display_text(scene_id)!r} is in neither the store nor the raw dataset"
        )

    def _scene_snippets(self, scene_id: str, ctx: CommandContext | None) -> dict[str, Any]:
        record = self._require_record()
        row = self._scene_row(scene_id)
        missing = sorted(s for sc, s in record.missing_examples if sc == scene_id)
        outside = sorted(s for sc, s in record.outside_examples if sc == scene_id)
        source = "record"
        if len(missing) != row.missing_in_store or len(outside) != row.outside_dataset:
            raw = self._raw_snippets(ctx)
            self._check_generation()
            raw_snippets = raw.get(scene_id, frozenset())
            store_snippets = self._store_by_scene.get(scene_id, set())
            missing = sorted(raw_snippets - store_snippets)
            outside = sorted(store_snippets - raw_snippets)
            source = "header listing"
        if len(missing) != row.missing_in_store or len(outside) != row.outside_dataset:
            raise CommandError(
                f"the raw dataset under {self._config.raw_dataset_dir} changed since the "
                f"coverage scan (scene {scene_id!r}: {len(missing)} missing / {len(outside)} "
                f"outside now, {row.missing_in_store} / {row.outside_dataset} then); Rescan"
            )
        return {
            "scene_id": scene_id,
            "dataset_snippets": row.dataset_snippets,
            "store_snippets": row.store_snippets,
            "covered_snippets": row.covered_snippets,
            "coverage": _ratio(row.coverage),
            "missing_in_store": missing,
            "outside_dataset": outside,
            "source": source,
        }

    def _check_generation(self) -> None:
        if self._generation is None:
            return
        try:
            now = capture_store_generation(self._config)
        except FileNotFoundError as exc:
            raise CommandError(f"the store at {self._config.store_dir} is gone: {exc}") from exc
        if now != self._generation:
            raise CommandError(
                f"the store at {self._config.store_dir} was replaced since its coverage was "
                "computed; Rescan to compare the new store"
            )

    def _raw_snippets(self, ctx: CommandContext | None) -> Mapping[str, frozenset[str]]:
        """Raw snippet ids per scene from the engine (its per-tar partials are cached)."""
        with self._index_lock:
            if self._raw_by_scene is not None:
                return self._raw_by_scene
            record = self._record
        assert record is not None
        try:
            index = raw_snippets_by_scene(
                self._config,
                max_tars=record.tar_shards_scanned,
                progress_cb=None if ctx is None else ctx.progress,
                executor=self._store_executor,
                cancel=None if ctx is None else ctx.cancel_token,
            )
        except (TarScanError, StoreAccessError) as exc:
            raise CommandError(str(exc)) from exc
        with self._index_lock:
            if self._record is record:
                self._raw_by_scene = index
        return index

    # -- static fallback ---------------------------------------------------------------
    def to_png(self) -> bytes:
        """A matplotlib PNG of per-scene coverage (needs a finished scan)."""
        from vinlens.plotting import plot_scene_coverage

        buffer = io.BytesIO()
        plot_scene_coverage(self._require_record()).savefig(buffer, format="png", dpi=72)
        return buffer.getvalue()

    def _repr_html_(self) -> str:
        record = self._record
        if record is None:
            state = self.acquisition.get("state", "")
            text = (
                f"coverage failed: {esc(str(self.acquisition.get('message') or self.error))}"
                if state == "failed"
                else "the raw tar headers are being scanned; call <code>wait()</code> on the "
                "widget and display it again for a static summary"
            )
            return f"<div><strong>Raw-dataset coverage</strong> <code>{esc(self.store_path)}</code>: {text}</div>"
        pct = "n/a" if record.coverage is None else f"{100 * record.coverage:.1f}%"
        rows = [
            ("Store", record.store_dir),
            ("Raw dataset", self.raw_dataset_dir),
            ("Tar shards scanned", f"{record.tar_shards_scanned:,}"),
            ("Scenes (raw / store)", f"{record.dataset_scenes:,} / {record.store_scenes:,}"),
            ("Snippets (raw / store)", f"{record.dataset_snippets:,} / {record.store_snippets:,}"),
            ("Covered", f"{record.covered_snippets:,} ({pct})"),
            ("Missing from store", f"{record.missing_in_store:,}"),
            ("Outside raw dataset", f"{record.outside_dataset:,}"),
        ]
        parts = ["<div class='vinlens-static-coverage'>", "<h4>Raw-dataset coverage</h4><table>"]
        parts += [f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in rows]
        parts.append("</table>")
        if record.non_utf8_members:
            parts.append(
                f"<p>{record.non_utf8_members:,} member name(s) are not valid UTF-8; shown "
                "with \\xNN escapes:</p><ul>"
            )
            parts += [f"<li><code>{esc(e)}</code></li>" for e in record.non_utf8_examples]
            parts.append("</ul>")
        worst = sorted(
            (r for r in record.per_scene if r.missing_in_store or r.outside_dataset),
            key=lambda r: (r.coverage if r.coverage is not None else -1.0, r.scene_id),
        )[:20]
        if worst:
            parts.append(
                "<h5>Scenes with gaps (lowest coverage first)</h5><table><tr><th>scene</th>"
                "<th>raw</th><th>store</th><th>covered</th><th>missing</th><th>outside</th>"
                "<th>coverage</th></tr>"
            )
            for r in worst:
                cov = "n/a" if r.coverage is None else f"{100 * r.coverage:.1f}%"
                cells = (
                    r.scene_id, r.dataset_snippets, r.store_snippets, r.covered_snippets,
                    r.missing_in_store, r.outside_dataset, cov,
                )  # fmt: skip
                parts.append("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>")
            parts.append("</table>")
        parts.append(static_png_html(self.to_png, alt="coverage per scene", unavailable="plot"))
        parts.append("</div>")
        return "\n".join(parts)
