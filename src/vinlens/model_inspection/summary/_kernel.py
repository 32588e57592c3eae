"""The compiled one-pass sums of CPU float32/float64 summaries (numba, the ``fast`` extra).

Importing this module imports numba and loads (or, the first time after an install,
compiles and caches in ``__pycache__``) the machine code of :func:`moments` for both
signatures; without numba the import raises ``ImportError``. :mod:`._cpu` imports it
lazily, once per process, on its first CPU summary.

:func:`moments` reads every value of a 1-d C-contiguous float32 or float64 array once,
widens it to float64 (exact for float32) and adds it, its square and ``value == 0.0``
(true for both zeros) into float64 / integer accumulators. Its adds carry LLVM's
``reassoc`` and ``contract`` flags only: the compiler may split the sums over vector lanes
(another summation order) and fuse ``q + v * v`` into one rounding, so each sum is still a
float64 sum of its terms in some order and errs by at most ``gamma_k * sum(|terms|)``
(``k`` the array's values; Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1,
which holds for every order). No flag assumes finite values or ignores signed zeros: a NaN,
an infinity or an overflow still shows in the sums.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

# (sum, squares, zeros) of a 1-d C-contiguous array of either dtype, compiled when loaded.
_SIGNATURES = [
    f"Tuple((float64, float64, int64))({dtype}[::1])" for dtype in ("float32", "float64")
]


@numba.njit(
    _SIGNATURES, nogil=True, cache=True, boundscheck=False, fastmath={"reassoc", "contract"}
)
def moments(values: Any) -> tuple[float, float, int]:  # pragma: no cover - compiled
    """``(sum, sum of squares, zeros)`` of ``values``, accumulated in float64."""
    total = 0.0
    squares = 0.0
    zeros = 0
    for i in range(values.size):
        v = np.float64(values[i])
        total += v
        squares += v * v
        zeros += v == 0.0
    return total, squares, zeros


# (max |a - b|, sum (a - b)^2, sum a b) of two 1-d C-contiguous arrays of one dtype.
_PAIR_SIGNATURES = [
    f"Tuple((float64, float64, float64))({dtype}[::1], {dtype}[::1])"
    for dtype in ("float32", "float64")
]


@numba.njit(
    _PAIR_SIGNATURES, nogil=True, cache=True, boundscheck=False, fastmath={"reassoc", "contract"}
)
def pair_sums(a: Any, b: Any) -> tuple[float, float, float]:  # pragma: no cover - compiled
    """``(max |a - b|, sum of (a - b)^2, sum of a b)`` of two finite arrays, in float64
    (the same flags and error bound as :func:`moments`; the difference of two widened
    float32 values is exact)."""
    largest = 0.0
    distance = 0.0
    product = 0.0
    for i in range(a.size):
        x = np.float64(a[i])
        y = np.float64(b[i])
        d = x - y
        distance += d * d
        product += x * y
        largest = max(largest, abs(d))
    return largest, distance, product


_SQUARES_SIGNATURES = [f"float64({dtype}[::1])" for dtype in ("float32", "float64")]


@numba.njit(
    _SQUARES_SIGNATURES,
    nogil=True,
    cache=True,
    boundscheck=False,
    fastmath={"reassoc", "contract"},
)
def squares(values: Any) -> float:  # pragma: no cover - compiled
    """The sum of squares of ``values``, accumulated in float64 (the same flags and error
    bound as :func:`moments`)."""
    total = 0.0
    for i in range(values.size):
        v = np.float64(values[i])
        total += v * v
    return total
