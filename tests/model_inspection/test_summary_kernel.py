"""The compiled one-pass CPU sums (numba, the ``fast`` extra) and their torch fallback.

Both paths must give the same count, extremes and zeros and float64 sums within the
documented bound (each errs by at most ``gamma_k * sum(|x|)``, Higham 3.1, so they differ by
at most twice that), and the path is decided once per process.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vinlens.model_inspection import summarize_tensor
from vinlens.model_inspection.summary import _blocks, _cpu

pytest.importorskip("numba")

U = 2.0**-53


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


class Spy:
    """The process's compiled kernel, counting the values it is called on."""

    def __init__(self, kernel: Callable[[np.ndarray], tuple[float, float, int]]) -> None:
        self.kernel = kernel
        self.calls: list[int] = []

    def __call__(self, values: np.ndarray) -> tuple[float, float, int]:
        self.calls.append(int(values.size))
        return self.kernel(values)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    kernel = _cpu._moments_kernel()
    assert kernel is not None, "numba is installed: the compiled kernel must load"
    watched = Spy(kernel)
    monkeypatch.setattr(_cpu, "_moments_kernel", lambda: watched)
    return watched


def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cpu, "_moments_kernel", lambda: None)


def exact(tensor: torch.Tensor) -> tuple[int, float, float, float, int]:
    """Count, min, max, sum(|x|) and zeros of a finite tensor, from a float64 copy."""
    wide = tensor.detach().to(torch.float64).reshape(-1)
    return (
        wide.numel(),
        float(wide.min()),
        float(wide.max()),
        float(wide.abs().sum()),
        int((wide == 0).sum()),
    )


DENSE: dict[str, Callable[[], torch.Tensor]] = {
    "contiguous": lambda: torch.randn(4, 16, 32, 32) * 3 + 1,
    "relu": lambda: torch.relu(torch.randn(4, 24, 32, 32)),
    "float64": lambda: torch.randn(3, 1000, dtype=torch.float64) - 5,
    "channels_last": lambda: (
        torch.randn(4, 8, 20, 20).relu().contiguous(memory_format=torch.channels_last)
    ),
    "permuted": lambda: torch.randn(40, 30, 7).permute(2, 0, 1),
    "odd-size": lambda: torch.randn(1001),
    "inference": lambda: _inference(lambda: torch.randn(300) * 2),
}


def _inference(make: Callable[[], torch.Tensor]) -> torch.Tensor:
    with torch.inference_mode():
        return make()


@pytest.mark.parametrize("case", sorted(DENSE))
def test_dense_tensors_take_one_compiled_pass(case: str, spy: Spy) -> None:
    tensor = DENSE[case]()
    summary = summarize_tensor(tensor)
    assert spy.calls == [tensor.numel()]
    n, low, high, _, zeros = exact(tensor)
    assert (summary.count, summary.min, summary.max) == (n, low, high)
    assert summary.zero_fraction == zeros / n
    wide = tensor.detach().to(torch.float64)
    assert summary.mean == pytest.approx(float(wide.mean()), rel=1e-12, abs=1e-12)
    assert summary.std == pytest.approx(float(wide.std(correction=0)), rel=1e-10)


