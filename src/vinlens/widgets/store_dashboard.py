"""StoreDashboardWidget: the health of one immutable VIN offline store in a notebook cell.

The widget owns no diagnostics. It acquires them the way the engine asks callers to:
:func:`capture_vin_offline_dataset_stats_request` pins the store *generation* before
anything is read, and :func:`inspect_vin_offline_dataset_stats` (through its variant
``inspect_vin_offline_dataset_stats_with_progress``, which reports rows read per shard and
is where a cancel stops the engine) reads and refuses a store
replaced before or during the read. The request's digest is what the header shows as the
generation digest, so two dashboards showing the same digest show the same bytes.

Acquisition runs on a worker thread (the notebook stays usable) and starts as soon as the
widget is constructed: by the time the view renders, the numbers are often already there,
scripts and ``nbconvert`` can :meth:`StoreDashboardWidget.wait` for them without any
browser, and several views share one acquisition through the ``acquisition`` and
``payload`` traitlets. Refresh captures a *new* request; when its generation differs
from the one shown, or the engine reports a replacement mid-read, the widget says so in
the ``replacement`` traitlet and the browser shows it as a banner.

Histograms: the kernel sends the engine's sampled values as float32 arrays and the browser
bins them; the bin count is a view choice the user changes without a kernel round trip,
and the engine already bounds every value list (``MAX_HISTOGRAM_VALUES``), so the
payload stays small even with ``max_samples=None``. Every summary number (count, min,
mean, max, Pearson r of the pairs) comes from the engine.
"""

from __future__ import annotations

import io
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import traitlets

from vinlens.store.diagnostics import (
    VinOfflineDatasetStats,
    VinOfflineDatasetStatsRequest,
    capture_vin_offline_dataset_stats_request,
    check_max_samples,
    dashboard_problems,
    inspect_vin_offline_dataset_stats_with_progress,
    rri_component_correlations,
    rri_pair_arrays,
    scan_scope,
)
from vinlens.store.errors import StoreNotFoundError, StoreReplacedError
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.widgets._base import (
    CommandContext,
    CommandError,
    reject_unknown_kwargs,
    widget_asset,
)
from vinlens.widgets._payload import encode_array, encode_float, encode_table, to_jsonable
from vinlens.widgets._store_common import (
    AcquisitionState,
    StoreRefresh,
    esc,
    static_png_html,
    store_config,
)

__all__ = [
    "StoreDashboardWidget",
    "dashboard_payload",
    "dashboard_problems",
]

#: Unpaired sample keys listed by name in the payload (the count is always exact).
MAX_UNPAIRED_EXAMPLES = 200


# --------------------------------------------------------------------------------------
# Payload: engine records -> what the browser renders
# --------------------------------------------------------------------------------------


def _summary(summary: Any) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {
        "count": int(summary.count),
        "minimum": _opt_float(summary.minimum),
        "mean": _opt_float(summary.mean),
        "maximum": _opt_float(summary.maximum),
    }


def _opt_float(value: Any) -> Any:
    return None if value is None else encode_float(float(value))


def _series(
    key: str,
    title: str,
    values: Sequence[float] | np.ndarray,
    summary: Any,
    unavailable: str | None = None,
) -> dict[str, Any]:
    """One histogram series: the engine's sampled values as float32 for browser binning."""
    array = _float_array(values, np.float32)
    return {
        "key": key,
        "title": title,
        "summary": _summary(summary),
        "count": int(array.size),
        "values": None if unavailable is not None else encode_array(array),
        "unavailable": unavailable,
    }


def _float_array(values: Sequence[float] | np.ndarray, dtype: type[np.floating[Any]]) -> np.ndarray:
    """A flat array of ``values``; the engine's records hold tuples of Python floats, and
    ``fromiter`` reads those several times faster than ``asarray`` (the payload is built
    while the user waits for the dashboard)."""
    if isinstance(values, np.ndarray):
        return values.astype(dtype, copy=False).reshape(-1)
    return np.fromiter(values, dtype=dtype, count=len(values))


def _pair_node(
    name: str, pairs: Sequence[tuple[float, float]], pearson: float | None
) -> dict[str, Any]:
    rri, value = rri_pair_arrays(pairs, name=name)
    return {
        "name": name,
        "count": int(rri.size),
        "pearson": _opt_float(pearson),
        "rri": encode_array(rri.astype(np.float32)),
        "value": encode_array(value.astype(np.float32)),
    }


