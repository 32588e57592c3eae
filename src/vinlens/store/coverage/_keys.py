"""The WebDataset key rules: member names to ``(scene_id, snippet_id)`` pairs, and how
names are shown.

Part of :mod:`vinlens.store.coverage` (its docstring states the rules).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vinlens.store.coverage._records import SnippetPair

_WDS_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
# WebDataset's ``skip_meta`` default: members such as ``__meta__/info.json`` or
# ``__index__`` are metadata, never samples.
_WDS_META = re.compile(r"__[^/]*__($|/)")


def webdataset_key(member_name: str) -> str | None:
    """The WebDataset key of a member name, or ``None`` where WebDataset finds none.

    Usually the path up to the basename's first ``.`` (``a/b.rgb.jpg`` -> ``a/b``). A basename
    that *starts* with ``.`` does not make the name keyless: WebDataset's rule then takes
    the directory part with its slash as the key (``scene/.hidden`` -> ``"scene/"``), which
    has no snippet component and so counts as unparseable here.
    """
    slash = member_name.rfind("/") + 1
    dot = member_name.find(".", slash)
    if dot > slash:
        return member_name[:dot]
    if dot < 0:
        return None
    match = _WDS_BASE_PLUS_EXT.match(member_name)
    return None if match is None else match.group(1)


def is_webdataset_meta(member_name: str) -> bool:
    """True for metadata members WebDataset skips (``__[^/]*__($|/)`` at the name's start)."""
    return member_name.startswith("__") and _WDS_META.match(member_name) is not None


def parse_webdataset_key(member_name: str) -> SnippetPair | None:
    """``(scene_id, snippet_id)`` of a tar member name, or ``None`` when it does not parse."""
    key = webdataset_key(member_name)
    return None if key is None else _pair_of_key(key)


def _pair_of_key(key: str) -> SnippetPair | None:
    parts = key.rsplit("/", 2)
    if len(parts) < 2 or not parts[-1] or not parts[-2]:
        return None
    return parts[-2], parts[-1]


def snippet_pairs_from_member_names(
    names: Sequence[str],
) -> tuple[set[SnippetPair], list[str]]:
    """Snippet pairs of member names, and the names that do not parse (in order).

    Keys are deduplicated before they are split, since a WebDataset sample spreads over
    several consecutive members (``.rgb.jpg``, ``.depth.png``, ...) with one key. Metadata
    members (:func:`is_webdataset_meta`) are neither pairs nor unparseable: WebDataset
    skips them.
    """
    keys: set[str] = set()
    add = keys.add
    irregular = False
    for name in names:  # webdataset_key, inlined: this loop runs once per raw member
        slash = name.rfind("/") + 1
        dot = name.find(".", slash)
        if dot > slash and name[0] != "_":
            add(name[:dot])
        else:
            irregular = True
    if irregular:
        for name in names:
            slash = name.rfind("/") + 1
            dot = name.find(".", slash)
            if dot > slash and name[0] != "_":
                continue
            if is_webdataset_meta(name):
                continue
            key = webdataset_key(name)
            if key is not None:
                add(key)
    pairs: set[SnippetPair] = set()
    bad_keys: set[str] = set()
    for key in keys:
        pair = _pair_of_key(key)
        if pair is None:
            bad_keys.add(key)
        else:
            pairs.add(pair)
    if not irregular and not bad_keys:
        return pairs, []
    bad = []
    for name in names:
        if is_webdataset_meta(name):
            continue
        member_key = webdataset_key(name)
        if member_key is None or member_key in bad_keys:
            bad.append(name)
    return pairs, bad


def display_name(name: str) -> str:
    """A name as records carry it: valid UTF-8 text, readable, for any tar member name.

    Tar member names are bytes; the scanner decodes them as UTF-8 with ``surrogateescape``
    so nothing is lost. Undecodable bytes (a Latin-1 ``\xe9``) become the four characters
    ``\xe9`` here, so widgets, CSV export and terminals can show them.
    """
    if name.isascii():
        return name
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_utf8(name: str) -> bool:
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
