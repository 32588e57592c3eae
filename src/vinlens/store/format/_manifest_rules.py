"""The spec's block table as checks on a parsed manifest (kinds, dtypes, shapes, flags)."""

from __future__ import annotations

from vinlens.store.errors import ManifestError
from vinlens.store.format._contract import (
    BACKBONE_PREFIX,
    RRI_COMPONENT_PREFIX,
    block_kind_for,
    expected_block_dtype,
)
from vinlens.store.format._models import VinOfflineManifest

__all__ = ["check_manifest_blocks"]


def check_manifest_blocks(manifest: VinOfflineManifest, *, path: str) -> None:
    """Raise :class:`ManifestError` where shards break the spec's block table.

    Per shard: ``vin_points`` is a record block; with ``scene_labels`` there are
    ``candidate_valid`` and ``rri``; without it no labelled block appears; a block family
    whose ``materialized_blocks`` flag is false is absent; known blocks have the spec's
    kind, dtype and ``[R, C]`` / ``[R, C, 7]`` shape. Unknown block names are allowed.
    """
    labels = manifest.capabilities.scene_labels
    flags = manifest.materialized_blocks
    num_c = manifest.num_candidates
    for s_index, shard in enumerate(manifest.shards):
        where_shard = f"field shards[{s_index}] (shard {shard.shard_id!r})"
        required = ["vin_points"] + (["candidate_valid", "rri"] if labels else [])
        for name in required:
            if shard.block(name) is None:
                raise ManifestError(
                    f"required block {name!r} is not declared",
                    path=path,
                    location=f"{where_shard}.blocks",
                    expected=f"blocks {required}",
                )
        for b_index, block in enumerate(shard.blocks):
            where = f"field shards[{s_index}].blocks[{b_index}] ({block.name!r})"
            name = block.name
            labelled = name in {"candidate_valid", "rri", "candidate_ids"} or name.startswith(
                RRI_COMPONENT_PREFIX
            )
            if labelled and not labels:
                raise ManifestError(
                    "labelled block in a store whose capabilities.scene_labels is false",
                    path=path,
                    location=where,
                    expected="no candidate_valid/rri/rri_components/candidate_ids blocks",
                )
            family_flag = {
                "candidate_ids": flags.candidate_ids,
                "candidate_poses": flags.candidate_poses,
            }.get(name)
            if name.startswith(BACKBONE_PREFIX):
                family_flag = flags.backbone
            elif name.startswith(RRI_COMPONENT_PREFIX):
                family_flag = flags.rri_components
            if family_flag is False:
                raise ManifestError(
                    "block present although materialized_blocks marks its family false",
                    path=path,
                    location=where,
                    expected="materialized_blocks flag true for every stored block family",
                )
            kind = block_kind_for(name)
            if kind is not None and block.kind is not kind:
                raise ManifestError(
                    f"kind {block.kind.value!r}",
                    path=path,
                    location=f"{where}.kind",
                    expected=repr(kind.value),
                )
            dtypes = expected_block_dtype(name)
            if dtypes is not None and block.dtype not in dtypes:
                raise ManifestError(
                    f"dtype {block.dtype!r}",
                    path=path,
                    location=f"{where}.dtype",
                    expected=f"one of {sorted(dtypes)}",
                )
            expected_shape: tuple[int, ...] | None = None
            if name in {"candidate_valid", "rri", "candidate_ids"} or name.startswith(
                RRI_COMPONENT_PREFIX
            ):
                expected_shape = (shard.num_rows, num_c)
            elif name == "candidate_poses":
                expected_shape = (shard.num_rows, num_c, 7)
            if expected_shape is not None and block.shape != expected_shape:
                raise ManifestError(
                    f"shape {list(block.shape)}",
                    path=path,
                    location=f"{where}.shape",
                    expected=f"{list(expected_shape)} ([num_rows, num_candidates{', 7' if len(expected_shape) == 3 else ''}])",
                )
