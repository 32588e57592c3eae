"""Names shared by the model-inspection modules: the root path and qualified type names."""

from __future__ import annotations

__all__ = ["ROOT_PATH"]

#: The path that names the model itself in module records, capture paths and snapshots
#: (``named_modules`` gives it the empty string, which reads badly in a table).
ROOT_PATH = "<root>"

_TYPE_NAMES: dict[type, str] = {}


def _qualified_type_name(cls: type) -> str:
    """``module.QualName`` of a class; memoized because model walks ask for the same few types."""
    name = _TYPE_NAMES.get(cls)
    if name is None:
        if len(_TYPE_NAMES) > 4096:  # classes made on the fly must not grow this forever
            _TYPE_NAMES.clear()
        name = _TYPE_NAMES[cls] = f"{cls.__module__}.{cls.__qualname__}"
    return name
