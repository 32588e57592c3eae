"""The records of store damage: chunk completeness of a zarr block and one listed problem."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChunkStatus", "StoreIntegrityProblem"]


@dataclass(frozen=True)
class ChunkStatus:
    """Chunk completeness of one zarr block: expected vs initialized chunk files."""

    shard_id: str
    block: str
    path: str
    expected_chunks: int
    initialized_chunks: int
    missing_chunks: int
    missing_examples: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return self.missing_chunks == 0


@dataclass(frozen=True)
class StoreIntegrityProblem:
    """One problem found by :meth:`VinOfflineStoreReader.integrity_problems`.

    ``kind`` is the error class name (``MissingChunksError``, ``BlockMismatchError``, ...),
    ``path`` the offending file, ``message`` the full error text.
    """

    kind: str
    shard_id: str | None
    block: str | None
    path: str | None
    message: str
