"""StoreCompareWidget: what changed between two VIN offline stores, in a notebook cell.

The widget owns no statistic: :func:`~vinlens.store.compare.compare_vin_offline_stores`
scans both stores (pinning their generations) and returns the record; the widget turns it
into a payload and runs the scan as an exclusive background command, started at
construction, so scripts can :meth:`StoreCompareWidget.wait` for it and the browser shows
progress and can cancel it. The field ranking for every metric comes from the engine's
:func:`~vinlens.store.compare.ranked_fields` (the browser only picks which one
to show), and each field's overlaid histograms are the engine's display bins.

Exports go through :mod:`vinlens.export`: :meth:`export` writes the field table; the
browser's export buttons ask the kernel for CSV text of the field table or of one of the
four set differences (sample keys or scenes only in A or only in B).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np
import traitlets

from vinlens.store.compare import (
    DRIFT_METRICS,
    FieldDrift,
    StoreComparison,
    compare_vin_offline_stores,
    ranked_fields,
)
from vinlens.store.diagnostics import check_max_samples
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.widgets._base import (
    CommandContext,
    CommandError,
    TableExport,
    command,
    reject_unknown_kwargs,
    widget_asset,
)
from vinlens.widgets._payload import encode_array, encode_float, encode_table
from vinlens.widgets._store_common import AcquisitionState, StoreRefresh, esc, store_config

__all__ = ["EXPORT_LISTS", "StoreCompareWidget", "comparison_payload"]

#: What the browser's export buttons may ask for: list name -> (record attribute, column).
EXPORT_LISTS: dict[str, tuple[str, str]] = {
    "samples_only_in_a": ("sample_keys_only_in_a", "sample_key"),
    "samples_only_in_b": ("sample_keys_only_in_b", "sample_key"),
    "scenes_only_in_a": ("scenes_only_in_a", "scene_id"),
    "scenes_only_in_b": ("scenes_only_in_b", "scene_id"),
}


def _opt(value: float | None) -> Any:
    return None if value is None else encode_float(float(value))


def _floats(fields: Sequence[FieldDrift], name: str) -> np.ndarray:
    return np.asarray(
        [np.nan if getattr(f, name) is None else float(getattr(f, name)) for f in fields],
        dtype=np.float64,
    )


def _fields_table(fields: Sequence[FieldDrift]) -> dict[str, Any]:
    columns: dict[str, Any] = {
        "name": [f.name for f in fields],
        "count_a": np.asarray([f.count_a for f in fields], dtype=np.float64),
        "count_b": np.asarray([f.count_b for f in fields], dtype=np.float64),
        "dtype_a": [f.dtype_a or "" for f in fields],
        "dtype_b": [f.dtype_b or "" for f in fields],
        "exact": np.asarray([f.exact for f in fields], dtype=np.bool_),
    }
    for name in ("mean_a", "mean_b", "std_a", "std_b", *DRIFT_METRICS):
        columns[name] = _floats(fields, name)
    return encode_table(columns)


def _histogram(drift: FieldDrift) -> dict[str, Any]:
    return {
        "edges": encode_array(np.asarray(drift.histogram_edges, dtype=np.float64)),
        "a": encode_array(np.asarray(drift.histogram_a, dtype=np.float64)),
        "b": encode_array(np.asarray(drift.histogram_b, dtype=np.float64)),
    }


def _problems(problems: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "kind": p.kind,
            "shard_id": p.shard_id or "",
            "block": p.block or "",
            "path": p.path or "",
            "message": p.message,
        }
        for p in problems
    ]


def comparison_payload(
    result: StoreComparison, *, engine_seconds: float | None = None
) -> dict[str, Any]:
    """The browser payload of one comparison (small JSON plus binary tables and arrays)."""
    fields = list(result.fields)
    position = {f.name: i for i, f in enumerate(fields)}
    rankings = {
        metric: [position[f.name] for f in ranked_fields(result.fields, metric)]
        for metric in DRIFT_METRICS
    }
    return {
        "header": {
            "store_a": result.store_a,
            "store_b": result.store_b,
            "num_samples_a": result.num_samples_a,
            "num_samples_b": result.num_samples_b,
            "sampled_samples_a": result.sampled_samples_a,
            "sampled_samples_b": result.sampled_samples_b,
            "max_samples": result.max_samples,
            "split_counts_a": dict(result.split_counts_a),
            "split_counts_b": dict(result.split_counts_b),
            "float32_relative_resolution": _opt(result.float32_relative_resolution),
            "psi_bins": result.psi_bins,
            "psi_epsilon": _opt(result.psi_epsilon),
            "engine_seconds": _opt(engine_seconds),
        },
        "fields": _fields_table(fields),
        "rankings": rankings,
        "histograms": [_histogram(f) for f in fields],
        "samples_only_in_a": result.samples_only_in_a,
        "samples_only_in_b": result.samples_only_in_b,
        "sample_keys_only_in_a": encode_table({"key": list(result.sample_keys_only_in_a)}),
        "sample_keys_only_in_b": encode_table({"key": list(result.sample_keys_only_in_b)}),
        "scenes_only_in_a": list(result.scenes_only_in_a),
        "scenes_only_in_b": list(result.scenes_only_in_b),
        "problems_a": _problems(result.problems_a),
        "problems_b": _problems(result.problems_b),
    }


class StoreCompareWidget(TableExport, StoreRefresh):
    """Compare store B with store A: fields ranked by drift, set differences, problems.

    ``store_a``/``store_b`` are :class:`~vinlens.store.format.VinOfflineStoreConfig`,
    paths or fsspec URLs (``storage_options_a``/``_b`` replace the configs' options).
    ``max_samples`` rows of each store are scanned (``None``: every row); ``executor``
    (any ``concurrent.futures.Executor``) computes the partials. ``metric`` is the
    ranking shown first (one of ``js_distance``, ``psi``, ``wasserstein``,
    ``ks_statistic``; the browser switches it). The scan starts at once; :meth:`wait`
    blocks until it ends.
    """

    _esm = widget_asset("store_compare.js")
    _css = widget_asset("store_compare.css")

    _READ_ID_PREFIX = "compare"

    store_a_path = traitlets.Unicode("").tag(sync=True)
    store_b_path = traitlets.Unicode("").tag(sync=True)
    metric = traitlets.Enum(DRIFT_METRICS, default_value="js_distance").tag(sync=True)
    #: {"id", "state": running|done|failed|cancelled, "step", "done", "total", "trigger", "message"}
    acquisition = traitlets.Dict().tag(sync=True)
    #: The rendered comparison (see :func:`comparison_payload`); empty until the first success.
    payload = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        store_a: VinOfflineStoreConfig | str | Path,
        store_b: VinOfflineStoreConfig | str | Path,
        max_samples: int | None = 512,
        *,
        storage_options_a: Mapping[str, Any] | None = None,
        storage_options_b: Mapping[str, Any] | None = None,
        executor: Executor | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown_kwargs(type(self), kwargs)
        config_a = store_config(store_a, storage_options=storage_options_a)
        config_b = store_config(store_b, storage_options=storage_options_b)
        checked = check_max_samples(max_samples)
        super().__init__(
            store_a_path=str(config_a.store_dir),
            store_b_path=str(config_b.store_dir),
            max_samples=checked,
            **kwargs,
        )
        self._configs = (config_a, config_b)
        self._store_executor = executor
        self._result: StoreComparison | None = None
        self._acq = AcquisitionState(self, with_unit=True)
        self.acquisition = {"id": "", "state": "idle", "step": "", "done": 0, "total": 0}
        self._start_first_read()

    # -- public Python API --------------------------------------------------------------
    @property
    def comparison(self) -> StoreComparison | None:
        """The record shown now (None before the first scan finishes)."""
        return self._result

    def wait(self, timeout: float | None = None) -> StoreComparison:
        """Block until the running scan ends; return the comparison or raise its error."""
        a, b = (c.store_dir for c in self._configs)
        self._acq.wait(timeout, f"comparison of {a} and {b}")
        if self._result is None:
            raise RuntimeError(f"no comparison of {a} and {b} was computed")
        return self._result

    def _export_records(self) -> list[FieldDrift]:
        """The fields, ranked by the metric shown."""
        return list(ranked_fields(self._require_result().fields, self.metric))

    def _require_result(self) -> StoreComparison:
        if self._result is None:
            raise CommandError("no comparison yet; wait() for the scan to finish")
        return self._result

    # -- commands ----------------------------------------------------------------------
    def _read_stores(self, ctx: CommandContext) -> dict[str, Any]:
        trigger = ctx.trigger
        with self._acq.outcome(ctx, trigger):
            self._acq.publish_running(ctx, trigger, "reading both stores")
            ctx.progress(0, 0)

            def rows_read(done: int, total: int) -> None:
                # On the engine's thread: raising here (a cancel) stops the scan.
                self._acq.publish_running(ctx, trigger, "reading both stores", done, total, "rows")
                ctx.progress(done, total)

            started = time.perf_counter()
            config_a, config_b = self._configs
            result = ctx.call(
                lambda: compare_vin_offline_stores(
                    config_a,
                    config_b,
                    max_samples=self.max_samples,
                    executor=self._store_executor,
                    progress_cb=rows_read,
                    cancel=ctx.cancel_token,
                )
            )
            seconds = time.perf_counter() - started
            payload = comparison_payload(result, engine_seconds=seconds)
            ctx.check_cancelled()
            self._result = result
            self.payload = payload
            self._acq.finish(ctx, trigger, "done")
            self.status = "idle"
            top = result.most_drifted(self.metric, k=1)
            return {"fields": len(result.fields), "top": top[0].name if top else None}

    @command("export")
    def _export_command(self, args: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        """CSV text of the field table (``what="fields"``) or of one set difference."""
        what = args.get("what", "fields")
        result = self._require_result()
        if what == "fields":
            records: Sequence[Any] = self._export_records()
        elif isinstance(what, str) and what in EXPORT_LISTS:
            attribute, column = EXPORT_LISTS[what]
            records = [{column: value} for value in getattr(result, attribute)]
        else:
            choices = ", ".join(["fields", *EXPORT_LISTS])
            raise CommandError(f"export needs 'what' to be one of {choices}, got {what!r}")
        from vinlens.export import export

        with tempfile.TemporaryDirectory(prefix="vinlens-compare-") as tmp:
            path = export(records, Path(tmp) / f"{what}.csv")
            text = path.read_text(encoding="utf-8")
        return {"filename": f"store-compare-{what}.csv", "text": text, "rows": len(records)}

    # -- static fallback ---------------------------------------------------------------
    def _repr_html_(self) -> str:
        result = self._result
        if result is None:
            state = self.acquisition.get("state", "")
            text = (
                f"comparison failed: {esc(str(self.acquisition.get('message') or self.error))}"
                if state == "failed"
                else "the comparison is running; call <code>wait()</code> on the widget and "
                "display it again for a static summary"
            )
            return f"<div><strong>Store compare</strong>: {text}</div>"
        rows = "".join(
            f"<tr><td>{esc(f.name)}</td><td>{f.count_a:,}</td><td>{f.count_b:,}</td>"
            f"<td>{_num(f.metric(self.metric))}</td></tr>"
            for f in ranked_fields(result.fields, self.metric)
        )
        scenes = "".join(
            f"<p>Scenes only in {side}: {esc(', '.join(ids[:50]))}"
            + (f" and {len(ids) - 50:,} more" if len(ids) > 50 else "")
            + "</p>"
            for side, ids in (("A", result.scenes_only_in_a), ("B", result.scenes_only_in_b))
            if ids
        )
        return (
            "<div class='vinlens-static-compare'><h4>Store compare</h4>"
            f"<p>A <code>{esc(result.store_a)}</code> vs B <code>{esc(result.store_b)}</code>: "
            f"{result.samples_only_in_a:,} samples only in A, {result.samples_only_in_b:,} only "
            f"in B; {len(result.scenes_only_in_a):,} scenes only in A, "
            f"{len(result.scenes_only_in_b):,} only in B; problems A {len(result.problems_a)}, "
            f"B {len(result.problems_b)}.</p>{scenes}"
            f"<table><tr><th>field</th><th>count A</th><th>count B</th>"
            f"<th>{esc(self.metric)}</th></tr>{rows}</table></div>"
        )


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
