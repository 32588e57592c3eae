"""Lightning and the Hugging Face Trainer, importable beside a torchvision that is not.

Why: ``import lightning`` imports torchmetrics, and ``transformers.Trainer`` imports its
image utilities, and both import torchvision whenever it looks installed. The dev extras pin
``torchvision==0.28.0`` (for the grad-cam oracle), and the only 0.28.0 wheel on PyPI is a
CUDA build, whose compiled ops fail to register beside the CPU wheel of torch 2.13.0:
``import torchvision`` raises ``RuntimeError: operator torchvision::nms does not exist``
(``pip index versions torchvision`` offers no CPU build; download.pytorch.org, which has
one, is not reachable from CI). The adapters never use torchvision, so the tests make it
look *absent* rather than broken, always (the same environment everywhere, also where
torchvision would load), and only while the integration tests run:

* ``sys.modules["torchvision"] = None``: ``import torchvision`` raises
  ``ModuleNotFoundError`` and ``importlib.util.find_spec("torchvision")`` is None (the
  check transformers makes);
* ``importlib.metadata`` finds no ``torchvision`` distribution (torchmetrics'
  ``RequirementCache`` asks the package metadata first, then ``find_spec``).

On leaving, every ``torchvision*`` entry of ``sys.modules`` is put back as it was (the
grad-cam oracle tests swap in their own), and the metadata finds it again. Lightning,
torchmetrics and transformers stay imported, having seen no torchvision, which nothing else
in the suite imports.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HIDDEN = "torchvision"


def _is_hidden(distribution: importlib.metadata.Distribution) -> bool:
    path = getattr(distribution, "_path", None)  # PathDistribution: <name>-<version>.dist-info
    if isinstance(path, Path):
        name = path.name.split("-")[0]
    else:
        name = str(distribution.metadata["Name"] or "")
    return name.lower().replace("-", "_") == HIDDEN


@contextlib.contextmanager
def torchvision_hidden() -> Iterator[None]:
    saved = {
        name: module
        for name, module in sys.modules.items()
        if name == HIDDEN or name.startswith(HIDDEN + ".")
    }
    discover = importlib.metadata.Distribution.__dict__["discover"].__func__

    def visible(cls: Any, **kwargs: Any) -> Iterator[importlib.metadata.Distribution]:
        return (d for d in discover(cls, **kwargs) if not _is_hidden(d))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importlib.metadata.Distribution, "discover", classmethod(visible))
        for name in saved:
            del sys.modules[name]
        sys.modules[HIDDEN] = None  # type: ignore[assignment]
        try:
            yield
        finally:
            for name in [n for n in sys.modules if n == HIDDEN or n.startswith(HIDDEN + ".")]:
                del sys.modules[name]
            sys.modules.update(saved)
