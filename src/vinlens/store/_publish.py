"""Publishing a built store: the target check, the atomic swap or rename, and fsync.

A directory at the final path is always a complete store: the new one is renamed in with
one ``rename`` (or swapped with the old one by ``renameat2(RENAME_EXCHANGE)`` where the
file system supports it) and the old one is deleted only afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from vinlens.store.access import LocalStoreAccess
from vinlens.store.errors import StoreExistsError
from vinlens.store.format import MANIFEST_FILE, MAX_MANIFEST_BYTES, STORE_FORMAT

_OLD_MARKER = ".vinlens-old-"

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries atomically (Linux ``renameat2``); False where unsupported.

    Unsupported means no ``renameat2`` in the C library, or a file system that refuses the
    flag (``EINVAL``/``ENOSYS``/``ENOTSUP``); any other failure is raised as ``OSError``.
    """
    libc = _libc()
    if libc is None:
        return False
    rc = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return libc


def fsync_path(path: Path, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath), directory=True)


def _is_store_dir(path: Path) -> bool:
    # Through the access layer: a FIFO or huge manifest.json must not block or flood the
    # check that decides whether an existing directory may be replaced.
    access = LocalStoreAccess(path)
    try:
        data = json.loads(access.read_bytes_limited(MANIFEST_FILE, MAX_MANIFEST_BYTES)[0])
    except (OSError, ValueError, RecursionError):
        return False
    finally:
        access.close()
    return isinstance(data, dict) and data.get("format") == STORE_FORMAT


def check_target(store_dir: Path, replace: bool) -> None:
    """Refuse an existing path unless ``replace`` and it holds a store (never other data)."""
    if not os.path.lexists(store_dir):
        return
    if not replace:
        raise StoreExistsError(
            "path already exists",
            path=store_dir,
            expected="a new path, or replace=True (CLI: --replace)",
        )
    if not store_dir.is_dir() or not _is_store_dir(store_dir):
        raise StoreExistsError(
            "path exists and is not a VIN offline store; refusing to replace it",
            path=store_dir,
            expected="a directory with a vin-offline-store manifest.json",
        )


def publish(tmp: Path, store_dir: Path, *, replace: bool, fsync: bool) -> None:
    """Move the built store at ``tmp`` to ``store_dir``; the path never lacks a store."""
    check_target(store_dir, replace)
    parent = store_dir.parent
    if not os.path.lexists(store_dir):
        os.rename(tmp, store_dir)
    elif exchange(tmp, store_dir):
        # The old store now sits at the temporary name: a kill while deleting it leaves
        # only a ``.vinlens-tmp-`` sibling, never a path without a store.
        if fsync:
            fsync_path(parent, directory=True)
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        aside = parent / f".{store_dir.name}{_OLD_MARKER}{uuid.uuid4().hex[:8]}"
        os.rename(store_dir, aside)
        try:
            os.rename(tmp, store_dir)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rename(aside, store_dir)
            raise
        if fsync:
            fsync_path(parent, directory=True)
        shutil.rmtree(aside, ignore_errors=True)
    if fsync:
        fsync_path(parent, directory=True)
