"""CPU summaries widen float32 into one float64 buffer per thread, not a fresh one per tensor.

The buffer belongs to the torch path (numba absent, or a tensor the compiled pass does not
read); these tests take that path whether or not numba is installed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vinlens.model_inspection import summarize_tensor
from vinlens.model_inspection.summary import _blocks, _cpu


class Allocated(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Elements of every float64 tensor an allocating aten op returns."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.float64: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        if name.startswith("aten::empty") and getattr(out, "dtype", None) == torch.float64:
            self.float64.append(out.numel())
        return out


@pytest.fixture(autouse=True)
def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cpu, "_moments_kernel", lambda: None)


def test_a_second_summary_reuses_the_float64_buffer() -> None:
    first = torch.randn(64, 100)
    second = torch.randn(32, 200).relu()
    summarize_tensor(first)  # this thread's buffer now holds 6,400 values
    mode = Allocated()
    with mode:
        got = summarize_tensor(second)
    assert mode.float64 == []
    wide = second.double()
    assert got.mean == float(wide.mean())
    assert got.zero_fraction == float((wide == 0).double().mean())


def test_threads_have_their_own_buffers() -> None:
    buffers: dict[str, Any] = {}

    def work(name: str) -> None:
        summarize_tensor(torch.randn(5000))
        buffers[name] = _cpu._SCRATCH.buffer

    threads = [threading.Thread(target=work, args=(str(i),)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert buffers["0"].data_ptr() != buffers["1"].data_ptr()
    assert all(b.numel() <= _blocks.BLOCK_ELEMENTS for b in buffers.values())