def _shape_text(shape: Any) -> str:
    if isinstance(shape, int):
        return f"[{shape}]"
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def _blocks_table(blocks: Sequence[Any]) -> dict[str, Any]:
    return encode_table(
        {
            "shard_id": [str(b.shard_id) for b in blocks],
            "name": [str(b.name) for b in blocks],
            "kind": [str(getattr(b.kind, "value", b.kind)) for b in blocks],
            "dtype": ["" if b.dtype is None else str(b.dtype) for b in blocks],
            "shape": [_shape_text(b.shape) for b in blocks],
            "optional": np.asarray([bool(b.optional) for b in blocks], dtype=np.bool_),
            "estimated_bytes": np.asarray(
                [np.nan if b.estimated_bytes is None else float(b.estimated_bytes) for b in blocks],
                dtype=np.float64,
            ),
        }
    )


def dashboard_payload(
    stats: VinOfflineDatasetStats,
    request: VinOfflineDatasetStatsRequest,
    *,
    engine_seconds: float | None = None,
) -> dict[str, Any]:
    """The browser payload for one acquisition (small JSON plus binary arrays and tables)."""
    no_labels = None if stats.scene_labels_available else "no scene labels in this store"
    histograms = [
        _series(
            "candidate_count",
            "Valid candidates per sample",
            stats.candidate_count_values,
            stats.candidate_count,
            no_labels,
        ),
        _series("rri", "Oracle RRI (valid candidates)", stats.rri_values, stats.rri, no_labels),
        _series("vin_points", "VIN points per snippet", stats.vin_point_values, stats.vin_points),
    ]
    components = [
        _series(
            f"component:{name}",
            f"RRI component: {name}",
            values,
            stats.rri_component_summaries.get(name),
        )
        for name, values in sorted(stats.rri_component_values.items())
    ]
    poses = [
        _series(
            f"pose:{name}",
            name,
            stats.candidate_pose_values.get(name, ()),
            summary,
        )
        for name, summary in stats.candidate_pose_summaries.items()
    ]
    unpaired = list(stats.rri_pairing_unavailable_sample_keys)
    unpaired_count = max(stats.rri_pairing_unavailable_count, len(unpaired))
    pairs = {
        "components": [
            _pair_node(c.name, stats.rri_component_pairs[c.name], c.pearson)
            for c in rri_component_correlations(stats)
        ],
        "unpaired_count": unpaired_count,
        "unpaired_examples": [str(k) for k in unpaired[:MAX_UNPAIRED_EXAMPLES]],
    }
    header = {
        "store_dir": str(stats.store_dir),
        "version": int(stats.version),
        "num_samples": int(stats.num_samples),
        "sampled_samples": int(stats.sampled_samples),
        "scan_scope": scan_scope(stats),
        "num_scenes": int(stats.num_scenes),
        "num_snippets": int(stats.num_snippets),
        "numeric_bytes": int(stats.numeric_bytes),
        "split_counts": {str(k): int(v) for k, v in stats.split_counts.items()},
        "materialized_blocks": {str(k): bool(v) for k, v in stats.materialized_blocks.items()},
        "scene_labels_available": bool(stats.scene_labels_available),
        "batch_shapes_available": bool(stats.batch_shapes_available),
        "digest": request.digest(),
        "max_samples": request.max_samples,
        "acquired_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "engine_seconds": engine_seconds,
    }
    return {
        "header": header,
        "problems": dashboard_problems(stats),
        "blocks": _blocks_table(stats.block_diagnostics),
        "histograms": histograms,
        "components": components,
        "poses": poses,
        "pairs": pairs,
        "memory": to_jsonable(list(stats.memory_diagnostics)),
        "backbone": to_jsonable(list(stats.backbone_diagnostics)),
        "batch_shapes": [
            {"name": str(name), "shape": _shape_text(shape)}
            for name, shape in stats.batch_shapes.items()
        ],
    }


# --------------------------------------------------------------------------------------
# The widget
# --------------------------------------------------------------------------------------


