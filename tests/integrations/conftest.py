"""The framework adapters' tests run with torchvision hidden (see ``framework_shim``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from framework_shim import torchvision_hidden


@pytest.fixture(scope="module", autouse=True)
def hidden_torchvision() -> Iterator[None]:
    """torchvision looks absent from the first fixture of a module to its last test."""
    with torchvision_hidden():
        yield
