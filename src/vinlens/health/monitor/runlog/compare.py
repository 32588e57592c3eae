"""Where two runs part ways: :func:`compare_runs` over two run logs.

Each step of a run is logged as what it started from (each module's own weight norm), what
it saw (the root module's inputs), what it computed (the loss, and on sampled steps each
module's output summary, in production order) and the gradients it left (each module's own
parameter-gradient norm, in the order they were produced). The first step at which any of
these differs between the two logs, and the first of them in that order, tells a module that
made the difference from the modules that only inherited it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from vinlens.health.monitor._records import SUMMARY_FIELDS, HistoryMatrix
from vinlens.health.monitor.runlog.fingerprints import Fingerprints
from vinlens.health.monitor.runlog.reader import TrainingRun, open_run

__all__ = [
    "Cause",
    "ModuleDivergence",
    "RunDivergence",
    "compare_runs",
    "relative_difference",
]

Cause = Literal["init", "data", "optimizer", "forward", "backward"]

_NO_PRINTS = (
    "a log without every-step fingerprints (written before they were logged) was compared on"
    " its losses, global gradient norms and sampled steps only"
)


@dataclass(frozen=True)
class ModuleDivergence:
    """One module of two compared runs: the first step at which each of its records differs.

    Attributes:
        path: The original module's path (no ``_orig_mod.`` or ``module.`` prefix).
        weights: First step its own weight norm differs (None: never).
        outputs: First sampled step its output summary differs (None: never).
        grads: First step its own parameter-gradient norm differs (None: never).
    """

    path: str
    weights: int | None
    outputs: int | None
    grads: int | None


@dataclass(frozen=True)
class RunDivergence:
    """Where two runs part ways (see :func:`compare_runs`).

    Attributes:
        identical: Nothing logged differs beyond the tolerances on any rank.
        steps_compared: Steps both runs logged (of the lowest rank).
        ranks: The ranks compared.
        first_step: The first step at which anything logged differs, or None.
        rank: The lowest rank that differs at ``first_step``, or None.
        cause: ``"init"``, ``"data"``, ``"optimizer"``, ``"forward"``, ``"backward"`` or None.
        module: The module that made the difference (see :func:`compare_runs`), or None.
        field: What differed first (``"loss"``, ``"inputs[0].sum"``, ``"weight_norm"``,
            ``"grad_norm"``, ``"output.std"``, ``"global_grad_norm"``, ...).
        value_a: Its value in run ``a``.
        value_b: Its value in run ``b``.
        modules: One row per shared module, in the order outputs were produced.
        unmatched: Module paths logged by only one of the runs.
        note: What the comparison could not see, or None.
    """

    identical: bool
    steps_compared: int
    ranks: tuple[int, ...]
    first_step: int | None
    rank: int | None
    cause: Cause | None
    module: str | None
    field: str | None
    value_a: float | None
    value_b: float | None
    modules: tuple[ModuleDivergence, ...]
    unmatched: tuple[str, ...]
    note: str | None


def agree(a: Any, b: Any, rtol: float, atol: float) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Where ``|a - b| <= atol + rtol * max(|a|, |b|)``, NaN agreeing with NaN and +0 with
    -0; with zero tolerances, float64 equality."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if rtol or atol:
            same |= np.abs(a - b) <= atol + rtol * np.maximum(np.abs(a), np.abs(b))
    return np.asarray(same, dtype=bool)


def _open(
    run: TrainingRun | str | os.PathLike[str], options: Mapping[str, Any] | None
) -> TrainingRun:
    if isinstance(run, TrainingRun):
        return run
    if not isinstance(run, str | os.PathLike):
        raise TypeError(
            f"compare_runs takes run log directories, URLs or TrainingRun objects, got {run!r}"
        )
    return open_run(run, storage_options=options)


@dataclass
class _Found:
    """The first difference of one rank: ``(step, rank, order)`` sorts candidates."""

    step: int
    rank: int
    order: int
    cause: Cause | None
    module: str | None
    field: str
    value_a: float
    value_b: float
    note: str | None = None


# Within one step, what the step started from comes first, then what it saw, computed and
# left behind: the first of these that differs is the cause.
_WEIGHTS, _INPUTS, _OUTPUTS, _LOSS, _GRADS, _SAMPLED_GRADS, _GLOBAL = range(7)


@dataclass
class _Pair:
    """One rank of both runs, aligned on the steps and module paths they share."""

    rank: int
    steps: np.ndarray[Any, np.dtype[np.int64]]
    loss: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
    norm: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
    prints: tuple[Fingerprints, Fingerprints] | None
    print_steps: np.ndarray[Any, np.dtype[np.int64]]
    print_rows: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
    sampled: np.ndarray[Any, np.dtype[np.int64]]
    sample_cols: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def _columns(paths: Sequence[str], shared: Sequence[str]) -> np.ndarray[Any, Any]:
    index = {p: i for i, p in enumerate(paths)}
    return np.asarray([index[p] for p in shared], dtype=np.int64)


def _pair(a: TrainingRun, b: TrainingRun, rank: int) -> _Pair:
    sa, sb = a.step_series(rank), b.step_series(rank)
    steps, ia, ib = np.intersect1d(sa.steps, sb.steps, return_indices=True)
    fa, fb = a.fingerprints(rank), b.fingerprints(rank)
    prints = (fa, fb) if fa.logged and fb.logged else None
    print_steps, pa, pb = np.intersect1d(fa.steps, fb.steps, return_indices=True)
    sampled, ca, cb = np.intersect1d(
        np.asarray(a.sampled_steps(rank), np.int64),
        np.asarray(b.sampled_steps(rank), np.int64),
        return_indices=True,
    )
    return _Pair(
        rank,
        steps,
        (sa.loss[ia], sb.loss[ib]),
        (sa.grad_norm[ia], sb.grad_norm[ib]),
        prints,
        print_steps if prints else np.empty(0, np.int64),
        (pa, pb),
        sampled,
        (ca, cb),
    )


def _first(mask: np.ndarray[Any, Any]) -> int | None:
    """The first row of a ``(steps,)`` or ``(steps, modules)`` mask with a True."""
    rows = mask if mask.ndim == 1 else mask.any(axis=1)
    hit = np.flatnonzero(rows)
    return int(hit[0]) if len(hit) else None


def _inputs_differ(
    a: Sequence[Any], b: Sequence[Any], rtol: float, atol: float
) -> tuple[str, float, float] | None:
    """The first field of two steps' root inputs that differs, with its values (none when
    either run recorded no input: a root compiled in place, or not called that step)."""
    if not a or not b:
        return None
    if len(a) != len(b):
        return "inputs.count", float(len(a)), float(len(b))
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x[0] != y[0]:
            return f"inputs[{i}].shape", math.nan, math.nan
        if x[1] != y[1]:
            return f"inputs[{i}].dtype", math.nan, math.nan
        for name, j in (("sum", 2), ("sum_sq", 3)):
            if not agree(x[j], y[j], rtol, atol):
                return f"inputs[{i}].{name}", float(x[j]), float(y[j])
    return None


@dataclass
class _Rows:
    """Per shared module, the first step each record differs (over the ranks compared)."""

    weights: dict[str, int]
    outputs: dict[str, int]
    grads: dict[str, int]

    def note(self, which: dict[str, int], paths: Sequence[str], steps: Any, mask: Any) -> None:
        for column, path in enumerate(paths):
            hit = np.flatnonzero(mask[:, column])
            if len(hit):
                step = int(steps[int(hit[0])])
                which[path] = min(step, which.get(path, step))


def _first_path(mask_row: Any, shared: Sequence[str], order: Sequence[str]) -> str:
    """The first path in ``order`` whose column of ``mask_row`` is set (then ``shared``'s)."""
    differing = {shared[int(i)] for i in np.flatnonzero(mask_row)}
    for path in (*order, *shared):
        if path in differing:
            return path
    raise AssertionError("a differing row names no module")


def _print_candidates(
    pair: _Pair, shared: Sequence[str], rtol: float, atol: float, rows: _Rows, found: list[_Found]
) -> None:
    """The weights, inputs and gradients of every step both runs fingerprinted."""
    if pair.prints is None:
        return
    fa, fb = pair.prints
    ca, cb = _columns(fa.module_paths, shared), _columns(fb.module_paths, shared)
    ra, rb = pair.print_rows
    steps = pair.print_steps
    first_compared = int(pair.steps[0]) if len(pair.steps) else 0
    for name, va, vb, order in (
        ("weight_norm", fa.weight_norm, fb.weight_norm, _WEIGHTS),
        ("grad_norm", fa.grad_norm, fb.grad_norm, _GRADS),
    ):
        xa, xb = va[ra][:, ca], vb[rb][:, cb]
        mask = ~agree(xa, xb, rtol, atol)
        rows.note(rows.weights if order == _WEIGHTS else rows.grads, shared, steps, mask)
        row = _first(mask)
        if row is None:
            continue
        step = int(steps[row])
        if order == _WEIGHTS:
            cause: Cause = "init" if step == first_compared else "optimizer"
            module = _first_path(mask[row], shared, ())
        else:
            cause = "backward"
            grad_order = fa.grad_order or tuple(reversed(fa.output_order))
            module = _first_path(mask[row], shared, grad_order)
        column = shared.index(module)
        found.append(
            _Found(step, pair.rank, order, cause, module, name, xa[row, column], xb[row, column])
        )
    for row, (i, j) in enumerate(zip(ra, rb, strict=True)):
        differ = _inputs_differ(fa.inputs[i], fb.inputs[j], rtol, atol)
        if differ is not None:
            found.append(_Found(int(steps[row]), pair.rank, _INPUTS, "data", None, *differ))
            break


def _sample_candidates(
    a: TrainingRun,
    b: TrainingRun,
    pair: _Pair,
    shared: Sequence[str],
    order: Sequence[str],
    tolerances: tuple[float, float],
    rows: _Rows,
    found: list[_Found],
) -> None:
    """The output summaries (and gradient norms) of the sampled steps both runs logged."""
    if not len(pair.sampled):
        return
    rank, (sa, sb) = pair.rank, pair.sample_cols
    fields_a, fields_b = a.meta(rank)["fields"], b.meta(rank)["fields"]
    cols_a = _columns(a.meta(rank)["module_paths"], shared)
    cols_b = _columns(b.meta(rank)["module_paths"], shared)
    masks: list[tuple[str, Any, Any, Any]] = []
    for name in (*SUMMARY_FIELDS, "grad_norm"):
        if name not in fields_a or name not in fields_b:
            continue
        xa = a.history_matrix(name, rank).values[cols_a][:, sa].T
        xb = b.history_matrix(name, rank).values[cols_b][:, sb].T
        masks.append((name, ~agree(xa, xb, *tolerances), xa, xb))
    outputs = [m for m in masks if m[0] != "grad_norm"]
    if outputs:
        union = np.logical_or.reduce([m[1] for m in outputs])
        rows.note(rows.outputs, shared, pair.sampled, union)
        row = _first(union)
        if row is not None:
            module = _first_path(union[row], shared, order)
            column = shared.index(module)
            name, _, xa, xb = next(m for m in outputs if m[1][row, column])
            step = int(pair.sampled[row])
            found.append(
                _Found(
                    step,
                    rank,
                    _OUTPUTS,
                    "forward",
                    module,
                    f"output.{name}",
                    xa[row, column],
                    xb[row, column],
                )
            )
    for name, mask, xa, xb in masks:
        row = _first(mask) if name == "grad_norm" else None
        if row is not None:
            module = _first_path(mask[row], shared, tuple(reversed(order)))
            column = shared.index(module)
            step = int(pair.sampled[row])
            found.append(
                _Found(
                    step,
                    rank,
                    _SAMPLED_GRADS,
                    "backward",
                    module,
                    name,
                    xa[row, column],
                    xb[row, column],
                )
            )


def _series_candidates(pair: _Pair, tolerances: tuple[float, float], found: list[_Found]) -> None:
    """The loss and global gradient norm of every step both runs logged."""
    for name, (xa, xb), order in (
        ("loss", pair.loss, _LOSS),
        ("global_grad_norm", pair.norm, _GLOBAL),
    ):
        row = _first(~agree(xa, xb, *tolerances))
        if row is None:
            continue
        step = int(pair.steps[row])
        cause: Cause = "forward" if order == _LOSS else "backward"
        note = None
        if order == _LOSS and step not in pair.sampled:
            note = (
                f"step {step} was not sampled in both runs: only its loss says the forward"
                " differs; log that stretch with every=1 to name the module"
            )
        elif order == _LOSS:
            note = (
                f"every module's output agrees at step {step}: the loss computed from them differs"
            )
        found.append(_Found(step, pair.rank, order, cause, None, name, xa[row], xb[row], note))


def compare_runs(
    a: TrainingRun | str | os.PathLike[str],
    b: TrainingRun | str | os.PathLike[str],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    storage_options_a: Mapping[str, Any] | None = None,
    storage_options_b: Mapping[str, Any] | None = None,
    ranks: Sequence[int] | None = None,
) -> RunDivergence:
    """Where two runs that should be equal part ways, from their run logs.

    Two logged values agree when ``|a - b| <= atol + rtol * max(|a|, |b|)`` (NaN agrees with
    NaN, +0 with -0); with the default tolerances the comparison is bitwise. At the first
    step where anything differs, the cause is, in this order: ``"init"`` (the weights differ
    at the first step compared) or ``"optimizer"`` (they differ later, although the step
    before left equal gradients: the update differed), ``"data"`` (the root module's inputs
    differ), ``"forward"`` (a module's output, or the loss, differs), ``"backward"`` (the
    gradients differ). ``module`` is, for "forward", the first module in production order
    whose output differs (a module that only inherited the difference comes after it); for
    "backward", the first in the order the gradients were produced; for "init" and
    "optimizer", the first in ``named_modules`` order. Under several ranks, ``rank`` is the
    lowest rank showing the earliest kind of difference at that step (a rank whose own
    input differs, not one that only received its all-reduced gradients).

    Args:
        a, b: Run log directories or URLs, or :class:`TrainingRun` objects.
        rtol, atol: Relative and absolute tolerances.
        storage_options_a, storage_options_b: fsspec options for URLs ``a`` and ``b``.
        ranks: Compare these ranks only (None: every rank).

    Raises:
        FileNotFoundError: ``a`` or ``b`` is not a run log.
        ValueError: negative tolerances, different world sizes or ranks, a rank in ``ranks``
            the runs lack, or no step in common.
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    run_a, run_b = _open(a, storage_options_a), _open(b, storage_options_b)
    pairs = _pairs(run_a, run_b, ranks)
    paths_a, paths_b = run_a.module_paths, run_b.module_paths
    in_a, in_b = set(paths_a), set(paths_b)
    shared = [p for p in paths_a if p in in_b]
    common = set(shared)
    unmatched = tuple(p for p in paths_a if p not in in_b) + tuple(
        p for p in paths_b if p not in in_a
    )
    tolerances = (float(rtol), float(atol))
    rows = _Rows({}, {}, {})
    found: list[_Found] = []
    order: tuple[str, ...] = ()
    for pair in pairs:
        fa = pair.prints[0] if pair.prints else run_a.fingerprints(pair.rank)
        order = order or tuple(p for p in fa.output_order if p in common)
        _print_candidates(pair, shared, *tolerances, rows, found)
        _sample_candidates(run_a, run_b, pair, shared, order, tolerances, rows, found)
        _series_candidates(pair, tolerances, found)
    notes = [] if all(p.prints for p in pairs) else [_NO_PRINTS]
    ordered = set(order)
    production = [*order, *(p for p in shared if p not in ordered)]
    first = min(found, key=lambda f: (f.step, f.order, f.rank)) if found else None
    if first is not None and first.note:
        notes.insert(0, first.note)
    return RunDivergence(
        identical=first is None,
        steps_compared=len(pairs[0].steps),
        ranks=tuple(p.rank for p in pairs),
        first_step=None if first is None else first.step,
        rank=None if first is None else first.rank,
        cause=None if first is None else first.cause,
        module=None if first is None else first.module,
        field=None if first is None else first.field,
        value_a=None if first is None else float(first.value_a),
        value_b=None if first is None else float(first.value_b),
        modules=tuple(
            ModuleDivergence(p, rows.weights.get(p), rows.outputs.get(p), rows.grads.get(p))
            for p in production
        ),
        unmatched=unmatched,
        note="; ".join(notes) or None,
    )


def _pairs(run_a: TrainingRun, run_b: TrainingRun, ranks: Sequence[int] | None) -> list[_Pair]:
    """The ranks to compare, aligned; refuses runs that cannot be compared."""
    if run_a.ranks != run_b.ranks:
        raise ValueError(
            f"cannot compare runs of different world sizes: {run_a.log_dir!r} has ranks"
            f" {list(run_a.ranks)}, {run_b.log_dir!r} has ranks {list(run_b.ranks)}"
        )
    world = {str(run.meta(run.ranks[0]).get("world_size")) for run in (run_a, run_b)}
    if len(world) > 1:
        raise ValueError(f"cannot compare runs of different world sizes {sorted(world)}")
    chosen = run_a.ranks if ranks is None else tuple(sorted(set(ranks)))
    if not chosen or any(r not in run_a.ranks for r in chosen):
        raise ValueError(f"ranks must be among the runs' ranks {list(run_a.ranks)}, got {ranks!r}")
    pairs = [_pair(run_a, run_b, rank) for rank in chosen]
    if not len(pairs[0].steps):
        raise ValueError(
            f"{run_a.log_dir!r} and {run_b.log_dir!r} have no step in common (rank"
            f" {pairs[0].rank}): nothing to compare"
        )
    return pairs


def relative_difference(
    a: TrainingRun, b: TrainingRun, *, field: str = "grad_norm", rank: int = 0
) -> HistoryMatrix:
    """``|a - b| / max(|a|, |b|)`` of one field per module and step both runs logged.

    ``field`` ``"weight_norm"`` or ``"grad_norm"`` reads the every-step fingerprints (when
    both runs logged them; else ``"grad_norm"`` reads the sampled steps); any other sampled
    history field reads the sampled steps. Values are 0 where both are equal (NaN and NaN
    included); rows are the shared modules in production order.

    Raises:
        ValueError: an unknown field, a rank a run lacks, or fingerprints ``"weight_norm"``
            needs that a run did not log.
    """
    fa, fb = a.fingerprints(rank), b.fingerprints(rank)
    in_b = set(b.module_paths)
    common = {p for p in a.module_paths if p in in_b}
    order = [p for p in fa.output_order if p in common]
    ordered = set(order)
    shared = [*order, *(p for p in a.module_paths if p in common and p not in ordered)]
    if field in ("weight_norm", "grad_norm") and fa.logged and fb.logged:
        steps, ia, ib = np.intersect1d(fa.steps, fb.steps, return_indices=True)
        xa = getattr(fa, field)[ia][:, _columns(fa.module_paths, shared)].T
        xb = getattr(fb, field)[ib][:, _columns(fb.module_paths, shared)].T
    elif field == "weight_norm":
        raise ValueError("field 'weight_norm' needs runs logged with fingerprints")
    else:
        ma, mb = a.history_matrix(field, rank), b.history_matrix(field, rank)
        steps, ia, ib = np.intersect1d(
            np.asarray(ma.steps, np.int64), np.asarray(mb.steps, np.int64), return_indices=True
        )
        xa = ma.values[_columns(ma.module_paths, shared)][:, ia]
        xb = mb.values[_columns(mb.module_paths, shared)][:, ib]
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.abs(xa - xb) / np.maximum(np.abs(xa), np.abs(xb))
    values[agree(xa, xb, 0.0, 0.0)] = 0.0
    return HistoryMatrix(field, tuple(int(s) for s in steps), tuple(shared), values)
