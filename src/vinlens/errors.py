"""The root of every error vinlens raises: :class:`VinlensError`.

Each vinlens exception also derives from the builtin family a caller already catches, so
``except ValueError`` or ``except OSError`` keep working while ``except VinlensError``
catches anything vinlens raised::

    VinlensError
    ├── VinlensStoreError                       every store error (vinlens.store.errors)
    │   ├── VinOfflineStoreError (ValueError)   a store breaks the v1 contract, and its kinds
    │   ├── StoreAccessError (OSError)          network, credentials, permissions
    │   ├── RecordDecodeError (ValueError)      bytes that are not one v1 msgpack record
    │   └── TarScanError (ValueError)           a raw-dataset tar that cannot be scanned
    ├── RunLogError (OSError)                   the run log's destination refused a write
    ├── NonFiniteGradientError (RuntimeError)   a monitored step's gradients held NaN or Inf
    ├── OperationCancelled (RuntimeError)       a long operation was cancelled
    ├── LayerLayoutError (ValueError)           a layer output not readable as [B, C, H, W]
    ├── CommandError (RuntimeError)             a widget command failed (shown in its error box)
    └── CommandCancelled (RuntimeError)         a widget command was cancelled

Each class lives beside the code that raises it and is importable from there; this module
holds only the root, so that importing it costs nothing.
"""

from __future__ import annotations

__all__ = ["VinlensError"]


class VinlensError(Exception):
    """Root of every exception vinlens defines (see the module docstring for the tree)."""