@pytest.mark.parametrize("case", sorted(DENSE))
def test_both_paths_agree_within_the_documented_bound(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor = DENSE[case]()
    base = tensor.detach()
    compiled = _cpu.cpu_moments(base)
    torch_path(monkeypatch)
    fallback = _cpu.cpu_moments(base)
    assert compiled is not None and fallback is not None
    n, low, high, abs_sum, zeros = exact(tensor)
    # Extremes and zeros are exact on both paths.
    assert compiled[2:] == fallback[2:] == (low, high, zeros)
    # Each float64 sum of k terms errs by at most gamma_k * sum(|terms|) (a product adds
    # one rounding), so the two paths differ by at most twice that.
    squares = float((tensor.detach().to(torch.float64) ** 2).sum())
    assert abs(compiled[0] - fallback[0]) <= 2 * gamma(n) * abs_sum
    assert abs(compiled[1] - fallback[1]) <= 2 * gamma(n + 1) * squares
    assert summarize_tensor(tensor).count == n


def test_a_large_tensor_is_read_one_block_at_a_time(
    spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_blocks, "BLOCK_ELEMENTS", 1000)
    tensor = torch.randn(2, 1250) + 0.5
    summary = summarize_tensor(tensor)
    assert spy.calls == [1000, 1000, 500]
    wide = tensor.double()
    assert summary.mean == pytest.approx(float(wide.mean()), rel=1e-12)
    assert summary.std == pytest.approx(float(wide.std(correction=0)), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeros_of_both_signs_are_counted(dtype: torch.dtype, spy: Spy) -> None:
    # hardswish(x) is -0.0 for x <= -3, relu gives +0.0.
    x = torch.randn(5000, dtype=dtype) * 4
    tensor = torch.cat([F.hardswish(x), torch.relu(x), torch.tensor([-0.0, 0.0], dtype=dtype)])
    negative = int((torch.signbit(tensor) & (tensor == 0)).sum())
    assert negative > 100
    summary = summarize_tensor(tensor)
    assert spy.calls == [tensor.numel()]
    assert summary.zero_fraction == int((tensor == 0).sum()) / tensor.numel()


def test_a_channels_last_tensor_is_read_in_memory_order_without_a_copy() -> None:
    tensor = torch.randn(2, 6, 5, 7).contiguous(memory_format=torch.channels_last)
    assert not tensor.is_contiguous()
    flat = _cpu._memory_order(tensor)
    assert flat is not None and flat.numel() == tensor.numel()
    assert flat.numpy().ctypes.data == tensor.data_ptr()
    assert sorted(flat.tolist()) == sorted(tensor.reshape(-1).tolist())


def test_an_unaligned_storage_keeps_the_torch_path(spy: Spy) -> None:
    # float32 values starting one byte into a buffer: numpy would see an unaligned array.
    tensor = torch.frombuffer(bytearray(4 * 64 + 1), dtype=torch.float32, offset=1)
    tensor.copy_(torch.randn(64))
    assert tensor.data_ptr() % 4 != 0
    assert _cpu._memory_order(tensor) is None
    summary = summarize_tensor(tensor)
    assert spy.calls == []
    assert summary.mean == pytest.approx(float(tensor.double().mean()), rel=1e-12)


THE_TORCH_PATH: dict[str, Callable[[], torch.Tensor]] = {
    "sliced": lambda: torch.randn(40, 30)[:, ::3],
    "overlapping": lambda: torch.randn(20).as_strided((5, 4), (2, 1)),
    "negative-view": lambda: torch._neg_view(torch.randn(50)),
    "subclass": lambda: torch.randn(50).as_subclass(_Marked),
}


class _Marked(torch.Tensor):
    pass


@pytest.mark.parametrize("case", sorted(THE_TORCH_PATH))
def test_tensors_numpy_cannot_read_densely_keep_the_torch_path(case: str, spy: Spy) -> None:
    tensor = THE_TORCH_PATH[case]()
    assert _cpu._memory_order(tensor.detach()) is None
    summary = summarize_tensor(tensor)
    assert spy.calls == []
    wide = torch.as_tensor(tensor.detach().resolve_neg(), dtype=torch.float64).clone()
    assert summary.count == wide.numel()
    assert (summary.min, summary.max) == (float(wide.min()), float(wide.max()))
    assert summary.mean == pytest.approx(float(wide.mean()), rel=1e-12, abs=1e-15)
    assert summary.std == pytest.approx(float(wide.std(correction=0)), rel=1e-12)


def test_nonfinite_values_and_overflowing_sums_go_blockwise(
    spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = torch.randn(100)
    planted[7] = math.nan
    planted[9] = -math.inf
    huge = torch.tensor([1.5e308, 1.7e308, -1e300], dtype=torch.float64)
    got = [summarize_tensor(planted), summarize_tensor(huge)]
    # The NaN stops at aminmax; the float64 sum of the huge values overflows in the kernel.
    assert spy.calls == [3]
    assert got[0].nan_count == 1 and got[0].neginf_count == 1
    torch_path(monkeypatch)
    assert got == [summarize_tensor(planted), summarize_tensor(huge)]


def test_without_numba_the_torch_path_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loader as a process without numba runs it: the kernel module cannot be imported.
    monkeypatch.setitem(sys.modules, "vinlens.model_inspection.summary._kernel", None)
    monkeypatch.setattr(_cpu, "_KERNEL_LOADED", False)
    monkeypatch.setattr(_cpu, "_KERNELS", None)
    assert _cpu._moments_kernel() is None
    sums: list[int] = []
    block_sums = _cpu._block_sums

    def counted(*args: Any, **kwargs: Any) -> Any:
        sums.append(1)
        return block_sums(*args, **kwargs)

    monkeypatch.setattr(_cpu, "_block_sums", counted)
    tensor = torch.relu(torch.randn(64, 33))
    summary = summarize_tensor(tensor)
    assert sums == [1]
    wide = tensor.double()
    assert summary.mean == pytest.approx(float(wide.mean()), rel=1e-12)
    assert summary.zero_fraction == float((wide == 0).double().mean())


def test_a_kernel_that_fails_to_load_warns_and_keeps_the_torch_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(name: str) -> Any:
        raise RuntimeError("no locator available for the cache")

    monkeypatch.setattr(_cpu.importlib, "import_module", fail)
    monkeypatch.setattr(_cpu, "_KERNEL_LOADED", False)
    monkeypatch.setattr(_cpu, "_KERNELS", None)
    with pytest.warns(RuntimeWarning, match="no locator available"):
        assert _cpu._moments_kernel() is None
    tensor = torch.randn(100)
    assert summarize_tensor(tensor).mean == pytest.approx(float(tensor.double().mean()))


def test_the_path_is_decided_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _cpu._moments_kernel()
    assert kernel is not None
    # Loaded once: later calls neither import again nor change their answer.
    monkeypatch.setitem(sys.modules, "vinlens.model_inspection.summary._kernel", None)
    assert _cpu._moments_kernel() is kernel
    tensor = torch.randn(8, 3000) * 2 + 1
    assert summarize_tensor(tensor) == summarize_tensor(tensor)


def test_threads_summarizing_first_together_load_the_kernel_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    imported: list[str] = []
    real = _cpu.importlib.import_module
    release = threading.Event()

    def slow(name: str) -> Any:
        imported.append(name)
        release.wait(timeout=30)  # the second thread arrives while this one loads
        return real(name)

    monkeypatch.setattr(_cpu.importlib, "import_module", slow)
    monkeypatch.setattr(_cpu, "_KERNEL_LOADED", False)
    monkeypatch.setattr(_cpu, "_KERNELS", None)
    got: list[object] = []
    threads = [
        threading.Thread(target=lambda: got.append(_cpu._moments_kernel())) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    # Without the loader's lock the second thread would import too while the first waits;
    # with it, the outcome does not depend on this pause.
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(timeout=60)
    assert len(imported) == 1
    assert len(got) == 2 and got[0] is got[1] is not None