class StoreDashboardWidget(StoreRefresh):
    """Store-level diagnostics of one VIN offline store, acquired in the background.

    ``store`` is a :class:`~vinlens.store.format.VinOfflineStoreConfig`, a path or an
    fsspec URL (``s3://bucket/store``); ``storage_options`` go to fsspec (they replace the
    config's). ``max_samples`` caps the rows scanned for tensor statistics (``None``: every
    row). ``executor`` (any ``concurrent.futures.Executor``: a ``ProcessPoolExecutor``, or
    ``distributed.Client(...).get_executor()``) computes the per-shard partials; the
    progress bar then advances as each worker finishes its shards. The first acquisition
    starts immediately; :meth:`wait` blocks until it is done.
    """

    _esm = widget_asset("store_dashboard.js")
    _css = widget_asset("store_dashboard.css")

    store_path = traitlets.Unicode("").tag(sync=True)
    _READ_ID_PREFIX = "acquire"

    #: {"id", "state": running|done|failed|cancelled, "step", "done", "total", "trigger", "message"}
    acquisition = traitlets.Dict().tag(sync=True)
    #: The rendered statistics (see :func:`dashboard_payload`); empty until the first success.
    payload = traitlets.Dict().tag(sync=True)
    #: {"replaced", "when": between|during, "message", "previous_digest", "current_digest"}
    replacement = traitlets.Dict().tag(sync=True)
    #: True when ``payload`` belongs to a generation that is no longer at the path.
    stale = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self,
        store: VinOfflineStoreConfig | str | Path,
        max_samples: int | None = 512,
        *,
        storage_options: Mapping[str, Any] | None = None,
        executor: Executor | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown_kwargs(type(self), kwargs)
        config = store_config(store, storage_options=storage_options)
        checked = check_max_samples(max_samples)
        super().__init__(store_path=str(config.store_dir), max_samples=checked, **kwargs)
        self._config = config
        self._store_executor = executor
        self._stats: VinOfflineDatasetStats | None = None
        self._request: VinOfflineDatasetStatsRequest | None = None
        self._acq = AcquisitionState(self, with_unit=True)
        self.acquisition = {"id": "", "state": "idle", "step": "", "done": 0, "total": 0}
        self.replacement = {"replaced": False}
        self._start_first_read()

    # -- public Python API --------------------------------------------------------------
    @property
    def config(self) -> VinOfflineStoreConfig:
        return self._config

    @property
    def stats(self) -> VinOfflineDatasetStats | None:
        """The record shown now (None before the first successful acquisition)."""
        return self._stats

    @property
    def request(self) -> VinOfflineDatasetStatsRequest | None:
        """The request whose result is shown now."""
        return self._request

    def wait(self, timeout: float | None = None) -> VinOfflineDatasetStats:
        """Block until the running acquisition ends; return the stats or raise its error."""
        self._acq.wait(timeout, f"store statistics for {self._config.store_dir}")
        if self._stats is None:
            raise RuntimeError(f"no statistics were acquired for {self._config.store_dir}")
        return self._stats

    # -- commands ----------------------------------------------------------------------
    def _read_stores(self, ctx: CommandContext) -> dict[str, Any]:
        return self._acquire(ctx, ctx.trigger)

    # -- acquisition -------------------------------------------------------------------
    def _set_step(
        self,
        ctx: CommandContext,
        trigger: str,
        step: str,
        done: int = 0,
        total: int = 0,
        unit: str = "",
    ) -> None:
        """Publish where the acquisition is; raises CommandCancelled once cancelled."""
        self._acq.publish_running(ctx, trigger, step, done, total, unit)
        ctx.progress(done, total)

    def _acquire(self, ctx: CommandContext, trigger: str) -> dict[str, Any]:
        """Capture a request, acquire through the engine, publish the payload."""
        path = self._config.store_dir
        with self._acq.outcome(ctx, trigger):
            self._set_step(ctx, trigger, "capturing request")
            try:
                request = capture_vin_offline_dataset_stats_request(
                    self._config, max_samples=self.max_samples
                )
            except StoreNotFoundError as exc:
                raise CommandError(
                    f"no store at {path}: {exc}. If it is being replaced right now, "
                    "Refresh again in a moment."
                ) from exc
            previous = self._request
            replaced_between = previous is not None and request.generation != previous.generation
            self._set_step(ctx, trigger, "reading store")
            started = time.perf_counter()

            def rows_read(done: int, total: int) -> None:
                # Runs on the engine's thread; raising here (cancelled) stops the engine
                # at the next shard and closes its reader.
                self._set_step(ctx, trigger, "reading store", done, total, "rows")

            try:
                # The engine looks for a cancel only between shards: answer one at once.
                stats = ctx.call(
                    lambda: inspect_vin_offline_dataset_stats_with_progress(
                        request, rows_read, executor=self._store_executor, cancel=ctx.cancel_token
                    )
                )
            except StoreReplacedError as exc:
                self.replacement = {
                    "replaced": True,
                    "when": "during",
                    "message": f"The store at {path} was replaced while its statistics were "
                    f"being read; that acquisition was discarded and nothing from it is shown. "
                    f"Refresh to read the new store. ({exc})",
                    "previous_digest": previous.digest() if previous is not None else "",
                    "current_digest": "",
                }
                if self._stats is not None:
                    self.stale = True
                raise CommandError(f"store replaced during acquisition: {exc}") from exc
            engine_seconds = time.perf_counter() - started
            self._set_step(ctx, trigger, "building payload")
            payload = dashboard_payload(stats, request, engine_seconds=engine_seconds)
            ctx.check_cancelled()
            digest = request.digest()
            if replaced_between:
                assert previous is not None
                self.replacement = {
                    "replaced": True,
                    "when": "between",
                    "message": f"The store at {path} was replaced since the statistics shown "
                    f"before were acquired (generation digest {previous.digest()[:12]}… → "
                    f"{digest[:12]}…). Everything below is from the new store.",
                    "previous_digest": previous.digest(),
                    "current_digest": digest,
                }
            elif self.replacement.get("when") == "during" and previous is not None:
                # The last attempt saw a replacement mid-read; this one read the new store.
                self.replacement = {
                    "replaced": True,
                    "when": "between",
                    "message": f"The store at {path} was replaced (generation digest "
                    f"{previous.digest()[:12]}… → {digest[:12]}…). Everything below is from "
                    "the new store.",
                    "previous_digest": previous.digest(),
                    "current_digest": digest,
                }
            else:
                self.replacement = {"replaced": False}
            self._stats = stats
            self._request = request
            self.payload = payload
            self.stale = False
            self._acq.finish(ctx, trigger, "done")
            self.status = "idle"
            return {"digest": digest, "replaced": bool(self.replacement.get("replaced"))}

    # -- static fallback ---------------------------------------------------------------
    def to_png(self) -> bytes:
        """A matplotlib PNG of candidate counts, RRI and VIN point lengths (needs stats)."""
        from vinlens.plotting import plot_dataset_overview

        stats = self._stats
        if stats is None:
            raise RuntimeError("no statistics yet; call wait() first")
        buffer = io.BytesIO()
        plot_dataset_overview(stats).savefig(buffer, format="png", dpi=72)
        return buffer.getvalue()

    def _repr_html_(self) -> str:
        return _static_html(self)


