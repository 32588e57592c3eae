"""Old import path of ``VinOfflineSample``: it lives in :mod:`vinlens.store.format`.

Kept so that ``from vinlens.store.sample import VinOfflineSample`` written against earlier
releases still works; new code imports it from :mod:`vinlens.store` or
:mod:`vinlens.store.format`.
"""

from __future__ import annotations

from vinlens.store.format import VinOfflineSample

__all__ = ["VinOfflineSample"]
