"""Whole-store checks: :meth:`validate` raises the first problem, :meth:`integrity_problems` lists all.

Both run the same per-block checks the reads run, so a store that validates reads without
damage errors and every problem a read would hit is listed.
"""

from __future__ import annotations

from collections.abc import Iterable

from vinlens.store.errors import VinOfflineStoreError
from vinlens.store.format import BlockKind, StoreBlockSpec, shard_dir
from vinlens.store.reader._integrity import ChunkStatus, StoreIntegrityProblem
from vinlens.store.reader._record_blocks import RecordBlockReads
from vinlens.store.reader._zarr_blocks import ZarrBlockReads

__all__ = ["StoreChecks"]


class StoreChecks(ZarrBlockReads, RecordBlockReads):
    """The reader's whole-store part: validate, list integrity problems, missing chunks."""

    def _check_block(self, shard_id: str, spec: StoreBlockSpec) -> None:
        if spec.kind is BlockKind.ZARR_ARRAY:
            block = self._open_zarr(shard_id, spec.name)
            if not block.status.complete:
                self._raise_missing(block, 0, spec.num_rows)
            self._check_chunk_sizes(block)
        else:
            self._open_records(shard_id, spec.name)

    def validate(self) -> None:
        """Check every shard and block (existence, metadata, chunk files, offsets); raise the first problem."""
        for shard in self.manifest.shards:
            self._check_shard_dir(shard.shard_id)
            for spec in shard.blocks:
                self._check_block(shard.shard_id, spec)

    def integrity_problems(
        self, shard_ids: Iterable[str] | None = None
    ) -> tuple[StoreIntegrityProblem, ...]:
        """Every shard/block problem found by the checks :meth:`validate` runs, without raising.

        ``shard_ids`` limits the checks to those shards (in the order given); the default
        checks every shard in manifest order. Damage of any kind (a shard that is a file, a
        chunk that is a directory, an unreadable file) is a listed problem naming the file.
        """
        problems: list[StoreIntegrityProblem] = []
        ids = [s.shard_id for s in self.manifest.shards] if shard_ids is None else shard_ids
        for shard_id in ids:
            shard = self.shard(shard_id)
            try:
                self._check_shard_dir(shard.shard_id)
            except VinOfflineStoreError as exc:
                problems.append(
                    StoreIntegrityProblem(
                        type(exc).__name__, shard.shard_id, None, exc.path, str(exc)
                    )
                )
                continue
            for spec in shard.blocks:
                try:
                    self._check_block(shard.shard_id, spec)
                except VinOfflineStoreError as exc:
                    problems.append(
                        StoreIntegrityProblem(
                            type(exc).__name__, shard.shard_id, spec.name, exc.path, str(exc)
                        )
                    )
                except OSError as exc:
                    path = exc.filename if isinstance(exc.filename, str) else None
                    problems.append(
                        StoreIntegrityProblem(
                            type(exc).__name__,
                            shard.shard_id,
                            spec.name,
                            path or self.access.describe(shard_dir(shard.shard_id)),
                            f"block {spec.name!r} of shard {shard.shard_id!r} cannot be read: {exc}",
                        )
                    )
        return tuple(problems)

    def missing_chunks(self) -> tuple[ChunkStatus, ...]:
        """Chunk status of every zarr block that lacks chunk files (opens every zarr block)."""
        out: list[ChunkStatus] = []
        for shard in self.manifest.shards:
            for spec in shard.blocks:
                if spec.kind is BlockKind.ZARR_ARRAY:
                    status = self.chunk_status(shard.shard_id, spec.name)
                    if not status.complete:
                        out.append(status)
        return tuple(out)
