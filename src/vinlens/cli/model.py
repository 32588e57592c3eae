"""``vinlens model [TARGET]``: the module table and a bounded capture of one real forward.

TARGET is the dotted import path of an ``nn.Module`` class (``torch.nn.Transformer``
by default; ``nn.X`` is short for ``torch.nn.X``) or of a function that returns a module
(``torchvision.models.resnet18``). It is constructed (called) with its defaults plus any
``--arg KEY=VALUE``, described with :func:`inspect_model`, then run
once on random input inside :func:`capture_model` with default limits, so a newcomer
sees both engines on a real model in one command. The model runs in eval mode unless
``--train`` is given, so dropout does not change what the capture shows.

torch and the engines are imported inside the functions: ``vinlens --help`` must not
pay for them.
"""

from __future__ import annotations

import argparse
import importlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vinlens.cli.arguments import non_negative_int, positive_int
from vinlens.cli.table import format_table

if TYPE_CHECKING:
    import torch
    from torch import nn

    from vinlens.model_inspection import ModelCapture, ModelMetadata, TensorSnapshot

__all__ = [
    "DEFAULT_TARGET",
    "DESCRIPTION",
    "HELP",
    "add_arguments",
    "build_model",
    "example_inputs",
    "format_capture_summary",
    "format_module_table",
    "parse_constructor_args",
    "run",
]

DEFAULT_TARGET = "torch.nn.Transformer"


# --------------------------------------------------------------------------- model and input


def _parse_value(text: str) -> Any:
    """``--arg`` values: Python literals where they parse (8, 0.1, True, None), else the string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_constructor_args(items: Sequence[str] | None) -> dict[str, Any]:
    """The constructor keyword arguments of repeated ``--arg KEY=VALUE`` options.

    Raises:
        ValueError: an item is not ``KEY=VALUE`` with a Python identifier as ``KEY``.
    """
    kwargs: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(
                f"--arg expects KEY=VALUE with a Python identifier as KEY, got {item!r}"
            )
        kwargs[key] = _parse_value(value)
    return kwargs


def _constructor_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = parse_constructor_args(args.arg)
    if args.batch_first:
        kwargs["batch_first"] = True
    if args.d_model is not None:
        kwargs["d_model"] = args.d_model
    return kwargs


def _resolve(target: str) -> object:
    """The object at ``package.module.Name``, with an error that says which part is missing."""
    module_name, _, name = target.rpartition(".")
    if not module_name or not name:
        raise ValueError(
            f"TARGET must be a dotted path such as torch.nn.Transformer, got {target!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r} for TARGET {target!r}: {error}") from error
    except RuntimeError as error:
        # A compiled extension built for another torch (e.g. a torchvision wheel for a CUDA
        # torch next to the CPU one) fails at import with "operator torchvision::nms does
        # not exist", which names neither package nor the mismatch.
        if "operator" not in str(error) or "does not exist" not in str(error):
            raise
        raise ValueError(
            f"cannot import {module_name!r} for TARGET {target!r}: {error}; "
            f"{_extension_mismatch(module_name)}"
        ) from error
    missing = object()
    obj = getattr(module, name, missing)
    if obj is missing:
        raise ValueError(
            f"TARGET {target!r} does not exist: module {module_name!r} has no name {name!r}"
        )
    return obj


def _extension_mismatch(module_name: str) -> str:
    """One sentence naming the package whose compiled ops do not match the installed torch."""
    from importlib import metadata

    import torch

    package = module_name.partition(".")[0]
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        version = "?"
    return (
        f"{package} {version} was built for another torch than the installed "
        f"torch {torch.__version__} (CPU or CUDA build, or release); install the {package} "
        f"release built for torch {torch.__version__} from the same index as torch"
    )


def _missing_arguments_hint(cls: object, kwargs: dict[str, Any]) -> str:
    """``; pass them with --arg ...`` for required constructor parameters not given."""
    import inspect

    try:
        parameters = inspect.signature(cls).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    missing = [
        p.name
        for p in parameters
        if p.kind in kinds and p.default is inspect.Parameter.empty and p.name not in kwargs
    ]
    if not missing:
        return ""
    example = " ".join(f"--arg {name}=VALUE" for name in missing)
    return f"; pass them with --arg, e.g. {example}"


def _declared_return(fn: object) -> object:
    """The resolved return annotation of ``fn``, or None when it has none or it won't resolve."""
    import typing

    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:  # an unresolvable annotation says nothing either way
        return None


