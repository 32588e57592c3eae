"""Helpers for tests against the session's moto S3 server (fixtures live in conftest.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.synthetic import SyntheticDatasetRecord


@dataclasses.dataclass(frozen=True)
class S3Server:
    """Where the session's moto S3 server listens, and how to reach it with fsspec."""

    endpoint_url: str
    bucket: str

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"client_kwargs": {"endpoint_url": self.endpoint_url}}

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def upload(self, local: Path, key: str) -> str:
        """Copy a local directory tree to ``s3://bucket/key``; returns the URL."""
        fs = s3_filesystem(self)
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            fs.pipe_file(
                f"{self.bucket}/{key}/{path.relative_to(local).as_posix()}", path.read_bytes()
            )
        return self.url(key)


def s3_filesystem(server: S3Server) -> Any:
    import s3fs

    return s3fs.S3FileSystem(
        client_kwargs={"endpoint_url": server.endpoint_url}, skip_instance_cache=True
    )


@dataclasses.dataclass(frozen=True)
class S3Dataset:
    """A synthetic store and raw tars, written locally and uploaded to the moto server."""

    local: SyntheticDatasetRecord
    remote: VinOfflineStoreConfig
    server: S3Server
