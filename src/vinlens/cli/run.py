"""``vinlens run show``, ``run replay`` and ``run diff``: what a training run log holds
(written by ``TrainingMonitor(log_dir=)``), its failing steps re-executed on a model built
here, and where two run logs part ways (:func:`vinlens.health.compare_runs`)."""

from __future__ import annotations

import argparse
import json
import math
import warnings
from typing import TYPE_CHECKING, Any

from vinlens.cli.arguments import non_negative_int
from vinlens.cli.store import add_storage_option_argument, parse_storage_options
from vinlens.cli.table import format_table

if TYPE_CHECKING:
    from vinlens.health import GradientOrigin

__all__ = [
    "DIFF_DESCRIPTION",
    "DIFF_HELP",
    "REPLAY_DESCRIPTION",
    "REPLAY_HELP",
    "SHOW_DESCRIPTION",
    "SHOW_HELP",
    "add_diff_arguments",
    "add_replay_arguments",
    "add_show_arguments",
    "diff",
    "replay",
    "show",
]

SHOW_HELP = "summarize a training run log"
SHOW_DESCRIPTION = (
    "Steps, sampled steps, ranks, the non-finite events (step, rank, module, parameters) and"
    " the modules with the largest gradient norms of a run log written by"
    " TrainingMonitor(log_dir=...), local or on object storage, finished or still growing."
)
_TOP = 10
#: What a user can fix about the arguments or the log: one line and exit status 2.
_USER_ERRORS = (OSError, ValueError, TypeError, ImportError)


def _refuse(command: str, args: argparse.Namespace, error: Exception) -> int:
    """One line naming what is wrong and exit status 2 (``--debug``: the traceback)."""
    if getattr(args, "debug", False):
        raise error
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    print(f"vinlens run {command}: {'; '.join(lines) or type(error).__name__}")
    return 2


def _open(args: argparse.Namespace) -> Any:
    from vinlens.health import open_run

    options = parse_storage_options(args.storage_options)
    with warnings.catch_warnings():
        # The damage is printed with the report; a warning line would say it twice.
        warnings.simplefilter("ignore", RuntimeWarning)
        return open_run(args.log_dir, storage_options=options, run_id=args.run_id)


def _bounds(steps: range | None) -> list[int] | None:
    """``[first, last]`` of the steps missing, ``[]`` for none, None when not known."""
    return None if steps is None else [steps[0], steps[-1]] if steps else []


