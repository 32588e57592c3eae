"""Parsing the manifest and the sample index with errors that point at the file, line and field.

Part of :mod:`vinlens.store.format` (its docstring maps the package).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import (
    TypeAdapter,
    ValidationError,
)

from vinlens.store.errors import (
    ManifestError,
    SampleIndexError,
    UnsupportedFormatError,
    VinOfflineStoreError,
)
from vinlens.store.format._contract import (
    MAX_MANIFEST_BYTES,
    MAX_SAMPLE_INDEX_LINE_BYTES,
    STORE_FORMAT,
    SUPPORTED_VERSIONS,
)
from vinlens.store.format._models import SampleIndexRow, VinOfflineManifest


def _loc_text(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def format_validation_error(error: ValidationError) -> tuple[str, str]:
    """``(location, message)`` for the first problem in a Pydantic error, in spec field names."""
    first = error.errors(include_url=False)[0]
    loc = _loc_text(first["loc"])
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if first["type"] == "missing":
        msg = "required field is missing"
    elif first["type"] == "extra_forbidden":
        msg = "field is not part of format v1"
    elif "input" in first and first["type"] not in {"value_error", "assertion_error"}:
        msg = f"{msg}, found {first['input']!r}"
    more = len(error.errors()) - 1
    if more:
        msg = f"{msg} (and {more} more problem{'s' if more > 1 else ''})"
    return loc or "(top level)", msg


def sample_index_byte_limit(num_samples: int) -> int:
    """Most bytes a ``sample_index.jsonl`` of ``num_samples`` lines may have."""
    return max(1, num_samples) * (MAX_SAMPLE_INDEX_LINE_BYTES + 1)


def _json_loads(
    data: bytes | str,
    error: type[VinOfflineStoreError],
    path: str,
    where: str | None,
    expected: str,
) -> Any:
    """``json.loads`` whose every failure is ``error`` naming the file.

    Deep nesting (``RecursionError``) and numbers longer than Python converts
    (``ValueError``) are damage like any other bad JSON, not a builtin crash.
    """
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        at = where or (f"line {line}" if line else None)
        raise error(f"not valid JSON: {exc}", path=path, location=at, expected=expected) from exc
    except RecursionError:
        raise error(
            "JSON nested too deeply to parse", path=path, location=where, expected=expected
        ) from None
    except ValueError as exc:  # e.g. an integer of more digits than int() accepts
        raise error(
            f"unparsable JSON value ({exc})", path=path, location=where, expected=expected
        ) from None


def parse_manifest(data: bytes, *, path: str) -> VinOfflineManifest:
    """Parse and validate ``manifest.json`` bytes; ``path`` is only used in error messages.

    ``format`` and ``version`` are checked first so that a store of another format or a
    future version is refused as such, not as a pile of unrelated schema errors. More than
    :data:`MAX_MANIFEST_BYTES` is refused before parsing.
    """
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"larger than the {MAX_MANIFEST_BYTES} bytes a manifest may have",
            path=path,
            expected=f"at most {MAX_MANIFEST_BYTES} bytes",
        )
    raw = _json_loads(data, ManifestError, path, None, "a JSON object")
    if not isinstance(raw, dict):
        raise ManifestError(
            f"top level is a {type(raw).__name__}", path=path, expected="a JSON object"
        )
    fmt = raw.get("format")
    if fmt != STORE_FORMAT:
        raise UnsupportedFormatError(
            f"unsupported format {fmt!r}",
            path=path,
            location="format",
            expected=f"one of: {STORE_FORMAT!r}",
        )
    version = raw.get("version")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        raise UnsupportedFormatError(
            f"unsupported version {version!r}",
            path=path,
            location="version",
            expected=f"one of: {supported}",
        )
    try:
        return VinOfflineManifest.model_validate_json(data)
    except ValidationError as exc:
        loc, msg = format_validation_error(exc)
        raise ManifestError(msg, path=path, location=f"field {loc}") from exc


def parse_sample_index_line(line: bytes | str, *, path: str, line_number: int) -> SampleIndexRow:
    """Parse one ``sample_index.jsonl`` line (1-based ``line_number`` for messages)."""
    where = f"line {line_number}"
    if len(line) > MAX_SAMPLE_INDEX_LINE_BYTES:
        raise SampleIndexError(
            f"line of {len(line)} bytes",
            path=path,
            location=where,
            expected=f"lines of at most {MAX_SAMPLE_INDEX_LINE_BYTES} bytes",
        )
    raw = _json_loads(line, SampleIndexError, path, where, "one JSON object per line")
    if not isinstance(raw, dict):
        raise SampleIndexError(
            f"line holds a {type(raw).__name__}",
            path=path,
            location=where,
            expected="a JSON object",
        )
    try:
        return SampleIndexRow.model_validate_json(line)
    except ValidationError as exc:
        loc, msg = format_validation_error(exc)
        raise SampleIndexError(msg, path=path, location=f"{where}, field {loc}") from exc


_SAMPLE_ROWS: Final = TypeAdapter(list[SampleIndexRow])


def parse_sample_index(
    data: bytes, *, path: str, manifest: VinOfflineManifest | None = None
) -> tuple[SampleIndexRow, ...]:
    """Parse ``sample_index.jsonl`` and, given the manifest, cross-check it.

    Checks: ``sample_index`` runs 0, 1, 2, ... without gaps or duplicates; ``sample_key`` is
    unique; with a manifest: the line count equals ``num_samples``, every ``shard_id`` is
    declared, every ``row`` is inside its shard, and no shard row is claimed twice.
    """
    keys: dict[str, int] = {}
    if manifest is not None and len(data) > sample_index_byte_limit(manifest.num_samples):
        raise SampleIndexError(
            f"larger than {manifest.num_samples} lines of at most "
            f"{MAX_SAMPLE_INDEX_LINE_BYTES} bytes can be",
            path=path,
            expected=f"num_samples={manifest.num_samples} lines",
        )
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    # Fast path: validate all lines in one call; any problem re-parses line by line so the
    # error names the line.
    longest = max(map(len, lines), default=0)
    if longest > MAX_SAMPLE_INDEX_LINE_BYTES:
        number = next(i for i, line in enumerate(lines, 1) if len(line) == longest)
        parse_sample_index_line(lines[number - 1], path=path, line_number=number)
    bulk: list[SampleIndexRow] | None
    try:
        bulk = _SAMPLE_ROWS.validate_json(b"[" + b",".join(lines) + b"]")
    except ValidationError:
        bulk = None
    if bulk is None or len(bulk) != len(lines):
        bulk = None
    rows: list[SampleIndexRow] = []
    for number, line in enumerate(lines, start=1):
        if bulk is not None:
            row = bulk[number - 1]
        elif not line.strip():
            raise SampleIndexError(
                "blank line",
                path=path,
                location=f"line {number}",
                expected="one JSON object per line",
            )
        else:
            row = parse_sample_index_line(line, path=path, line_number=number)
        expected_index = number - 1
        if row.sample_index != expected_index:
            kind = "duplicate" if row.sample_index < expected_index else "gap before"
            raise SampleIndexError(
                f"{kind} sample_index {row.sample_index}",
                path=path,
                location=f"line {number}, field sample_index",
                expected=f"sample_index {expected_index} (ascending from 0 without gaps)",
            )
        if row.sample_key in keys:
            raise SampleIndexError(
                f"sample_key {row.sample_key!r} already used on line {keys[row.sample_key]}",
                path=path,
                location=f"line {number}, field sample_key",
                expected="unique sample keys",
            )
        keys[row.sample_key] = number
        rows.append(row)
    if manifest is not None:
        check_sample_index_against_manifest(rows, manifest, path=path)
    return tuple(rows)


def check_sample_index_against_manifest(
    rows: Sequence[SampleIndexRow], manifest: VinOfflineManifest, *, path: str
) -> None:
    """Raise :class:`SampleIndexError` when the index and manifest disagree."""
    if len(rows) != manifest.num_samples:
        raise SampleIndexError(
            f"{len(rows)} lines but manifest.json says num_samples={manifest.num_samples}",
            path=path,
            expected=f"{manifest.num_samples} lines",
        )
    num_rows: Mapping[str, int] = {s.shard_id: s.num_rows for s in manifest.shards}
    claimed: dict[tuple[str, int], int] = {}
    for number, row in enumerate(rows, start=1):
        if row.shard_id not in num_rows:
            raise SampleIndexError(
                f"unknown shard_id {row.shard_id!r}",
                path=path,
                location=f"line {number}, field shard_id",
                expected=f"one of the manifest's shards {list(num_rows)[:8]}",
            )
        if row.row >= num_rows[row.shard_id]:
            raise SampleIndexError(
                f"row {row.row} is out of range for shard {row.shard_id!r}",
                path=path,
                location=f"line {number}, field row",
                expected=f"0 <= row < {num_rows[row.shard_id]}",
            )
        where = (row.shard_id, row.row)
        if where in claimed:
            raise SampleIndexError(
                f"shard {row.shard_id!r} row {row.row} already used on line {claimed[where]}",
                path=path,
                location=f"line {number}, field row",
                expected="each shard row used by one sample",
            )
        claimed[where] = number
