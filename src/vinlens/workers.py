"""What a model-side task carries to a worker: a model recipe and a sharded source of batches.

A task sent to an executor must pickle, and an ``nn.Module`` with hooks, a data loader or
a generator does not (or not cheaply, or not faithfully). So a model-side operation
(activation statistics, dataset attribution, camera reliance) receives:

* a :class:`ModelRecipe`: a **top-level** factory (importable by module and name on the
  worker), its keyword arguments, and optionally a state dict to load after building.
  ``recipe.build()`` returns a fresh model in eval mode; ``recipe.model()`` returns the
  model built once per worker thread and recipe (a task that runs after another on the
  same worker does not rebuild it). :meth:`ModelRecipe.from_model` snapshots a live
  model's weights into a recipe.
* a :class:`ShardedBatches`: a top-level ``load(shard_index) -> iterable of batches`` and
  the number of shards; shard ``i`` is one task. :meth:`ShardedBatches.from_sequence`
  wraps a plain list of batches (a batch per shard by default).

Results do not depend on where the shards ran: every shard is loaded by its index alone,
and the partials are folded in shard order by :func:`vinlens.operations.run_operation`.

torch is imported only when a model is built, so the store side can import this module.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
import types
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["ModelRecipe", "ShardedBatches", "as_sharded_batches", "models_released"]

#: Models kept per worker thread by :meth:`ModelRecipe.model` (most recently used).
MODELS_PER_THREAD = 2


def _check_top_level(function: object, what: str) -> None:
    """Raise a TypeError unless ``function`` is a callable a worker can import by name."""
    if not callable(function):
        raise TypeError(f"{what} must be callable, got {type(function).__qualname__}")
    if not isinstance(function, (type, types.FunctionType)):
        return  # a callable object (functools.partial, an instance): pickled as it is
    qualname = function.__qualname__
    module = function.__module__
    # Names in __main__ pickle by name too; they reach forked pool workers, not spawned ones.
    if "<lambda>" in qualname or "<locals>" in qualname:
        where = f"{module}.{qualname}" if module else repr(function)
        raise TypeError(
            f"{what} {where} cannot be sent to a worker: use a function or class defined at "
            "the top level of a module (not a lambda or a nested function)"
        )


@dataclass(frozen=True, eq=False)
class ModelRecipe:
    """A picklable way to build the same model on any worker.

    Attributes:
        factory: A top-level function or ``nn.Module`` subclass returning the model
            (``factory(**kwargs)``).
        kwargs: Keyword arguments of ``factory`` (plain, picklable values).
        state_dict: Weights loaded after building (``load_state_dict(strict=True)``), or
            ``None`` when the factory alone determines them (e.g. a seeded constructor).
        device: Device the model is moved to on the worker.
        train: Build in train mode (``False``: eval mode, the default for diagnostics).

    :meth:`model` reuses one build per worker thread for every recipe of the same content
    (factory, kwargs, state dict values, device, mode): ``dataclasses.replace(recipe,
    state_dict=new)`` builds the new weights. The content digest is computed once per
    recipe object and travels with its pickled copies (a state dict changed in place after
    the recipe was made is not seen; :meth:`from_model` copies it). ``token`` is kept for
    compatibility; it does not key the cache.
    """

    factory: Callable[..., Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    state_dict: Mapping[str, Any] | None = None
    device: str = "cpu"
    train: bool = False
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_top_level(self.factory, "ModelRecipe.factory")
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise TypeError(
                f"ModelRecipe.kwargs must be a mapping of str keys, got {self.kwargs!r:.80}"
            )
        object.__setattr__(self, "kwargs", types.MappingProxyType(dict(self.kwargs)))
        if self.state_dict is not None and not isinstance(self.state_dict, Mapping):
            raise TypeError(
                "ModelRecipe.state_dict must be None or a mapping of names to tensors "
                f"(model.state_dict()), got {type(self.state_dict).__qualname__}"
            )

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle: send a plain dict and rebuild.
        try:
            pickle.dumps(self.factory)
        except Exception as error:
            raise TypeError(
                f"ModelRecipe(factory={self.factory!r:.80}, token={self.token}) cannot be sent "
                f"to a worker process: its factory does not pickle ({error}); use a top-level "
                "function or class, or run in process / on a thread pool"
            ) from error
        return (
            _rebuild_recipe,
            (
                self.factory,
                dict(self.kwargs),
                None if self.state_dict is None else dict(self.state_dict),
                self.device,
                self.train,
                self.token,
                self.content_digest(),
            ),
        )

    def content_digest(self) -> str:
        """Hex digest of the recipe's content: factory, kwargs, state dict values, device, mode."""
        if self._digest is None:
            object.__setattr__(self, "_digest", _digest_of(self))
        assert self._digest is not None
        return self._digest

    @classmethod
    def from_model(
        cls,
        model: torch.nn.Module,
        factory: Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        device: str = "cpu",
    ) -> ModelRecipe:
        """A recipe that rebuilds ``model`` (same factory) with a copy of its current weights.

        The state dict is detached and copied to the CPU, so later training of ``model``
        does not change what workers build.
        """
        state = {
            name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()
        }
        return cls(factory, dict(kwargs or {}), state, device=device, train=model.training)

    def build(self) -> torch.nn.Module:
        """A new model: ``factory(**kwargs)``, weights loaded, on ``device``, eval or train mode."""
        import torch

        model = self.factory(**self.kwargs)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"ModelRecipe.factory {self.factory!r:.80} returned "
                f"{type(model).__qualname__}, expected a torch.nn.Module"
            )
        if self.state_dict is not None:
            model.load_state_dict(dict(self.state_dict), strict=True)
        model.to(self.device)
        model.train(self.train)
        return model

    def model(self) -> torch.nn.Module:
        """The model of this recipe built once per worker thread (see :data:`MODELS_PER_THREAD`)."""
        cache: OrderedDict[str, Any] | None = getattr(_models, "cache", None)
        if cache is None:
            cache = OrderedDict()
            _models.cache = cache
        key = self.content_digest()
        built = cache.get(key)
        if built is None:
            built = self.build()
            cache[key] = built
            while len(cache) > MODELS_PER_THREAD:
                cache.popitem(last=False)
        cache.move_to_end(key)
        return built


