import dataclasses
import enum
import json
import math

import numpy as np
import pytest

from vinlens.widgets._payload import (
    encode_array,
    encode_table,
    payload_nbytes,
    split_buffers,
    to_jsonable,
)


class Mode(enum.Enum):
    A = "a"


@dataclasses.dataclass(frozen=True)
class Rec:
    name: str
    value: float
    shape: tuple[int, ...]
    mode: Mode


def test_records_become_strict_json_with_explicit_non_finite_floats():
    out = to_jsonable([Rec("x", math.nan, (2, 3), Mode.A), Rec("y", -math.inf, (), Mode.A)])
    text = json.dumps(out, allow_nan=False)  # strict JSON: would raise on a bare NaN
    assert json.loads(text) == [
        {"name": "x", "value": {"$float": "NaN"}, "shape": [2, 3], "mode": "a"},
        {"name": "y", "value": {"$float": "-Infinity"}, "shape": [], "mode": "a"},
    ]


def test_unknown_objects_are_refused_not_stringified():
    with pytest.raises(TypeError, match="object"):
        to_jsonable({"x": object()})


def test_arrays_cross_as_little_endian_bytes():
    a = np.arange(6, dtype=">f4").reshape(2, 3)
    node = encode_array(a)["$array"]
    assert node["dtype"] == "float32" and node["shape"] == [2, 3]
    assert np.frombuffer(node["data"], "<f4").tolist() == a.ravel().tolist()
    half = encode_array(np.ones(3, np.float16))["$array"]
    assert half["dtype"] == "float32"
    big = encode_array(np.array([2**40], np.int64))["$array"]
    assert big["dtype"] == "float64" and np.frombuffer(big["data"], "<f8")[0] == 2**40


def test_table_is_columnar_and_strings_use_offsets():
    paths = [f"layers.{i}" for i in range(1000)] + ["é<img src=x>"]
    table = encode_table({"path": paths, "n": list(range(1001)), "t": [True] * 1001})["$table"]
    cols = {c["name"]: c for c in table["columns"]}
    offsets = np.frombuffer(cols["path"]["offsets"], "<u4")
    data = cols["path"]["data"]
    assert table["length"] == 1001
    assert data[offsets[1000] : offsets[1001]].decode() == "é<img src=x>"
    assert np.frombuffer(cols["n"]["data"], "<i4")[-1] == 1000
    assert cols["t"]["dtype"] == "bool"
    with pytest.raises(ValueError, match="differ in length"):
        encode_table({"a": [1], "b": [1, 2]})


def test_split_buffers_replaces_bytes_by_index():
    tree = to_jsonable({"a": np.zeros(4, np.uint8), "b": [np.ones(2, np.float32)]})
    content, buffers = split_buffers(tree)
    assert content["a"]["$array"]["data"] == {"$buffer": 0}
    assert content["b"][0]["$array"]["data"] == {"$buffer": 1}
    assert [len(b) for b in buffers] == [4, 8]
    assert payload_nbytes(tree) == 12
    json.dumps(content)