def _static_html(widget: StoreDashboardWidget) -> str:
    """Self-contained HTML (no scripts; every kernel string escaped) for nbconvert/GitHub."""
    stats = widget.stats
    request = widget.request
    if stats is None or request is None:
        state = widget.acquisition.get("state", "")
        message = widget.acquisition.get("message") or widget.error
        text = (
            f"acquisition failed: {message}"
            if state == "failed"
            else "statistics are being acquired; call <code>wait()</code> on the widget and "
            "display it again for a static summary"
        )
        return (
            f"<div><strong>VIN store</strong> <code>{esc(widget.store_path)}</code>: "
            f"{text if state != 'failed' else esc(text)}</div>"
        )
    rows = [
        ("Path", stats.store_dir),
        ("Format version", stats.version),
        ("Generation digest", request.digest()),
        ("Samples", f"{stats.num_samples:,} ({scan_scope(stats)})"),
        ("Scenes", f"{stats.num_scenes:,}"),
        ("Snippets", f"{stats.num_snippets:,}"),
        ("Splits", ", ".join(f"{k} {v:,}" for k, v in stats.split_counts.items()) or "none"),
        ("Numeric bytes", f"{stats.numeric_bytes:,}"),
    ]
    parts = ["<div class='vinlens-static-store'>", "<h4>VIN store diagnostics</h4>"]
    if widget.replacement.get("replaced"):
        parts.append(f"<p><strong>{esc(str(widget.replacement.get('message', '')))}</strong></p>")
    parts.append("<table>")
    parts += [f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in rows]
    parts.append("</table>")
    problems = dashboard_problems(stats)
    if problems:
        parts.append("<h5>Integrity problems and notices</h5><ul>")
        parts += [
            f"<li><strong>{esc(p['severity'])}: {esc(p['title'])}</strong> {esc(p['detail'])}</li>"
            for p in problems
        ]
        parts.append("</ul>")
    else:
        parts.append("<p>No integrity problems found.</p>")
    parts.append(static_png_html(widget.to_png, alt="store diagnostics plots", unavailable="plots"))
    parts.append("</div>")
    return "\n".join(parts)
