"""The statistics record: every accumulator of the folded partial finished, with the
manifest's block table and a real batch's shapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from vinlens.store.diagnostics.accumulators import StatsPartial
from vinlens.store.diagnostics.records import (
    BATCH_PREVIEW_SIZE,
    VinOfflineBackboneDiagnostic,
    VinOfflineBlockDiagnostic,
    VinOfflineDatasetStats,
    VinOfflineDatasetStatsRequest,
    VinOfflineSampleDiagnostic,
)
from vinlens.store.errors import VinOfflineStoreError
from vinlens.store.format import BlockKind, shard_dir
from vinlens.store.reader import (
    StoreIntegrityProblem,
    VinOfflineStoreReader,
)


def _batch_preview(
    reader: VinOfflineStoreReader, indices: Sequence[int], labels: bool
) -> tuple[dict[str, tuple[int, ...]], bool, StoreIntegrityProblem | None]:
    """Shapes of one real ``VinOracleBatch``: dataset samples through the dataset's collate.

    Rows come from ``read_sample`` of the already open (generation-checked) reader, the
    call ``VinOfflineDataset.__getitem__`` makes, turned into ``VinOracleSample`` tensors
    by the same ``to_oracle_sample``, and batched by ``collate_vin_oracle_batch``.
    """
    if not labels or not indices:
        return {}, False, None
    from vinlens.store.dataset import collate_vin_oracle_batch, to_oracle_sample

    items = []
    try:
        for index in indices:
            items.append(to_oracle_sample(reader.samples[index], reader.read_sample(index)))
        batch = collate_vin_oracle_batch(items)
    except (VinOfflineStoreError, ValueError, OSError) as exc:
        path = exc.path if isinstance(exc, VinOfflineStoreError) else reader.access.root
        problem = StoreIntegrityProblem(
            type(exc).__name__, None, None, path, f"batch preview failed: {exc}"
        )
        return {}, False, problem
    return batch.shapes(), True, None


def _manifest_blocks(
    reader: VinOfflineStoreReader,
) -> tuple[
    list[VinOfflineBlockDiagnostic], dict[str, tuple[int, ...]], int, list[StoreIntegrityProblem]
]:
    block_diagnostics: list[VinOfflineBlockDiagnostic] = []
    block_shapes: dict[str, tuple[int, ...]] = {}
    numeric_bytes = 0
    problems: list[StoreIntegrityProblem] = []
    for shard in reader.manifest.shards:
        for spec in shard.blocks:
            estimated = spec.estimated_bytes
            block_diagnostics.append(
                VinOfflineBlockDiagnostic(
                    shard_id=shard.shard_id,
                    name=spec.name,
                    kind=spec.kind.value,
                    dtype=spec.dtype,
                    shape=tuple(spec.shape),
                    optional=spec.optional,
                    estimated_bytes=estimated,
                )
            )
            if spec.kind is not BlockKind.ZARR_ARRAY:
                continue
            numeric_bytes += estimated or 0
            previous = block_shapes.get(spec.name)
            if previous is None:
                block_shapes[spec.name] = tuple(spec.shape)
            elif previous[1:] == spec.row_shape:
                block_shapes[spec.name] = (previous[0] + spec.num_rows, *spec.row_shape)
            else:
                problems.append(
                    StoreIntegrityProblem(
                        "BlockMismatchError",
                        shard.shard_id,
                        spec.name,
                        reader.access.describe("manifest.json"),
                        f"block {spec.name!r} of shard {shard.shard_id!r} has row shape "
                        f"{list(spec.row_shape)} but earlier shards store "
                        f"{list(previous[1:])}",
                    )
                )
    return block_diagnostics, block_shapes, numeric_bytes, problems


def build_stats_record(
    reader: VinOfflineStoreReader,
    partial: StatsPartial,
    request: VinOfflineDatasetStatsRequest,
) -> VinOfflineDatasetStats:
    """Finish every accumulator of the folded ``partial`` into the record."""
    manifest = reader.manifest
    samples = reader.samples
    labels = manifest.capabilities.scene_labels
    summary_rows = sorted(partial.labels.summary_rows | partial.vin_points.summary_rows)
    shapes, batch_ok, preview_problem = _batch_preview(
        reader, summary_rows[:BATCH_PREVIEW_SIZE], labels
    )
    block_diagnostics, block_shapes, numeric_bytes, shape_problems = _manifest_blocks(reader)
    integrity = partial.integrity
    integrity.nonfinite = partial.nonfinite()
    integrity.duplicate_ids.update(partial.labels.duplicate_ids)
    extra = ([preview_problem] if preview_problem is not None else []) + shape_problems
    problems = integrity.finish(lambda shard_id: reader.access.describe(shard_dir(shard_id)), extra)

    label_fields = partial.labels.finish()
    if not labels:
        label_fields["candidate_count"] = None
        label_fields["rri"] = None
    return VinOfflineDatasetStats(
        store_dir=str(reader.store_dir),
        version=manifest.version,
        num_samples=len(samples),
        sampled_samples=partial.rows_scanned,
        split_counts=dict(sorted(Counter(row.split for row in samples).items())),
        num_scenes=len({row.scene_id for row in samples}),
        num_snippets=len({(row.scene_id, row.snippet_id) for row in samples}),
        materialized_blocks=dict(manifest.materialized_blocks.model_dump()),
        numeric_bytes=numeric_bytes,
        block_shapes=block_shapes,
        block_diagnostics=block_diagnostics,
        sample_summaries=_sample_summaries(reader, partial, summary_rows, labels),
        **label_fields,
        **partial.vin_points.finish(),
        **partial.poses.finish(),
        memory_diagnostics=partial.memory.finish(),
        backbone_diagnostics=_backbone_diagnostics(partial),
        scene_labels_available=labels,
        batch_shapes_available=batch_ok,
        batch_shapes=shapes,
        integrity_problems=problems,
        max_samples=request.max_samples,
        generation=request.generation.to_json_dict(),
    )


def _backbone_diagnostics(partial: StatsPartial) -> list[VinOfflineBackboneDiagnostic]:
    return [
        VinOfflineBackboneDiagnostic(
            field=name,
            shape=shape,
            numel=_numel(shape),
            sampled_rows=rows,
            count=count,
            mean=mean,
            std=std,
            abs_mean=abs_mean,
            nz_frac=nz,
            minimum=low,
            maximum=high,
        )
        for name, shape, rows, (count, mean, std, abs_mean, nz), (low, high) in (
            partial.backbone.finish()
        )
    ]


def _sample_summaries(
    reader: VinOfflineStoreReader, partial: StatsPartial, summary_rows: list[int], labels: bool
) -> list[VinOfflineSampleDiagnostic]:
    """The per-row summaries of the sample indices ``summary_rows`` (label fields when ``labels``)."""
    summaries = []
    for si in summary_rows:
        row = reader.samples[si]
        summaries.append(
            VinOfflineSampleDiagnostic(
                sample_index=si,
                sample_key=row.sample_key,
                scene_id=row.scene_id,
                snippet_id=row.snippet_id,
                split=row.split,
                shard_id=row.shard_id,
                row=row.row,
                candidate_count=partial.labels.row_counts.get(si) if labels else None,
                rri=partial.labels.row_rri.get(si) if labels else None,
                vin_points=partial.vin_points.row_points.get(si),
            )
        )
    return summaries


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
