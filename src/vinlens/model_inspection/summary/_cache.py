"""Per-forward memos of tensor statistics, so a tensor seen by several hooks is read once.

:class:`SummaryCache` keeps moments and is shared by capture and health;
:class:`FiniteCache` keeps whether a tensor is all finite (the gradient and origin
checks).
"""

from __future__ import annotations

import contextlib
import math
import weakref

import torch

from vinlens.model_inspection.summary._blocks import unexpanded
from vinlens.model_inspection.summary._moments import SummaryAccumulator, TensorSummary


class _TensorMemo:
    """Values computed from tensors seen during a forward, keyed by identity and version.

    The output of one module is usually the input of the next, and a container's
    output is its last child's: each is reduced once. A tensor modified in place
    gets a new version and is reduced again; an entry whose tensor was freed is
    never reused (its weak reference is dead). Inference tensors have no version
    counter and are never cached.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[torch.Tensor], int, object]] = {}

    def _get(self, tensor: torch.Tensor) -> object | None:
        if tensor.is_inference():
            return None
        entry = self._entries.get(id(tensor))
        if entry is not None and entry[0]() is tensor and entry[1] == tensor._version:
            return entry[2]
        return None

    def _put(self, tensor: torch.Tensor, value: object) -> None:
        if tensor.is_inference():
            return
        if len(self._entries) >= 4096:
            self._entries = {k: e for k, e in self._entries.items() if e[0]() is not None}
        # Tensor subclasses without weak references are simply not cached.
        with contextlib.suppress(TypeError):
            self._entries[id(tensor)] = (weakref.ref(tensor), tensor._version, value)


class SummaryCache(_TensorMemo):
    """Moments of the tensors seen during a forward (see :class:`_TensorMemo`); shared by
    capture and health so that a tensor seen by several hooks is reduced once."""

    def get(self, tensor: torch.Tensor) -> SummaryAccumulator | None:
        """The cached moments of ``tensor`` (do not modify them), or None."""
        cached = self._get(tensor)
        return cached if isinstance(cached, SummaryAccumulator) else None

    def moments(self, tensor: torch.Tensor) -> SummaryAccumulator:
        """The moments of ``tensor``, reduced now unless cached (do not modify them)."""
        inference = tensor.is_inference()
        if not inference:  # get, inlined: this runs for every module output
            entry = self._entries.get(id(tensor))
            if entry is not None and entry[0]() is tensor and entry[1] == tensor._version:
                cached = entry[2]
                if isinstance(cached, SummaryAccumulator):
                    return cached
        moments = SummaryAccumulator().update(tensor)
        if not inference:
            self._put(tensor, moments)
        return moments

    def summary(self, tensor: torch.Tensor) -> TensorSummary:
        """The summary of ``tensor`` (its moments, reduced now unless cached)."""
        return self.moments(tensor).finish()


class FiniteCache(_TensorMemo):
    """Whether the tensors seen during a forward hold only finite values (one pass each).

    A NaN or an infinity makes the sum non-finite, so a finite sum proves the
    tensor finite with one reduction and one scalar read; only a non-finite sum
    (a NaN, an infinity, or finite values whose sum overflows) costs the exact
    check of the extremes, which propagate NaN and infinities.
    """

    def finite(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` holds no NaN or infinity (checked now unless cached)."""
        inference = tensor.is_inference()
        if not inference:  # _get, inlined: this runs for every input and output
            entry = self._entries.get(id(tensor))
            if entry is not None and entry[0]() is tensor and entry[1] == tensor._version:
                return entry[2] is True
        source = unexpanded(tensor.detach())[0]
        if source.numel() == 0 or math.isfinite(source.sum().item()):
            result = True
        else:
            low, high = source.amin().item(), source.amax().item()
            result = math.isfinite(low) and math.isfinite(high)
        if not inference:
            self._put(tensor, result)
        return result
