"""Where a run log lives (a local path or an fsspec URL), and the names of its files."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["rank_dir_name", "segment_name", "segment_seq", "split_log_dir"]

_SEGMENT_PREFIX = "seg-"
_SEGMENT_SUFFIX = ".vlr"


def split_log_dir(
    log_dir: str | os.PathLike[str], storage_options: Mapping[str, Any] | None
) -> tuple[Any, str]:
    """``(fsspec filesystem or None for a local path, root path)``."""
    if isinstance(log_dir, os.PathLike):
        log_dir = os.fspath(log_dir)
    if not isinstance(log_dir, str) or not log_dir:
        raise TypeError(f"log_dir must be a path or an fsspec URL, got {log_dir!r}")
    if "://" not in log_dir or log_dir.startswith("file://"):
        if storage_options:
            raise ValueError(
                f"storage_options are for fsspec URLs (s3://...), not the local path {log_dir!r}"
            )
        return None, str(Path(log_dir.removeprefix("file://")).absolute())
    import fsspec

    fs, root = fsspec.core.url_to_fs(log_dir, **dict(storage_options or {}))
    return fs, str(root).rstrip("/")


def rank_dir_name(rank: int) -> str:
    return f"rank-{rank:05d}"


def segment_name(seq: int) -> str:
    return f"{_SEGMENT_PREFIX}{seq:08d}{_SEGMENT_SUFFIX}"


def segment_seq(name: str) -> int | None:
    """The sequence number of a segment file name, None for any other file."""
    if not (name.startswith(_SEGMENT_PREFIX) and name.endswith(_SEGMENT_SUFFIX)):
        return None
    digits = name[len(_SEGMENT_PREFIX) : -len(_SEGMENT_SUFFIX)]
    return int(digits) if digits.isdigit() else None
