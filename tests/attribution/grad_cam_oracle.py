"""pytorch-grad-cam as an independent oracle, importable with the CPU build of torch.

grad-cam imports ``torchvision.transforms`` at module level for its image helpers, and the
torchvision wheel that matches torch 2.13.0 on PyPI is a CUDA build whose compiled ops fail
to register against the CPU torch wheel, so ``import torchvision`` raises. The CAM
computation itself (``BaseCAM``, ``GradCAM``, ``GradCAMPlusPlus``, ``ActivationsAndGradients``,
``scale_cam_image``) never calls torchvision, so the import is satisfied with inert modules
for exactly the names grad-cam imports, and only while grad-cam itself is being imported.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import pytest


def _inert_torchvision() -> dict[str, types.ModuleType]:
    torchvision = types.ModuleType("torchvision")
    transforms = types.ModuleType("torchvision.transforms")
    functional = types.ModuleType("torchvision.transforms.functional")

    def _unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("torchvision is not usable with the CPU torch build in this test")

    for name in ("Compose", "Normalize", "ToTensor"):
        setattr(transforms, name, _unavailable)
    functional.resize = _unavailable  # type: ignore[attr-defined]
    transforms.functional = functional  # type: ignore[attr-defined]
    torchvision.transforms = transforms  # type: ignore[attr-defined]
    return {
        "torchvision": torchvision,
        "torchvision.transforms": transforms,
        "torchvision.transforms.functional": functional,
    }


def import_pytorch_grad_cam() -> Any:
    """Return the ``pytorch_grad_cam`` package, or skip when grad-cam is not installed."""
    if "pytorch_grad_cam" in sys.modules:
        return sys.modules["pytorch_grad_cam"]
    try:
        import torchvision  # noqa: F401
    except Exception:
        saved = {name: sys.modules.get(name) for name in _inert_torchvision()}
        sys.modules.update(_inert_torchvision())
        try:
            module = _import_or_skip()
        finally:
            for name, previous in saved.items():
                if previous is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = previous
        return module
    return _import_or_skip()


def _import_or_skip() -> Any:
    try:
        return importlib.import_module("pytorch_grad_cam")
    except ImportError as exc:  # pragma: no cover - grad-cam is a dev extra
        pytest.skip(f"grad-cam (dev extra) not importable: {exc}")
