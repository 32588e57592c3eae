"""Where a run log lives: a local path or an fsspec URL."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["split_log_dir"]


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
