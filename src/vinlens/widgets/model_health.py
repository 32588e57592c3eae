"""ModelHealthWidget: activation statistics, the first NaN and checkpoint drift in the module table.

The rows are the module table's (``inspect_model`` of model A); the health columns are the
records of :mod:`vinlens.health`, aligned to the rows by module path:

- ``ActivationStats`` (``collect_activation_stats``): the ``TensorSummary`` of each
  module's outputs (mean, std, range, zero fraction, non-finite counts);
- ``ModelDiff`` (``compare_models``): in diff mode the A and B summaries of each module
  and its drift (``relative_l2``, ``max_abs_diff``, ``cosine``); a module called several
  times shows its most drifted call;
- ``NonFiniteOrigin`` (``find_nonfinite_origin``): the module whose finite inputs gave a
  NaN or Inf first is highlighted, and the modules it then reached are marked.

The widget computes nothing itself: with ``run`` it calls those engines (the Analyze
button, or :meth:`ModelHealthWidget.analyze`) on its own worker thread; records computed
elsewhere (statistics over a whole ``DataLoader``) are shown with ``stats=``, ``diff=``
and ``origin=``. Like every module-table widget it shares a
:class:`~vinlens.widgets.ModuleSelection`; the browser shows the A and B summaries of the
module picked last, wherever it was picked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import traitlets
from torch import nn

from vinlens.model_inspection import TensorSummary, inspect_model
from vinlens.widgets._base import CommandContext, CommandError, TableExport, command, widget_asset
from vinlens.widgets._payload import encode_table, to_jsonable
from vinlens.widgets._selection import ModuleSelection
from vinlens.widgets.module_table import ModuleTableState

__all__ = ["ModelHealthWidget", "health_payload"]

#: ``TensorSummary`` fields sent per module and side (A, and B in diff mode).
SUMMARY_FIELDS = tuple(f.name for f in dataclasses.fields(TensorSummary))
DRIFT_FIELDS = ("max_abs_diff", "relative_l2", "cosine")


def summary_columns(summaries: Sequence[Any], side: str) -> dict[str, np.ndarray]:
    """``<side>_<field>`` float64 columns of ``TensorSummary`` records (NaN where a row
    has None) and ``has_<side>`` saying which rows have one."""
    n = len(summaries)
    columns = {f"has_{side}": np.fromiter((s is not None for s in summaries), np.bool_, n)}
    for name in SUMMARY_FIELDS:
        columns[f"{side}_{name}"] = np.fromiter(
            (np.nan if s is None else float(getattr(s, name)) for s in summaries), np.float64, n
        )
    return columns


def health_payload(
    metadata: Any,
    *,
    stats: Any = None,
    diff: Any = None,
    origin: Any = None,
) -> dict[str, Any]:
    """Health columns aligned to the rows of ``module_table_payload(metadata)``.

    ``table`` has, per module row, ``a_<field>`` and ``b_<field>`` for each summary field
    (NaN where the side has no summary; ``has_a`` / ``has_b`` say which), the drift
    fields, ``calls`` (calls compared), ``origin`` (1 for the NaN origin) and
    ``reached`` (1 for modules the non-finite values reached after it).
    """
    columns, unknown, origin_info = _health_columns(metadata, stats=stats, diff=diff, origin=origin)
    divergent = None if diff is None else diff.first_divergent_path()
    return {
        "mode": "diff" if diff is not None else "stats" if stats is not None else "empty",
        "table": encode_table(columns),
        "origin": origin_info,
        "first_divergent": divergent,
        "unknown_paths": sorted(set(unknown)),
        "unpaired_paths": [] if diff is None else list(diff.unpaired_paths),
        "batches": None if stats is None else int(stats.batches),
        "walk_truncated": [] if stats is None else list(stats.walk_truncated),
    }


def _health_columns(
    metadata: Any, *, stats: Any, diff: Any, origin: Any
) -> tuple[dict[str, np.ndarray], list[str], dict[str, Any] | None]:
    """The health table's columns, the record paths that are no module row, the origin."""
    paths = [m.path for m in metadata.modules]
    index = {path: i for i, path in enumerate(paths)}
    n = len(paths)
    summaries: dict[str, list[Any]] = {"a": [None] * n, "b": [None] * n}
    columns: dict[str, np.ndarray] = {}
    for name in DRIFT_FIELDS:
        columns[name] = np.full(n, np.nan, dtype=np.float64)
    columns["calls"] = np.zeros(n, dtype=np.int32)
    columns["origin"] = np.zeros(n, dtype=np.bool_)
    columns["reached"] = np.zeros(n, dtype=np.bool_)
    unknown: list[str] = []
    if diff is not None:
        calls: dict[str, int] = {}
        for entry in diff.modules:
            calls[entry.module_path] = calls.get(entry.module_path, 0) + 1
        best = {entry.module_path: entry for entry in diff.most_drifted()}
        for path in calls:  # execution order of each path's first call
            row = index.get(path)
            if row is None:
                unknown.append(path)
                continue
            entry = best[path]
            summaries["a"][row] = entry.summary_a
            summaries["b"][row] = entry.summary_b
            for name in DRIFT_FIELDS:
                columns[name][row] = float(getattr(entry, name))
            columns["calls"][row] = calls[path]
    if stats is not None:
        for path, summary in stats.modules.items():
            row = index.get(path)
            if row is None:
                unknown.append(path)
            else:
                summaries["a"][row] = summary  # the streamed statistics of model A win
    origin_info: dict[str, Any] | None = None
    if origin is not None:
        row = index.get(origin.module_path)
        if row is None:
            unknown.append(origin.module_path)
        else:
            columns["origin"][row] = True
        reached = [p for p in origin.propagated_to if p in index]
        for path in reached:
            columns["reached"][index[path]] = True
        origin_info = {
            "module_path": origin.module_path,
            "call_index": int(origin.call_index),
            "inputs": to_jsonable(origin.inputs),
            "outputs": to_jsonable(origin.outputs),
            "reached": list(origin.propagated_to),
            "input_nonfinite": bool(origin.input_nonfinite),
        }
    columns = {
        **summary_columns(summaries["a"], "a"),
        **summary_columns(summaries["b"], "b"),
        **columns,
    }
    return columns, unknown, origin_info