def build_model(target: str, kwargs: dict[str, Any]) -> nn.Module:
    """Import ``target`` and build the model with ``kwargs``.

    ``target`` is ``package.module.Name`` of an ``nn.Module`` class, or of a function that
    returns a module (a factory such as ``torchvision.models.resnet18``).
    """
    from torch import nn

    if target.startswith("nn."):
        target = "torch." + target
    obj = _resolve(target)
    if isinstance(obj, type):
        if not issubclass(obj, nn.Module):
            raise ValueError(
                f"TARGET {target!r} exists but is a class {obj.__qualname__}, not an nn.Module "
                "class or a function returning a module"
            )
    elif callable(obj):
        declared = _declared_return(obj)
        if isinstance(declared, type) and not issubclass(declared, nn.Module):
            raise ValueError(
                f"TARGET {target!r} exists but is a function returning {declared.__qualname__}, "
                "not an nn.Module class or a function returning a module"
            )
    else:
        raise ValueError(
            f"TARGET {target!r} exists but is a {type(obj).__name__}, not an nn.Module class "
            "or a function returning a module"
        )
    import warnings

    try:
        with warnings.catch_warnings():
            # nn.Transformer() with its defaults advises batch_first on every construction;
            # that advice is about inference speed, not about this inspection.
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            model = obj(**kwargs)
    except TypeError as error:
        hint = _missing_arguments_hint(obj, kwargs)
        raise ValueError(f"cannot construct {target} with {kwargs}: {error}{hint}") from error
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"TARGET {target!r} returned a {type(model).__module__}.{type(model).__qualname__}, "
            "not an nn.Module"
        )
    return model


def _leaf_input(module: nn.Module, batch: int, seq_len: int) -> tuple[torch.Tensor, ...] | None:
    """Random input for the layer kinds whose constructor fixes the input shape."""
    import torch
    from torch import nn

    batch_first = bool(getattr(module, "batch_first", False))

    def sequence(width: int, length: int = seq_len) -> torch.Tensor:
        shape = (batch, length, width) if batch_first else (length, batch, width)
        return torch.randn(shape)

    if isinstance(module, nn.Transformer):
        return sequence(module.d_model), sequence(module.d_model, max(1, seq_len - 1))
    if isinstance(module, nn.TransformerEncoder):
        first = module.layers[0]
        batch_first = bool(first.self_attn.batch_first)
        return (sequence(first.self_attn.embed_dim),)
    if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        batch_first = bool(module.self_attn.batch_first)
        width = module.self_attn.embed_dim
        if isinstance(module, nn.TransformerDecoderLayer):
            return sequence(width), sequence(width)
        return (sequence(width),)
    if isinstance(module, nn.TransformerDecoder):
        first = module.layers[0]
        batch_first = bool(first.self_attn.batch_first)
        width = first.self_attn.embed_dim
        return sequence(width), sequence(width)
    if isinstance(module, nn.MultiheadAttention):
        query = sequence(module.embed_dim)
        return query, query, query
    if isinstance(module, nn.RNNBase):
        return (sequence(module.input_size),)
    if isinstance(module, nn.Embedding):
        return (torch.randint(0, module.num_embeddings, (batch, seq_len)),)
    if isinstance(module, nn.Linear):
        return (torch.randn(batch, module.in_features),)
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        spatial = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[type(module)]
        return (torch.randn(batch, module.in_channels, *([32] * spatial)),)
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
        spatial = {nn.BatchNorm1d: 1, nn.BatchNorm2d: 2, nn.BatchNorm3d: 3}[type(module)]
        return (torch.randn(batch, module.num_features, *([8] * spatial)),)
    return None


def example_inputs(
    model: nn.Module, *, batch: int = 2, seq_len: int = 10, input_shape: Sequence[int] | None = None
) -> tuple[torch.Tensor, ...]:
    """Random positional inputs of the right shape for ``model``.

    Known layer kinds (transformers, attention, RNNs, embeddings, linear and conv
    layers) fix their input shape; for containers the first such submodule in
    registration order decides. ``input_shape`` overrides all of that.
    """
    import torch

    if input_shape is not None:
        return (torch.randn(*input_shape),)
    for _, module in model.named_modules():
        inputs = _leaf_input(module, batch, seq_len)
        if inputs is not None:
            return inputs
    raise ValueError(
        f"cannot infer an input shape for {type(model).__qualname__}; pass --input-shape, "
        "e.g. --input-shape 2,3,64,64"
    )


# --------------------------------------------------------------------------- rendering


def _short_type(qualified: str) -> str:
    return qualified.rpartition(".")[2]


def format_module_table(metadata: ModelMetadata, limit: int | None) -> str:
    """The module table as aligned text, truncated to ``limit`` rows with a count."""
    header = (
        f"{metadata.model_type}: {metadata.total_parameters:,} parameters "
        f"({metadata.trainable_parameters:,} trainable), {len(metadata.modules):,} modules"
    )
    shown = metadata.modules if limit is None else metadata.modules[:limit]
    rows = [
        [
            row.path,
            _short_type(row.module_type),
            row.direct_parameters,
            row.trainable_parameters,
            row.direct_buffers,
            "train" if row.training else "eval",
        ]
        for row in shown
    ]
    lines = [header, ""]
    lines.append(format_table(["path", "type", "params", "trainable", "buffers", "mode"], rows))
    hidden = len(metadata.modules) - len(shown)
    if hidden:
        lines.append(f"... {hidden:,} more modules (use --all to list every module)")
    return "\n".join(lines)


def _format_value(value: bool | int | float) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _preview(snapshot: TensorSnapshot, count: int = 4) -> str:
    if snapshot.sample_omission_reason is not None:
        return f"({snapshot.sample_omission_reason})"
    shown = ", ".join(_format_value(v) for v in snapshot.values[:count])
    more = ", ..." if len(snapshot.values) > count else ""
    return f"[{shown}{more}]"