def _digest_of(recipe: ModelRecipe) -> str:
    factory = recipe.factory
    name = getattr(factory, "__qualname__", None)
    digest = hashlib.blake2b(digest_size=20)
    if isinstance(factory, (type, types.FunctionType)) and name:
        digest.update(f"{factory.__module__}.{name}".encode())
    else:
        digest.update(_stable_bytes(factory))
    digest.update(_stable_bytes(sorted(recipe.kwargs.items())))
    digest.update(f"|{recipe.device}|{recipe.train}|".encode())
    if recipe.state_dict is None:
        digest.update(b"no state dict")
    else:
        import torch

        for key, value in recipe.state_dict.items():
            digest.update(f"|{key}|".encode())
            if isinstance(value, torch.Tensor):
                flat = value.detach().to("cpu").contiguous().reshape(-1)
                digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
                digest.update(flat.view(torch.uint8).numpy().tobytes())
            else:
                digest.update(_stable_bytes(value))
    return digest.hexdigest()


def _stable_bytes(value: object) -> bytes:
    try:
        return pickle.dumps(value, protocol=4)
    except Exception:
        return repr(value).encode()


def _rebuild_recipe(
    factory: Callable[..., Any],
    kwargs: dict[str, Any],
    state_dict: dict[str, Any] | None,
    device: str,
    train: bool,
    token: str,
    digest: str | None = None,
) -> ModelRecipe:
    recipe = ModelRecipe(factory, kwargs, state_dict, device, train, token)
    object.__setattr__(recipe, "_digest", digest)
    return recipe


@contextmanager
def models_released() -> Iterator[None]:
    """Drop the models :meth:`ModelRecipe.model` builds on this thread inside the block.

    An in-process operation runs its tasks on the caller's thread; this keeps the models it
    built from staying alive there after the call (a worker thread's cache is kept).
    """
    cache: OrderedDict[str, Any] | None = getattr(_models, "cache", None)
    before = set() if cache is None else set(cache)
    try:
        yield
    finally:
        cache = getattr(_models, "cache", None)
        if cache is not None:
            for key in [k for k in cache if k not in before]:
                del cache[key]


# One model cache per thread: forward hooks and module state are not shared across threads.
_models = threading.local()


