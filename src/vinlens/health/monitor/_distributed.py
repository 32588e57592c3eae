"""Training health under ``torch.distributed``: DDP and FSDP2 (``fully_shard``).

A :class:`~vinlens.health.TrainingMonitor` on a distributed model works in one of two
modes, its ``ranks`` argument:

* ``"all"`` (the default for a ``DistributedDataParallel`` model or one whose parameters
  are DTensors, as ``fully_shard`` makes them, when more than one rank runs): every rank
  constructs a monitor and runs every step through it. The ranks agree at construction
  (through the process group's store, not a collective, so a rank that never constructs
  one is left alone: the others raise a clear error after :data:`HANDSHAKE_TIMEOUT_S`),
  then each step all-reduces one flag with the local verdict (and, for sharded
  parameters, their local squared norms), so every rank decides "non-finite" on the same
  steps and raises or records together. Each rank replays the step locally and one
  small all-reduce of a bitmask tells every rank which replays found an origin
  (:attr:`~vinlens.health.NonFiniteEvent.made_on_ranks`, the same on every rank).
* ``"local"`` (the default for any other model): this rank alone, no collective ever;
  monitoring on rank 0 only works, on a DDP model (its gradients are the same on every
  rank after the all-reduce, so rank 0 sees any rank's NaN; its replay finds an origin
  only when rank 0 made it). Refused for sharded parameters, whose check and replay
  need every rank.

The replay of a DDP step runs the wrapped module itself under ``no_sync()`` (no
gradient all-reduce, no buffer broadcast, no bucket rebuild): no collective, so a rank
replays alone and finds its own origin. A sharded (FSDP2) replay all-gathers parameters
like any FSDP forward, so there every rank replays (``"all"``).

Gradient norms of sharded parameters are those of the unsharded model: the local
shards' squared norms (``DTensor.to_local()``, divided by the number of ranks holding
each shard) summed by the step's one all-reduce.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Literal

import torch
from torch import nn

from vinlens.wrappers import root_wrappers

__all__ = ["HANDSHAKE_TIMEOUT_S", "RankSync"]

#: Seconds a rank waits at construction for the other ranks' monitors (``ranks="all"``).
HANDSHAKE_TIMEOUT_S = 60.0

Ranks = Literal["all", "local"]
_KEY = "vinlens/training_monitor"
_handshakes = 0  # collective monitors this process has agreed on (the store key's index)


def _ddps(model: nn.Module) -> list[nn.Module]:
    """The DDP wrappers around the model's root, also behind ``torch.compile``'s wrapper."""
    from torch.nn.parallel import DistributedDataParallel

    return [outer for outer in root_wrappers(model) if isinstance(outer, DistributedDataParallel)]


def _dtensor_type() -> type | None:
    """DTensor, or None when no DTensor can exist (its module was never imported)."""
    module = sys.modules.get("torch.distributed.tensor")
    found = getattr(module, "DTensor", None)
    return found if isinstance(found, type) else None


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class RankSync:
    """The distributed side of one :class:`~vinlens.health.TrainingMonitor`.

    Attributes:
        rank: This process's rank (0 without ``torch.distributed``).
        world_size: The number of ranks (1 without ``torch.distributed``).
        collective: Whether every rank runs this monitor's steps together (``"all"``
            on more than one rank): then the steps all-reduce their verdict.
        sharded: Whether some parameters are DTensors (FSDP2): then gradient norms are
            summed over the ranks' shards.
        per_parameter: Sharded, with shards held by different numbers of ranks, so a
            global norm needs each parameter's own norm.
    """

    def __init__(
        self,
        model: nn.Module,
        parameters: Sequence[nn.Parameter],
        ranks: Ranks | None,
    ) -> None:
        if ranks not in (None, "all", "local"):
            raise ValueError(f"ranks must be 'all', 'local' or None, got {ranks!r}")
        self.rank, self.world_size = _world()
        self._ddps = _ddps(model)
        dtensor = _dtensor_type()
        self.sharded = dtensor is not None and any(isinstance(p, dtensor) for p in parameters)
        distributed_model = bool(self._ddps) or self.sharded
        mode = ranks if ranks is not None else "all" if distributed_model else "local"
        self.collective = mode == "all" and self.world_size > 1
        if self.sharded and self.world_size > 1 and mode == "local":
            raise ValueError(
                "TrainingMonitor(ranks='local') cannot watch a model with sharded (DTensor, "
                "FSDP fully_shard) parameters: each rank holds a shard of every gradient "
                "and a replay all-gathers the parameters with every rank; construct a "
                "TrainingMonitor on every rank with ranks='all'"
            )
        # 1 / (ranks holding each parameter's shard): its local squared norm's weight in
        # the all-reduced sum. A plain parameter is the same on every rank.
        self._weights: list[float] = []
        self.watch(parameters)
        self._device = torch.device("cpu")
        if self.collective:
            import torch.distributed as dist

            if "nccl" in str(dist.get_backend()):
                self._device = torch.device("cuda", torch.cuda.current_device())
            self._handshake(len(parameters))

    def watch(self, parameters: Sequence[nn.Parameter]) -> None:
        """The monitor's parameters (again when they changed): their shards' weights."""
        dtensor = _dtensor_type()
        self._weights = [self._weight(p, dtensor) for p in parameters] if self.sharded else []
        self.per_parameter = len(set(self._weights)) > 1

    def _weight(self, parameter: nn.Parameter, dtensor: type | None) -> float:
        if dtensor is None or not isinstance(parameter, dtensor):
            return 1.0 / self.world_size
        mesh = parameter.device_mesh  # type: ignore[attr-defined]
        if mesh.size() != self.world_size:
            raise ValueError(
                f"TrainingMonitor: a DTensor parameter's device mesh spans {mesh.size()} of "
                f"the {self.world_size} ranks; the monitor sums gradient norms over every "
                "rank, so each sharded parameter's mesh must span them all"
            )
        copies = 1
        for dim, placement in enumerate(parameter.placements):  # type: ignore[attr-defined]
            if placement.is_partial():
                raise ValueError(
                    f"TrainingMonitor: a DTensor parameter has a Partial placement "
                    f"({parameter.placements}); expected Shard or Replicate"  # type: ignore[attr-defined]
                )
            if placement.is_replicate():
                copies *= mesh.size(dim)
        return 1.0 / copies

    def _handshake(self, parameters: int) -> None:
        """Wait until every rank constructed its monitor, through the store (no collective)."""
        global _handshakes
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        store = distributed_c10d._get_default_store()
        key = f"{_KEY}/{_handshakes}"
        store.set(f"{key}/{self.rank}", str(parameters))
        keys = [f"{key}/{r}" for r in range(self.world_size)]
        try:
            store.wait(keys, timedelta(seconds=HANDSHAKE_TIMEOUT_S))
        except dist.DistError as error:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            raise RuntimeError(
                f"TrainingMonitor(ranks='all') on rank {self.rank}: rank(s) "
                f"{', '.join(map(str, missing)) or '?'} of {self.world_size} constructed no "
                f"monitor within {HANDSHAKE_TIMEOUT_S:g} s. With ranks='all' every rank "
                "constructs a TrainingMonitor and runs every step through it (the ranks "
                "agree on each step's verdict); to monitor this rank alone pass "
                "ranks='local'"
            ) from error
        counts = {r: int(store.get(k)) for r, k in enumerate(keys)}
        _handshakes += 1
        if len(set(counts.values())) > 1:
            raise RuntimeError(
                "TrainingMonitor(ranks='all'): the ranks' models have different numbers of "
                f"parameters ({counts}); every rank must monitor the same model (its "
                "replica or its shards)"
            )

    # ------------------------------------------------------------------ a step

    def local(self, grads: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """The gradients as this rank holds them (a DTensor's local shard)."""
        if not self.sharded:
            return grads
        dtensor = _dtensor_type()
        assert dtensor is not None
        found: list[torch.Tensor | None] = []
        for grad in grads:
            found.append(grad.to_local() if isinstance(grad, dtensor) else grad)  # type: ignore[union-attr]
        return found

    def _reduce(self, nonfinite: bool, squares: Sequence[float]) -> tuple[bool, list[float]]:
        import torch.distributed as dist

        values = torch.tensor(
            [1.0 if nonfinite else 0.0, *squares], dtype=torch.float64, device=self._device
        )
        dist.all_reduce(values)
        total = values.tolist()
        return total[0] == 0.0, total[1:]

    def agree_norm(self, finite: bool, norm: float) -> tuple[bool, float]:
        """Every rank's verdict on the step and the global gradient norm, from this
        rank's (``norm`` of its local gradients). Not for :attr:`per_parameter`."""
        if not self.collective:
            return finite, norm
        if not self.sharded:  # replicated gradients: the local norm is the norm
            return self._reduce(not finite, ())[0], norm
        agreed, (squares,) = self._reduce(not finite, (norm * norm * self._weights[0],))
        return agreed, math.sqrt(squares)

    def agree_norms(self, finite: bool, norms: Sequence[float]) -> tuple[bool, Sequence[float]]:
        """Every rank's verdict and each parameter's global gradient norm (one collective)."""
        if not self.collective:
            return finite, norms
        if not self.sharded:
            return self._reduce(not finite, ())[0], norms
        squares = [n * n * w for n, w in zip(norms, self._weights, strict=True)]
        agreed, summed = self._reduce(not finite, squares)
        return agreed, [math.sqrt(s) for s in summed]

    def made_on_ranks(self, found: bool) -> tuple[int, ...]:
        """The ranks whose replay found an origin (the same tuple on every rank)."""
        if not self.collective:
            return (self.rank,) if found else ()
        import torch.distributed as dist

        flags = torch.zeros(self.world_size, dtype=torch.int32, device=self._device)
        flags[self.rank] = int(found)
        dist.all_reduce(flags)
        return tuple(r for r, flag in enumerate(flags.tolist()) if flag)

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Around a replay: a DDP model runs its wrapped module under ``no_sync()``.

        ``DistributedDataParallel.forward`` would broadcast buffers and rebuild buckets
        (collectives) even under ``no_sync``, so the wrapper's ``forward`` is the wrapped
        module's for the replay; its backward all-reduces nothing.
        """
        if not self._ddps:
            yield
            return
        with contextlib.ExitStack() as stack:
            for ddp in self._ddps:
                stack.enter_context(ddp.no_sync())  # type: ignore[operator]
                ddp.__dict__["forward"] = ddp.module  # instance attribute: __call__ uses it
                stack.callback(ddp.__dict__.pop, "forward", None)
            yield