def format_capture_summary(
    capture: ModelCapture,
    inputs: Sequence[torch.Tensor],
    snapshot_rows: int,
    *,
    training: bool = False,
) -> str:
    """A bounded summary: mode and quota use, then the first ``snapshot_rows`` snapshots."""
    limits = capture.limits
    snapshots = capture.snapshots
    shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in inputs)
    mode = (
        "train mode (dropout active; from --train)"
        if training
        else "eval mode (dropout off; --train to capture in train mode)"
    )
    lines = [
        f"Capture of one forward on random input {shapes} (default limits), {mode}:",
        f"  snapshots {len(snapshots)}/{limits.max_tensors}, "
        f"sampled bytes {capture.sampled_bytes:,}/{limits.max_bytes:,}, "
        f"modules seen {len({s.module_path for s in snapshots})}",
        "",
    ]
    rows = [
        [
            s.module_path,
            s.call_index,
            s.direction,
            s.tensor_path,
            "x".join(str(d) for d in s.shape) or "scalar",
            s.dtype.removeprefix("torch."),
            _preview(s),
        ]
        for s in snapshots[:snapshot_rows]
    ]
    lines.append(
        format_table(["module", "call", "side", "tensor", "shape", "dtype", "values"], rows)
    )
    hidden = len(snapshots) - len(rows)
    if hidden:
        lines.append(f"... {hidden:,} more snapshots (use --snapshots N or --json)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command


def run(args: argparse.Namespace) -> int:
    """Construct, describe and (unless ``--no-capture``) capture one forward of TARGET."""
    import torch

    from vinlens.model_inspection import CaptureLimits, capture_model, inspect_model

    torch.manual_seed(args.seed)
    model = build_model(args.target, _constructor_kwargs(args))
    model.train(args.train)
    metadata = inspect_model(model)
    limit = None if args.all or args.json else args.limit

    capture: ModelCapture | None = None
    inputs: tuple[torch.Tensor, ...] = ()
    if not args.no_capture:
        inputs = example_inputs(
            model, batch=args.batch, seq_len=args.seq_len, input_shape=args.input_shape
        )
        capture = capture_model(model, limits=CaptureLimits())
        with torch.no_grad(), capture:
            model(*inputs)

    if args.json:
        import dataclasses
        import json

        payload: dict[str, Any] = {"model": dataclasses.asdict(metadata)}
        if capture is not None:
            payload["capture"] = {
                "mode": "train" if args.train else "eval",
                "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype)} for t in inputs],
                "limits": dataclasses.asdict(capture.limits),
                "sampled_bytes": capture.sampled_bytes,
                "snapshots": [dataclasses.asdict(s) for s in capture.snapshots],
            }
        print(json.dumps(payload, indent=1))
        return 0
    print(format_module_table(metadata, limit))
    if capture is not None:
        print()
        print(format_capture_summary(capture, inputs, args.snapshots, training=args.train))
    return 0


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 2,3,64,64, got {text!r}") from None
    if not shape or any(size <= 0 for size in shape):
        raise argparse.ArgumentTypeError(f"expected positive sizes like 2,3,64,64, got {text!r}")
    return shape


HELP = "module table and bounded capture summary of a constructed model"
DESCRIPTION = (
    "Construct TARGET (an nn.Module class or a function returning one, by dotted import "
    "path) with its defaults, "
    "print its module table, then run one forward on random input inside a bounded "
    "capture and summarise the tensors it sampled. The model runs in eval mode "
    "unless --train is given."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vinlens model``."""
    parser.add_argument(
        "target",
        nargs="?",
        default=DEFAULT_TARGET,
        metavar="TARGET",
        help="nn.Module class to construct or function returning one, e.g. torch.nn.Transformer "
        f"or torchvision.models.resnet18 (default {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--arg",
        action="append",
        metavar="KEY=VALUE",
        help="constructor keyword argument (Python literal or string); repeatable",
    )
    parser.add_argument("--batch-first", action="store_true", help="pass batch_first=True")
    parser.add_argument("--d-model", type=int, help="pass d_model=N (transformers)")
    parser.add_argument(
        "--batch", type=positive_int, default=2, help="batch size of the random input (default 2)"
    )
    parser.add_argument(
        "--seq-len",
        type=positive_int,
        default=10,
        help="sequence length of the random input (default 10)",
    )
    parser.add_argument(
        "--input-shape", type=_shape, help="shape of one random float input, e.g. 2,3,64,64"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--limit", type=non_negative_int, default=40, help="module rows to print (default 40)"
    )
    parser.add_argument("--all", action="store_true", help="print every module row")
    parser.add_argument(
        "--snapshots", type=non_negative_int, default=12, help="snapshot rows to print (default 12)"
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="capture in train mode (dropout active, batch norm updates its statistics)",
    )
    parser.add_argument("--no-capture", action="store_true", help="skip the forward and capture")
    parser.add_argument("--json", action="store_true", help="print everything as JSON")
