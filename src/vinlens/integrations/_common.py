"""What the framework adapters share: the missing-extra error and the monitor's arguments."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from vinlens.health import TrainingMonitor


def missing_extra(module: str, framework: str, extra: str, error: ImportError) -> ImportError:
    """The error an adapter module raises when its framework is not installed."""
    return ImportError(
        f"{module} needs {framework}, which is not installed ({error}); install the extra: "
        f"pip install 'vinlens[{extra}]'"
    )


def not_found(error: ModuleNotFoundError, *names: str) -> bool:
    """Whether ``error`` says that one of the top-level packages ``names`` is absent (not
    that one of its own dependencies is)."""
    return error.name in names


def check_monitor_kwargs(adapter: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` as :class:`TrainingMonitor` takes them, the model excepted (the adapter
    passes the framework's model); a misspelled name fails here, not when training starts."""
    if "model" in kwargs:
        raise TypeError(
            f"{adapter}: the callback monitors the model the trainer trains; pass "
            "TrainingMonitor's other arguments (every=, on_nonfinite=, log_dir=, ...), not model="
        )
    parameters = inspect.signature(TrainingMonitor).parameters
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        accepted = ", ".join(name for name in parameters if name != "model")
        raise TypeError(
            f"{adapter}: unknown TrainingMonitor argument(s) {', '.join(unknown)}; "
            f"it takes {accepted}"
        )
    return dict(kwargs)


def unbuilt(adapter: str, hook: str) -> RuntimeError:
    return RuntimeError(
        f"{adapter}.monitor is built when training starts ({hook}), once the model is known; "
        "read it after fit/train has begun"
    )


def loss_of(output: object) -> Any:
    """The loss tensor in a training step's output (a tensor, or a mapping's ``"loss"``), or None."""
    if isinstance(output, Mapping):
        output = output.get("loss")
    return output if hasattr(output, "backward") else None


def with_scaler(kwargs: Mapping[str, Any], owner: object) -> dict[str, Any]:
    """``kwargs`` with ``scaler=`` the framework's enabled ``GradScaler`` (``owner.scaler``:
    Lightning's precision plugin, accelerate's ``Accelerator``) unless one was given, so
    that the steps the scaler skips are expected, not raised for."""
    found = dict(kwargs)
    scaler = getattr(owner, "scaler", None)
    if "scaler" not in found and isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled():
        found["scaler"] = scaler
    return found