class ModelHealthWidget(ModuleTableState, TableExport):
    """The modules of ``model`` with their activation statistics, the NaN origin and A/B drift.

    Args:
        model: model A, whose modules are the rows.
        run: ``run(model)`` drives one forward of the given model on a fixed input. With
            it, Analyze (and :meth:`analyze`) collects statistics of that forward, looks
            for the first non-finite value, and with ``model_b`` compares A and B.
        model_b: a second checkpoint of the same architecture (diff mode).
        stats, diff, origin: records computed elsewhere (``ActivationStats``,
            ``ModelDiff``, ``NonFiniteOrigin``) to show now.
        selection: a :class:`~vinlens.widgets.ModuleSelection` shared with other widgets.
        analyze: analyze at once (in the constructing cell) when ``run`` is given and no
            record was passed.

    ``to_rows()`` / ``to_dataframe()`` / ``export(path)`` give the summary table shown: one
    row per module, its path and type, then the health columns.

    The Analyze button runs on the widget's worker thread (the notebook stays responsive
    and shows progress); the engines hook model A (and B) until it finishes, so leave
    those models alone in other cells meanwhile.
    """

    _esm = widget_asset("model_health.js")
    _css = widget_asset("model_health.css")

    health = traitlets.Dict().tag(sync=True)
    can_analyze = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self,
        model: nn.Module,
        run: Callable[[nn.Module], Any] | None = None,
        *,
        model_b: nn.Module | None = None,
        stats: Any = None,
        diff: Any = None,
        origin: Any = None,
        selection: ModuleSelection | None = None,
        analyze: bool = True,
        tree_view: bool = True,
        **kwargs: Any,
    ) -> None:
        metadata = inspect_model(model)
        if run is not None and not callable(run):
            raise TypeError(
                "run must be a callable run(model) doing one forward pass, got "
                f"{type(run).__module__}.{type(run).__qualname__}"
            )
        if model_b is not None:
            if not isinstance(model_b, nn.Module):
                raise TypeError(
                    "model_b must be a torch.nn.Module, got "
                    f"{type(model_b).__module__}.{type(model_b).__qualname__}"
                )
            if run is None:
                raise ValueError("model_b needs run(model) to drive both models' forwards")
        super().__init__(tree_view=tree_view, can_analyze=run is not None, **kwargs)
        self.model = model
        self.model_b = model_b
        self.run = run
        self._stats: Any = None
        self._diff: Any = None
        self._origin: Any = None
        self._set_metadata(metadata)
        self._use_selection(selection)
        self.show_records(stats=stats, diff=diff, origin=origin)
        if analyze and run is not None and stats is None and diff is None and origin is None:
            # On the cell's own thread, as the user's forward would run in the cell: a
            # background analysis would hook the model while the next cells use it.
            self.analyze()

    # -- records ---------------------------------------------------------------------------
    @property
    def stats(self) -> Any:
        """The ``ActivationStats`` shown, or None."""
        return self._stats

    @property
    def diff(self) -> Any:
        """The ``ModelDiff`` shown (diff mode), or None."""
        return self._diff

    @property
    def origin(self) -> Any:
        """The ``NonFiniteOrigin`` shown, or None (none found, or not looked for)."""
        return self._origin

    def show_records(self, *, stats: Any = None, diff: Any = None, origin: Any = None) -> None:
        """Show these records (replacing the ones shown)."""
        payload = health_payload(self._metadata, stats=stats, diff=diff, origin=origin)
        self._stats, self._diff, self._origin = stats, diff, origin
        self.health = payload

    def _export_records(self) -> list[dict[str, Any]]:
        """One dict per module row: path, type, then the health columns (as sent)."""
        columns, _, _ = _health_columns(
            self._metadata, stats=self._stats, diff=self._diff, origin=self._origin
        )
        return [
            {
                "path": module.path,
                "module_type": module.module_type,
                **{name: values[row].item() for name, values in columns.items()},
            }
            for row, module in enumerate(self._metadata.modules)
        ]

    # -- analysis --------------------------------------------------------------------------
    def analyze(self) -> dict[str, Any]:
        """Run the health engines on ``run`` now (on this thread) and show the records.

        Returns what the browser's Analyze command returns: the mode, the NaN origin's
        path (or None) and the first divergent module path in diff mode. Refused
        (RuntimeError) while the Analyze command runs: two analyses hooking the same
        model at once would count every forward twice.
        """
        return self.run_in_flight("analyze", lambda _ctx: self._analyze(None))

    def _analyze(self, ctx: CommandContext | None) -> dict[str, Any]:
        from vinlens import health

        run = self.run
        if run is None:
            raise CommandError("analyze: this widget was built without run(model)")
        model, model_b = self.model, self.model_b
        steps = 3 if model_b is not None else 2

        def step(done: int) -> None:
            if ctx is not None:
                ctx.progress(done, steps)

        step(0)
        stats = health.collect_activation_stats(model, [None], run=lambda m, _batch: run(m))
        step(1)
        origin = health.find_nonfinite_origin(model, lambda: run(model))
        diff = None
        if model_b is not None:
            step(2)
            diff = health.compare_models(model, model_b, run)
        step(steps)
        self.show_records(stats=stats, diff=diff, origin=origin)
        return {
            "mode": self.health["mode"],
            "origin": None if origin is None else origin.module_path,
            "first_divergent": self.health["first_divergent"],
        }

    @command("analyze", background=True, exclusive=True, busy="an analysis is already running")
    def _analyze_command(self, args: Mapping[str, Any], ctx: CommandContext) -> dict[str, Any]:
        return self._analyze(ctx)
