"""The random state a monitored step starts from, saved at the cost of a memory compare.

:func:`rng_states` returns what torch's CPU and CUDA generators, Python's ``random`` and
NumPy's global generator hold, in the form their ``getstate``/``get_state`` give it.
``random.getstate()`` (625 Python ints) and ``np.random.get_state()`` cost tens of
microseconds each, most of a small model's step, so the two are taken again only when
the generator's state changed since the last time: the state is read in place, as raw
bytes (NumPy's MT19937 through its public ``ctypes.state_address``, the cached Gaussian
of the legacy ``RandomState`` and Python's Mersenne Twister at offsets found on a private
instance of the same type and checked against ``get_state``/``getstate`` after draws),
and compared with the bytes read with the saved state. Equal bytes mean an equal state,
so the saved one is returned: exact, not a heuristic. Where the layout is not the one
found (another interpreter, a NumPy bit generator other than MT19937) the state is taken
in full every time.
"""

from __future__ import annotations

import ctypes
import random
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

RngStates = tuple[torch.Tensor, list[torch.Tensor] | None, object, object]

_MT_WORDS = 624
_MT_BYTES = _MT_WORDS * 4 + 4  # numpy's mt19937_state: uint32 key[624]; int pos


class _AugState(ctypes.Structure):
    """NumPy's ``aug_bitgen_t``: the legacy RandomState's cached Gaussian."""

    _fields_ = [
        ("bit_generator", ctypes.c_void_p),
        ("has_gauss", ctypes.c_int),
        ("gauss", ctypes.c_double),
    ]


def _python_span() -> tuple[int, int] | None:
    """(offset, size) of a ``random.Random``'s index and 624 state words in the object,
    found on a private instance and checked after draws; None when not found."""
    probe = random.Random(12345)
    limit = type(probe).__basicsize__

    def words(state: tuple[Any, ...]) -> bytes:
        internal = state[1]
        return struct.pack(f"<i{_MT_WORDS}I", internal[_MT_WORDS], *internal[:_MT_WORDS])

    expected = words(probe.getstate())
    at = ctypes.string_at(id(probe), limit).find(expected)
    if at < 0 or at + len(expected) > limit:
        return None
    for _ in range(3):  # the found bytes follow the state through draws
        probe.random()
        probe.getrandbits(20000)
        if ctypes.string_at(id(probe) + at, len(expected)) != words(probe.getstate()):
            return None
    return at, len(expected)


def _numpy_aug_offset() -> int | None:
    """Offset of the legacy RandomState's ``aug_bitgen_t`` in the object, found on a
    private instance (its pointer to the object's own ``bitgen_t``) and checked; or None."""
    probe = np.random.RandomState(12345)
    generator = probe._bit_generator
    if type(generator) is not np.random.MT19937:
        return None
    limit = type(probe).__basicsize__
    raw = ctypes.string_at(id(probe), limit)
    bitgen = raw.find(struct.pack("@P", generator.ctypes.state_address))
    if bitgen < 0:
        return None
    aug = raw.find(struct.pack("@P", id(probe) + bitgen))
    if aug < 0 or aug + ctypes.sizeof(_AugState) > limit:
        return None
    for _ in range(3):  # has_gauss and gauss follow standard_normal's cache
        probe.standard_normal()
        state: Any = probe.get_state()
        if _numpy_raw(probe, generator, aug) != (
            np.asarray(state[1], dtype=np.uint32).tobytes() + struct.pack("<i", state[2]),
            state[3],
            state[4],
        ):
            return None
    return aug


def _numpy_raw(rs: object, generator: Any, aug: int) -> tuple[bytes, int, float]:
    """The MT19937 key and position, and the cached Gaussian, read in place."""
    cached = _AugState.from_address(id(rs) + aug)
    return (
        ctypes.string_at(generator.ctypes.state_address, _MT_BYTES),
        cached.has_gauss,
        cached.gauss,
    )


class _Saved:
    """A global generator's state, taken again only when its raw state changed."""

    def __init__(self, take: Callable[[], object], raw: Callable[[], object | None]) -> None:
        self._take = take
        self._raw = raw
        self._last: tuple[object, object] | None = None

    def get(self) -> object:
        before = self._raw()
        if before is None:
            return self._take()
        last = self._last
        if last is not None and last[0] == before:
            return last[1]
        state = self._take()
        if self._raw() == before:  # no other thread drew between the two reads
            self._last = (before, state)
        return state


def _python_saved() -> _Saved:
    span = _python_span()
    instance = random._inst  # the Random whose methods are the module's functions
    if span is None or type(instance) is not random.Random:
        return _Saved(lambda: random.getstate(), lambda: None)
    address, size = id(instance) + span[0], span[1]
    return _Saved(
        lambda: random.getstate(),
        lambda: (ctypes.string_at(address, size), instance.gauss_next),  # type: ignore[attr-defined]
    )


def _numpy_saved() -> _Saved:
    aug = _numpy_aug_offset()
    legacy = np.random.mtrand._rand  # the RandomState behind np.random.rand, get_state, ...
    if aug is None or type(legacy) is not np.random.RandomState:
        return _Saved(lambda: np.random.get_state(), lambda: None)

    def raw() -> object | None:
        generator = np.random.get_bit_generator()  # type: ignore[attr-defined]
        if type(generator) is not np.random.MT19937:  # np.random.set_bit_generator(...)
            return None
        return id(generator), _numpy_raw(legacy, generator, aug)

    return _Saved(lambda: np.random.get_state(), raw)


_saved: tuple[_Saved, _Saved] | None = None


def rng_states() -> RngStates:
    """torch's CPU and CUDA generators, Python's ``random`` and NumPy's global generator."""
    global _saved
    if _saved is None:
        _saved = (_python_saved(), _numpy_saved())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]
    python, legacy_numpy = _saved
    return torch.get_rng_state(), cuda, python.get(), legacy_numpy.get()


def restore_rng(states: RngStates) -> None:
    cpu, cuda, python, legacy_numpy = states
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    random.setstate(python)  # type: ignore[arg-type]
    np.random.set_state(legacy_numpy)  # type: ignore[arg-type]
