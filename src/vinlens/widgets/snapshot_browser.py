"""SnapshotBrowserWidget: pick modules, set quotas, capture bounded tensor snapshots, browse them.

The user's ``run`` is a zero-argument callable that does an ordinary forward pass. A
capture (the browser's Capture button, or :meth:`SnapshotBrowserWidget.capture`) wraps
it in ``capture_model`` for the selected module paths and limits, then publishes the
snapshots as one binary table: metadata columns plus every sampled value in one flat
float64 array addressed by ``values_start``/``values_count``. The user code runs on the
kernel's main thread, as it would in a cell. If it raises, the snapshots taken before
the failure are still shown, the error and its traceback appear in the widget, the
kernel keeps going and the engine has removed its hooks.

:class:`SnapshotTableWidget` shows the snapshots of a capture the user ran themselves
(``vinlens.show(capture)``), read-only.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import traitlets
from torch import nn

from vinlens.model_inspection import inspect_model
from vinlens.widgets._base import BrowserSafeState, CommandError, TableExport, command, widget_asset
from vinlens.widgets._payload import encode_array, encode_table
from vinlens.widgets._selection import ModuleSelection
from vinlens.widgets.model_health import summary_columns
from vinlens.widgets.module_table import (
    ModuleTableState,
    ModuleTableWidget,
    _unknown_paths_message,
)

__all__ = [
    "SnapshotBrowserWidget",
    "SnapshotTableWidget",
    "parse_limits",
    "snapshot_table_payload",
]


def _limit_fields() -> tuple[str, ...]:
    from vinlens.model_inspection import CaptureLimits

    return tuple(f.name for f in dataclasses.fields(CaptureLimits))


def parse_limits(raw: Any) -> Any:
    """A ``CaptureLimits`` from a ``CaptureLimits``, a mapping of its fields, or None.

    Missing fields keep their defaults; unknown fields and non-positive or non-integer
    values are errors naming the field (``CaptureLimits.from_mapping``).
    """
    from vinlens.model_inspection import CaptureLimits

    if raw is None:
        return CaptureLimits()
    if isinstance(raw, CaptureLimits):
        return raw
    return CaptureLimits.from_mapping(raw)


def _limits_dict(limits: Any) -> dict[str, int]:
    return {name: int(getattr(limits, name)) for name in _limit_fields()}


def _quota_used_up(capture: Any) -> bool:
    limits = getattr(capture, "limits", None)
    if limits is None:
        return False
    return bool(
        len(capture.snapshots) >= limits.max_tensors or capture.sampled_bytes >= limits.max_bytes
    )


def _silent_modules_warning(capture: Any, module_paths: Sequence[str] | None) -> str | None:
    """Why a capture that raised nothing still shows less than asked for, or None.

    A capture hooks the modules of the model the widget was built with; a ``run`` that
    drives another object (``model`` re-assigned after re-running a cell) calls none of
    them, and the capture is empty without any error. Selected modules without a
    snapshot ran no forward while hooked, unless the quotas ran out first.
    """
    seen = {s.module_path for s in capture.snapshots}
    if not seen:
        which = (
            "no module of the model"
            if not module_paths
            else f"none of the selected modules ({_path_list(module_paths)})"
        )
        return (
            f"run() finished, but {which} ran while hooked: 0 tensors captured. If `model` "
            "was re-assigned after this browser was built, run() calls the new object; "
            "build the browser again with the model that run() uses."
        )
    if module_paths and not _quota_used_up(capture):
        silent = [p for p in module_paths if p not in seen]
        if silent:
            return (
                f"{len(silent)} of {len(module_paths)} selected modules did not run during "
                f"run(): {_path_list(silent)}"
            )
    return None


def _path_list(paths: Sequence[str], shown: int = 5) -> str:
    head = ", ".join(paths[:shown])
    return head + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def snapshot_table_payload(snapshots: Sequence[Any]) -> dict[str, Any]:
    """Snapshots as one binary table plus the flat array of all sampled values."""
    n = len(snapshots)
    counts = np.fromiter((len(s.values) for s in snapshots), np.int64, n)
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(counts[:-1], out=starts[1:])
    flat = np.fromiter(
        (float(v) for s in snapshots for v in s.values), np.float64, int(counts.sum())
    )
    table = encode_table(
        {
            "module_path": [s.module_path for s in snapshots],
            "call_index": np.fromiter((s.call_index for s in snapshots), np.int64, n),
            "direction": [s.direction for s in snapshots],
            "tensor_path": [s.tensor_path for s in snapshots],
            "shape": [json.dumps(list(s.shape), separators=(",", ":")) for s in snapshots],
            "dtype": [s.dtype for s in snapshots],
            "device": [s.device for s in snapshots],
            "numel": np.fromiter((s.numel for s in snapshots), np.int64, n),
            "sampled_bytes": np.fromiter((s.sampled_bytes for s in snapshots), np.int64, n),
            "sample_omission_reason": [s.sample_omission_reason or "" for s in snapshots],
            "values_start": starts,
            "values_count": counts,
            # whole-tensor statistics (the sample is only a prefix of the tensor)
            **summary_columns([s.summary for s in snapshots], "summary"),
        }
    )
    return {"table": table, "values": encode_array(flat)}


class SnapshotView(BrowserSafeState, TableExport):
    """Traitlets and export of a snapshot table (shared by the browser and the read-only view)."""

    snapshot_table = traitlets.Dict().tag(sync=True)
    capture_summary = traitlets.Dict().tag(sync=True)
    limits = traitlets.Dict().tag(sync=True)
    can_capture = traitlets.Bool(False).tag(sync=True)
    embedded_table = traitlets.Bool(False).tag(sync=True)

    _capture: Any = None

    @traitlets.validate("limits")
    def _validate_limits(self, proposal: Mapping[str, Any]) -> dict[str, int]:
        try:
            return _limits_dict(parse_limits(proposal["value"]))
        except (TypeError, ValueError) as exc:
            raise traitlets.TraitError(f"invalid capture limits: {exc}") from exc

    def _publish(
        self,
        capture: Any,
        error: BaseException | None,
        module_paths: Sequence[str] | None = None,
    ) -> None:
        snapshots = capture.snapshots
        limits = getattr(capture, "limits", None)
        warning = _silent_modules_warning(capture, module_paths) if error is None else None
        with self.hold_sync():
            self.capture_summary = {
                "tensors": len(snapshots),
                "max_tensors": None if limits is None else limits.max_tensors,
                "sampled_bytes": int(capture.sampled_bytes),
                "max_bytes": None if limits is None else limits.max_bytes,
                "modules": len({s.module_path for s in snapshots}),
                "ok": error is None and warning is None,
                "error": None if error is None else f"{type(error).__name__}: {error}",
                "warning": warning,
            }
            self.snapshot_table = snapshot_table_payload(snapshots)

    @property
    def last_capture(self) -> Any:
        """The ``ModelCapture`` shown, or None before the first capture."""
        return self._capture

    @property
    def snapshots(self) -> tuple[Any, ...]:
        """The ``TensorSnapshot`` records shown (empty before the first capture)."""
        return () if self._capture is None else tuple(self._capture.snapshots)

    def _export_records(self) -> Any:
        return self.snapshots


class SnapshotTableWidget(SnapshotView):
    """The snapshots of an existing ``ModelCapture``, read-only (what ``vinlens.show`` gives)."""

    _esm = widget_asset("snapshot_browser.js")
    _css = widget_asset("snapshot_browser.css")

    def __init__(self, capture: Any, **kwargs: Any) -> None:
        if not hasattr(capture, "snapshots") or not hasattr(capture, "sampled_bytes"):
            raise TypeError(
                "SnapshotTableWidget expects a ModelCapture, got "
                f"{type(capture).__module__}.{type(capture).__qualname__}"
            )
        super().__init__(can_capture=False, **kwargs)
        limits = getattr(capture, "limits", None)
        if limits is not None:
            self.limits = _limits_dict(limits)
        self._capture = capture
        self._publish(capture, None)


class SnapshotBrowserWidget(SnapshotView, ModuleTableState):
    """Choose modules and quotas in the browser, capture around ``run()``, browse the tensors.

    Args:
        model: the constructed model whose modules may be captured.
        run: zero-argument callable doing an ordinary forward pass of ``model``.
        limits: a ``CaptureLimits`` (or a mapping of its fields); None for defaults.
        module_table: a ``ModuleTableWidget`` of the same model whose selection drives the
            capture (they share ``module_table.selection``); without it the browser embeds
            its own table.
        module_paths: initially selected module paths.
        selection: a :class:`~vinlens.widgets.ModuleSelection` shared with other widgets;
            by default the browser has one of its own (or the linked table's).

    An empty selection captures every module (``module_paths=None``), bounded by the
    quotas as always.
    """

    _esm = widget_asset("snapshot_browser.js")
    _css = widget_asset("snapshot_browser.css")

    def __init__(
        self,
        model: nn.Module,
        run: Callable[[], Any],
        limits: Any = None,
        *,
        module_table: ModuleTableWidget | None = None,
        module_paths: Sequence[str] = (),
        selection: ModuleSelection | None = None,
        **kwargs: Any,
    ) -> None:
        metadata = inspect_model(model)
        if not callable(run):
            raise TypeError(
                f"run must be a zero-argument callable doing a forward pass, "
                f"got {type(run).__module__}.{type(run).__qualname__}"
            )
        if module_table is not None:
            if not isinstance(module_table, ModuleTableWidget):
                raise TypeError(
                    "module_table must be a ModuleTableWidget, got "
                    f"{type(module_table).__module__}.{type(module_table).__qualname__}"
                )
            if module_table.model is not model:
                raise ValueError("module_table shows a different model than the one to capture")
        super().__init__(can_capture=True, embedded_table=module_table is None, **kwargs)
        self.model = model
        self.run = run
        self.module_table = module_table
        self.limits = _limits_dict(parse_limits(limits))
        self._set_metadata(metadata, send_table=module_table is None)
        self.selected_paths = list(module_paths)
        if module_table is not None:
            if selection is not None and selection is not module_table.selection:
                raise ValueError(
                    "give either module_table or selection, or the table's own selection"
                )
            selection = module_table.selection
            if module_paths:
                selection.paths = [str(p) for p in self.selected_paths]
        self._use_selection(selection)
        self.snapshot_table = snapshot_table_payload(())

    def capture(
        self, module_paths: Sequence[str] | None = None, limits: Any = None
    ) -> tuple[Any, ...]:
        """Capture around ``run()`` and show the result; returns the snapshots.

        ``module_paths`` defaults to the selection (all modules when nothing is
        selected), ``limits`` to the current ``limits``. An exception from ``run``
        propagates after the partial snapshots and the error are shown.
        """
        paths = self._checked_paths(self.selected_paths if module_paths is None else module_paths)
        chosen = parse_limits(self.limits if limits is None else limits)
        snapshots = tuple(self._capture_with(paths, chosen).snapshots)
        warning = self.capture_summary.get("warning")
        if warning:
            warnings.warn(warning, RuntimeWarning, stacklevel=2)
        return snapshots

    def _checked_paths(self, module_paths: Any) -> list[str] | None:
        if isinstance(module_paths, str) or not isinstance(module_paths, Sequence):
            raise TypeError(
                f"module_paths must be a list of module paths, got {type(module_paths).__name__}"
            )
        rejected = [p for p in module_paths if not (isinstance(p, str) and p in self._path_index)]
        if rejected:
            raise ValueError(_unknown_paths_message(rejected, self._path_index))
        return list(dict.fromkeys(module_paths)) or None

    def _capture_with(self, module_paths: list[str] | None, limits: Any) -> Any:
        from vinlens.model_inspection import capture_model

        capture = capture_model(self.model, module_paths=module_paths, limits=limits)
        failure: BaseException | None = None
        self.status = "busy"
        try:
            with capture:
                self.run()
        except BaseException as exc:  # the user's forward; shown, then re-raised
            failure = exc
        finally:
            capture.close()  # idempotent: the context already removed its hooks
        self._capture = capture
        self.limits = _limits_dict(limits)
        self._publish(capture, failure, module_paths)
        if failure is not None:
            self._report_error("", f"run() raised {type(failure).__name__}: {failure}", failure)
            raise failure
        self.error = ""
        self.error_traceback = ""
        self.status = "idle"
        return capture

    @command("capture", exclusive=True, busy="a capture is already running")
    def _capture_command(self, args: Mapping[str, Any], ctx: Any) -> dict[str, Any]:
        try:
            paths = self._checked_paths(args.get("module_paths", self.selected_paths))
            limits = parse_limits(args.get("limits", self.limits))
        except (TypeError, ValueError) as exc:
            raise CommandError(f"capture: {exc}") from exc
        self._capture_with(paths, limits)
        return dict(self.capture_summary)