class _SequenceLoader:
    """``load(shard)`` over a list of batches, ``per_shard`` consecutive batches a shard."""

    __slots__ = ("batches", "per_shard")

    def __init__(self, batches: Sequence[Any], per_shard: int) -> None:
        self.batches = list(batches)
        self.per_shard = per_shard

    def __call__(self, shard: int) -> list[Any]:
        start = shard * self.per_shard
        return self.batches[start : start + self.per_shard]

    def __getstate__(self) -> tuple[list[Any], int]:
        return self.batches, self.per_shard

    def __setstate__(self, state: tuple[list[Any], int]) -> None:
        self.batches, self.per_shard = state

    def only(self, shard: int) -> _OneShardLoader:
        """A loader holding just ``shard``'s batches: what one task needs to carry."""
        return _OneShardLoader(shard, self(shard))


class _OneShardLoader:
    """``load(shard)`` of a single shard of a list of batches (the others never travel)."""

    __slots__ = ("batches", "shard")

    def __init__(self, shard: int, batches: list[Any]) -> None:
        self.shard = shard
        self.batches = batches

    def __call__(self, shard: int) -> list[Any]:
        if shard != self.shard:
            raise IndexError(f"this task carries shard {self.shard} only, not {shard}")
        return self.batches

    def __getstate__(self) -> tuple[int, list[Any]]:
        return self.shard, self.batches

    def __setstate__(self, state: tuple[int, list[Any]]) -> None:
        self.shard, self.batches = state


@dataclass(frozen=True)
class ShardedBatches:
    """A source of batches in ``count`` shards, each loadable by its index alone.

    Attributes:
        load: A top-level callable (or a picklable callable object) with
            ``load(shard_index) -> iterable of batches``; it runs on the worker.
        count: Number of shards (``0 <= shard_index < count``).
    """

    load: Callable[[int], Iterable[Any]]
    count: int

    def __post_init__(self) -> None:
        _check_top_level(self.load, "ShardedBatches.load")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ValueError(f"ShardedBatches.count must be an int >= 0, got {self.count!r}")

    @classmethod
    def from_sequence(cls, batches: Sequence[Any], *, batches_per_shard: int = 1) -> ShardedBatches:
        """Shards of ``batches_per_shard`` consecutive batches of a list (the batches travel)."""
        if isinstance(batches_per_shard, bool) or not isinstance(batches_per_shard, int):
            raise TypeError(f"batches_per_shard must be an int, got {batches_per_shard!r}")
        if batches_per_shard < 1:
            raise ValueError(f"batches_per_shard must be >= 1, got {batches_per_shard}")
        items = list(batches)
        count = -(-len(items) // batches_per_shard)
        return cls(_SequenceLoader(items, batches_per_shard), count)

    def batches(self, shard_index: int) -> Iterator[Any]:
        """The batches of one shard (loaded by ``load``)."""
        if not 0 <= shard_index < self.count:
            raise IndexError(f"shard index {shard_index} out of range [0, {self.count})")
        return iter(self.load(shard_index))

    def for_shard(self, shard_index: int) -> ShardedBatches:
        """What a task of shard ``shard_index`` carries to its worker.

        For :meth:`from_sequence` sources, a copy holding only that shard's batches (a
        task pickles its own batches, not the whole list); otherwise ``self`` (``load``
        reads the shard on the worker).
        """
        if not 0 <= shard_index < self.count:
            raise IndexError(f"shard index {shard_index} out of range [0, {self.count})")
        if isinstance(self.load, _SequenceLoader):
            return ShardedBatches(self.load.only(shard_index), self.count)
        return self

    def __len__(self) -> int:
        return self.count


def as_sharded_batches(source: ShardedBatches | Sequence[Any]) -> ShardedBatches:
    """``source`` as :class:`ShardedBatches`: itself, or a list/tuple with one batch a shard.

    Raises:
        TypeError: an iterator or generator (it cannot be split across workers, nor read
            twice): pass a list of batches or ``ShardedBatches(load, count)``.
    """
    if isinstance(source, ShardedBatches):
        return source
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        return ShardedBatches.from_sequence(source)
    raise TypeError(
        "batches must be a list or tuple of batches or vinlens.workers.ShardedBatches(load, "
        f"count), got {type(source).__qualname__}: an iterator or data loader cannot be split "
        "across workers"
    )