def _add_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log_dir", metavar="LOG_DIR", help="run directory or URL (s3://, ...)")
    parser.add_argument(
        "--run-id",
        metavar="ID",
        help="the run to read when the directory holds several (default: the latest)",
    )


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    _add_log_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_storage_option_argument(parser)


def show(args: argparse.Namespace) -> int:
    try:
        return _show(args)
    except BrokenPipeError:
        raise  # the reader of stdout left: main() ends quietly
    except _USER_ERRORS as error:
        return _refuse("show", args, error)


def _show(args: argparse.Namespace) -> int:
    run = _open(args)
    report = _show_report(args, run)
    if args.json:
        print(json.dumps(report))
    else:
        _print_show(args, run, report)
    return 0


def _rank_rows(run: Any) -> list[dict[str, Any]]:
    """Per rank: its step counts and the modules with the largest gradient norms logged."""
    import numpy as np

    ranks: list[dict[str, Any]] = []
    for rank in run.ranks:
        series = run.step_series(rank)
        matrix = run.history_matrix("grad_norm", rank)
        with np.errstate(all="ignore"):
            peaks = [
                float(np.nanmax(row)) if np.isfinite(row).any() else math.nan
                for row in np.where(np.isfinite(matrix.values), matrix.values, np.nan)
            ]
        order = sorted(
            (i for i, p in enumerate(peaks) if math.isfinite(p)), key=lambda i: -peaks[i]
        )
        ranks.append(
            {
                "rank": rank,
                "steps": len(series.steps),
                "sampled_steps": len(matrix.steps),
                "top_grad_norm": [
                    {"module": matrix.module_paths[i], "max_grad_norm": peaks[i]}
                    for i in order[:_TOP]
                ],
            }
        )
    return ranks


def _show_report(args: argparse.Namespace, run: Any) -> dict[str, Any]:
    """What ``run show`` says of a run, as the JSON object ``--json`` prints."""
    events: list[dict[str, Any]] = [
        {
            "step": e.step,
            "rank": e.rank,
            "module": None if e.origin is None else e.origin.module_path,
            "parameters": [] if e.origin is None else list(e.origin.parameter_paths),
        }
        for e in run.events
    ]
    damaged = [
        {
            "rank": d.rank,
            "segment": d.segment,
            "offset": d.offset,
            "length": d.length,
            "record": d.record,
            "steps_missing": _bounds(d.steps),
        }
        for d in run.damaged
    ]
    runs = [
        {
            "run_id": r.run_id,
            "ranks": list(r.ranks),
            "first_step": r.first_step,
            "last_step": r.last_step,
        }
        for r in run.runs
    ]
    report = {"log_dir": str(args.log_dir), "run_id": run.run_id, "runs": runs}
    return report | {"ranks": _rank_rows(run), "events": events, "damaged": damaged}


def _print_show(args: argparse.Namespace, run: Any, report: dict[str, Any]) -> None:
    ranks, runs, events = report["ranks"], report["runs"], report["events"]
    print(
        f"run log {args.log_dir}: run {run.run_id}, ranks"
        f" {', '.join(str(r['rank']) for r in ranks)}"
    )
    if len(runs) > 1:
        print(f"the directory holds {len(runs)} runs (--run-id ID reads another):")
        print(
            format_table(
                ["run", "ranks", "first step", "last step"],
                [
                    [
                        str(r["run_id"]),
                        ", ".join(map(str, r["ranks"])),
                        str(r["first_step"]),
                        str(r["last_step"]),
                    ]
                    for r in runs
                ],
            )
        )
    if report["damaged"]:
        print(f"damaged records skipped: {len(report['damaged'])}")
        for d in run.damaged:
            print(f"  {d.describe()}")
    print(
        format_table(
            ["rank", "steps", "sampled steps"],
            [[str(r["rank"]), str(r["steps"]), str(r["sampled_steps"])] for r in ranks],
        )
    )
    print(f"non-finite events: {len(events)}")
    if events:
        print(
            format_table(
                ["step", "rank", "module", "parameters"],
                [
                    [str(e["step"]), str(e["rank"]), str(e["module"]), ", ".join(e["parameters"])]
                    for e in events
                ],
            )
        )
    for r in ranks:
        print(f"largest gradient norms (rank {r['rank']}):")
        print(
            format_table(
                ["module", "max grad norm"],
                [[t["module"], f"{t['max_grad_norm']:.4g}"] for t in r["top_grad_norm"]],
            )
        )


# --------------------------------------------------------------------------- replay

REPLAY_HELP = "re-execute a failing step of a run log on a model built from TARGET"
REPLAY_DESCRIPTION = (
    "Build TARGET (an nn.Module class or a function returning one, by dotted import path,"
    " with --arg KEY=VALUE constructor arguments), load the replay bundle of --step (of"
    " --rank) into it, re-execute the step's forward and backward and print the recorded"
    " and the recomputed origin of the non-finite gradients. Exit status 0 when they agree,"
    " 3 when the NaN does not reproduce, 4 when it reproduces at another origin, 2 for a"
    " log, step, rank or TARGET that is not there."
)
#: Exit status of ``vinlens run replay`` when the replayed step stays finite.
EXIT_NOT_REPRODUCED = 3
#: Exit status when the replayed step is non-finite at another origin than recorded.
EXIT_OTHER_ORIGIN = 4


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    _add_log_arguments(parser)
    parser.add_argument(
        "--step", type=non_negative_int, required=True, help="the step to replay (see run show)"
    )
    parser.add_argument(
        "--rank", type=non_negative_int, default=0, help="the rank that ran it (default 0)"
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="TARGET",
        help="nn.Module class or function returning one that builds the trained architecture,"
        " e.g. mypackage.models.build_model",
    )
    parser.add_argument(
        "--arg",
        action="append",
        metavar="KEY=VALUE",
        help="constructor keyword argument of TARGET (Python literal or string); repeatable",
    )
    parser.add_argument(
        "--eval",
        action="store_true",
        help="replay in eval mode (default: train mode, as the training step ran)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_storage_option_argument(parser)


def _origin_fields(origin: GradientOrigin | None) -> dict[str, Any] | None:
    if origin is None:
        return None
    return {
        "module": origin.module_path,
        "call_index": origin.call_index,
        "parameters": list(origin.parameter_paths),
        "entered_nonfinite": origin.entered_nonfinite,
        "in_forward": origin.forward_origin is not None,
    }


def _origin_line(fields: dict[str, Any] | None) -> str:
    if fields is None:
        return "none (the step's gradients stayed finite)"
    parameters = ", ".join(fields["parameters"]) or "none"
    where = " (in the forward)" if fields["in_forward"] else ""
    entered = " (already non-finite where it entered the model)" * fields["entered_nonfinite"]
    return (
        f"module {fields['module']!r}, call {fields['call_index']}{where}{entered},"
        f" parameters {parameters}"
    )


def _build(target: str, arguments: list[str] | None) -> Any:
    """The model of ``--model TARGET``; an error of its constructor names TARGET."""
    from vinlens.cli.model import build_model, parse_constructor_args

    try:
        return build_model(target, parse_constructor_args(arguments))
    except ValueError as error:
        if target in str(error):
            raise
        raise ValueError(f"--model {target}: {error}") from error
    except Exception as error:
        raise ValueError(
            f"--model {target}: building the model raised {type(error).__name__}: {error}"
            " (expected TARGET and --arg to construct the trained architecture)"
        ) from error


def replay(args: argparse.Namespace) -> int:
    try:
        run = _open(args)
        if args.rank not in run.ranks:
            raise ValueError(
                f"{args.log_dir!r} has no rank {args.rank}; its ranks are"
                f" {', '.join(map(str, run.ranks))}"
            )
        steps = run.replay_steps(args.rank)
        if args.step not in steps:
            known = ", ".join(map(str, steps)) or "none"
            events = [e.step for e in run.events if e.rank == args.rank]
            why = (
                "its event has no bundle (see run show)"
                if args.step in events
                else "no non-finite event at that step"
            )
            raise ValueError(
                f"{args.log_dir!r} rank {args.rank} has no replay bundle for step {args.step}"
                f" ({why}); steps with one: {known}"
            )
        model = _build(args.model, args.arg)
        model.train(not args.eval)
        loaded = run.load_replay(args.step, model=model, rank=args.rank)
    except _USER_ERRORS as error:
        return _refuse("replay", args, error)
    recomputed = loaded.run()
    recorded_fields, recomputed_fields = _origin_fields(loaded.origin), _origin_fields(recomputed)
    if recomputed_fields is None:
        code, verdict = EXIT_NOT_REPRODUCED, "the NaN does not reproduce"
    elif recorded_fields is not None and all(
        recorded_fields[k] == recomputed_fields[k] for k in ("module", "call_index", "parameters")
    ):
        code, verdict = 0, "the replay reproduces the recorded origin"
    else:
        code, verdict = EXIT_OTHER_ORIGIN, "the replay is non-finite at another origin"
    if args.json:
        payload = {
            "log_dir": str(args.log_dir),
            "step": loaded.step,
            "rank": args.rank,
            "state_restored": loaded.state_restored,
            "note": loaded.note,
            "recorded": recorded_fields,
            "recomputed": recomputed_fields,
            "agree": code == 0,
        }
        print(json.dumps(payload))
        return code
    print(f"run log {args.log_dir}: step {loaded.step}, rank {args.rank}, model {args.model}")
    if not loaded.state_restored:
        print(f"state: {loaded.note}")
    print(f"recorded:   {_origin_line(recorded_fields)}")
    print(f"recomputed: {_origin_line(recomputed_fields)}")
    print(verdict)
    return code


# --------------------------------------------------------------------------- diff

DIFF_HELP = "find the step, cause and module where two run logs part ways"
DIFF_DESCRIPTION = (
    "Compare two run logs written by TrainingMonitor(log_dir=...) that should be equal (same"
    " seed, a refactor, a torch upgrade, torch.compile, another machine) and print the first"
    " step at which anything logged differs, its cause (init, data, optimizer, forward,"
    " backward), the module that made the difference and the rank, then every module that"
    " diverged, in step order. Exit status 0 when the runs are identical, 1 when they"
    " diverge, 2 for a path that is not a run log or runs that cannot be compared."
)
#: Exit status of ``vinlens run diff`` when the runs diverge.
EXIT_DIVERGED = 1


def add_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log_a", metavar="A", help="run directory or URL (s3://, ...)")
    parser.add_argument("log_b", metavar="B", help="run directory or URL to compare with A")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (0: bitwise)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (0: bitwise)")
    parser.add_argument("--rank", type=non_negative_int, help="compare this rank only")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_storage_option_argument(parser)


def diff(args: argparse.Namespace) -> int:
    from vinlens.cli.table import print_json
    from vinlens.health import compare_runs

    options = parse_storage_options(args.storage_options)
    try:
        result = compare_runs(
            args.log_a,
            args.log_b,
            rtol=args.rtol,
            atol=args.atol,
            storage_options_a=options,
            storage_options_b=options,
            ranks=None if args.rank is None else (args.rank,),
        )
    except (FileNotFoundError, ValueError, TypeError) as error:
        print(f"vinlens run diff: {error}")
        return 2
    status = 0 if result.identical else EXIT_DIVERGED
    if args.json:
        print_json(result)
        return status
    print(f"compared {result.steps_compared} steps of ranks {', '.join(map(str, result.ranks))}")
    if result.identical:
        print("identical: nothing logged differs")
    else:
        print(
            f"first difference: step {result.first_step}, rank {result.rank}, cause"
            f" {result.cause}, module {result.module or '-'}"
        )
        print(f"  {result.field}: {result.value_a!r} (A) vs {result.value_b!r} (B)")
        diverged = [m for m in result.modules if {m.weights, m.outputs, m.grads} != {None}]
        # Step order; within a step, what a step starts from, computes, then leaves behind
        # (a module whose output differs before one whose gradient only inherited it).
        diverged.sort(
            key=lambda m: min(
                (s, kind) for kind, s in enumerate((m.weights, m.outputs, m.grads)) if s is not None
            )
        )
        print(
            format_table(
                ["module", "weights", "outputs", "grads"],
                [[m.path, m.weights, m.outputs, m.grads] for m in diverged],
            )
        )
    if result.unmatched:
        print(f"modules logged by one run only: {', '.join(result.unmatched)}")
    if result.note:
        print(f"note: {result.note}")
    return status
