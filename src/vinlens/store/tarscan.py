"""Old import path of the tar header scanner: it lives in :mod:`vinlens.store.coverage`.

Kept so that ``from vinlens.store.tarscan import ...`` written against earlier releases
still works; new code imports from :mod:`vinlens.store.coverage` (errors from
:mod:`vinlens.store.errors`).
"""

from __future__ import annotations

from vinlens.store.coverage import (
    DEFAULT_MAX_EXTENDED_HEADER_BYTES,
    TarMemberHeader,
    list_tar_member_names,
    scan_tar_headers,
)
from vinlens.store.errors import (
    TarExtendedHeaderTooLargeError,
    TarHeaderChecksumError,
    TarHeaderFormatError,
    TarScanError,
    TruncatedTarError,
)

__all__ = [
    "DEFAULT_MAX_EXTENDED_HEADER_BYTES",
    "TarExtendedHeaderTooLargeError",
    "TarHeaderChecksumError",
    "TarHeaderFormatError",
    "TarMemberHeader",
    "TarScanError",
    "TruncatedTarError",
    "list_tar_member_names",
    "scan_tar_headers",
]
