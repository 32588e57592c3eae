"""vinlens.export: rows, DataFrames and CSV/JSON/Parquet files from engine records."""

import builtins
import csv
import dataclasses
import enum
import json
import math

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from pydantic import BaseModel
from torch import nn

from vinlens.export import export, to_dataframe, to_rows
from vinlens.model_inspection import CaptureLimits, capture_model, inspect_config, inspect_model


class Mode(enum.Enum):
    FAST = "fast"


@dataclasses.dataclass(frozen=True)
class SceneRow:  # the shape of a per-scene coverage record
    scene: str
    snippets: int
    missing: tuple[str, ...]
    ratio: float
    mode: Mode | None


ROWS = [
    SceneRow("s1", 3, ("a", "b"), 0.5, Mode.FAST),
    SceneRow('s2,"q"', 0, (), math.nan, None),
]


def test_to_rows_from_records_dicts_and_containers():
    rows = to_rows(ROWS)
    assert rows[0] == {
        "scene": "s1",
        "snippets": 3,
        "missing": ("a", "b"),
        "ratio": 0.5,
        "mode": Mode.FAST,
    }
    assert to_rows([{"a": 1}, {"b": 2}]) == [{"a": 1}, {"b": 2}]
    model = nn.Sequential(nn.Linear(2, 2))
    assert [r["path"] for r in to_rows(inspect_model(model))] == ["<root>", "0"]
    with capture_model(model, limits=CaptureLimits(max_tensors=4)) as cap:
        model(torch.ones(1, 2))
    rows = to_rows(cap)
    assert len(rows) == len(cap.snapshots) > 0 and rows[0]["module_path"] in ("<root>", "0")


def test_to_rows_rejects_what_is_not_a_table():
    with pytest.raises(TypeError, match=r"cannot make rows from builtins\.int"):
        to_rows(5)
    with pytest.raises(TypeError, match=r"record 1 is a builtins\.str"):
        to_rows([{"a": 1}, "b"])
    with pytest.raises(TypeError, match=r"cannot make rows from builtins\.str"):
        to_rows("abc")


def test_csv_round_trip_keeps_structure_readable(tmp_path):
    path = export(ROWS, tmp_path / "scenes.csv")
    with path.open(newline="") as handle:
        read = list(csv.DictReader(handle))
    assert read[0] == {
        "scene": "s1",
        "snippets": "3",
        "missing": '["a","b"]',
        "ratio": "0.5",
        "mode": "fast",
    }
    assert read[1]["scene"] == 's2,"q"' and read[1]["missing"] == "[]" and read[1]["mode"] == ""
    assert read[1]["ratio"] == "NaN"
    frame = pd.read_csv(path)
    assert math.isnan(frame["ratio"][1])


def test_json_is_strict(tmp_path):
    path = export(ROWS, tmp_path / "scenes.JSON")
    data = json.loads(path.read_text())  # strict parser would choke on bare NaN
    assert data[0]["missing"] == ["a", "b"] and data[0]["mode"] == "fast"
    assert data[1]["ratio"] == "NaN"


def test_parquet_keeps_numbers_typed_and_mixed_columns_readable(tmp_path):
    class Inner(BaseModel):
        depth: int = 2

    class Config(BaseModel):
        name: str = "vin"
        inner: Inner = Inner()
        scale: float = 0.5
        flag: bool = True

    spec = inspect_config(Config())
    table = pq.read_table(export(spec, tmp_path / "config.parquet"))
    assert table.column_names == ["path", "declared_type", "configured_type", "value"]
    assert table.column("path").to_pylist()[0] == ["name"]
    values = table.column("value").to_pylist()
    assert values[0] == "vin" and "0.5" in values and "true" in values  # mixed kinds kept as text
    scenes = pq.read_table(export(ROWS, tmp_path / "scenes.parquet"))
    assert str(scenes.schema.field("snippets").type) == "int64"
    assert scenes.column("missing").to_pylist() == [["a", "b"], []]


def test_dataframe(tmp_path):
    frame = to_dataframe(ROWS)
    assert list(frame.columns) == ["scene", "snippets", "missing", "ratio", "mode"]
    assert frame["missing"][0] == ("a", "b") and frame["mode"][0] == "fast"


def test_bad_suffix_and_missing_directory(tmp_path):
    with pytest.raises(ValueError, match=r"unknown suffix '\.xlsx'.*\.csv.*\.json.*\.parquet"):
        export(ROWS, tmp_path / "x.xlsx")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export(ROWS, tmp_path / "missing" / "x.csv")
    assert not (tmp_path / "x.xlsx").exists()


def test_optional_dependencies_name_the_extra(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name.split(".")[0] in ("pandas", "pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    monkeypatch.setattr("importlib.import_module", lambda name: no_pandas(name))
    with pytest.raises(ImportError, match=r"to_dataframe needs pandas.*vinlens\[export\]"):
        to_dataframe(ROWS)
    with pytest.raises(ImportError, match=r"Parquet export needs pyarrow.*vinlens\[export\]"):
        export(ROWS, tmp_path / "x.parquet")
    assert export(ROWS, tmp_path / "x.csv").exists()  # CSV needs neither


def test_csv_cells_cannot_run_as_spreadsheet_formulas(tmp_path):
    rows = [{"scene": '=HYPERLINK("http://x")', "note": "@SUM(A1)", "delta": -1.5, "n": -3}]
    path = export(rows, tmp_path / "hostile.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        (read,) = list(csv.DictReader(handle))
    assert read["scene"] == '\'=HYPERLINK("http://x")'
    assert read["note"] == "'@SUM(A1)"
    assert (read["delta"], read["n"]) == ("-1.5", "-3")  # numbers keep their sign


def test_csv_header_row_is_escaped_like_the_cells(tmp_path):
    rows = [{"=cmd|' /C calc'!A0": 1, "+sum": 2, "plain": 3}]
    path = export(rows, tmp_path / "header.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert header == ["'=cmd|' /C calc'!A0", "'+sum", "plain"]


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot render this cell")


@pytest.mark.parametrize("suffix", [".csv", ".json", ".parquet"])
def test_an_error_midway_leaves_the_previous_file_intact(tmp_path, suffix):
    target = tmp_path / f"table{suffix}"
    export(ROWS, target)
    before = target.read_bytes()
    target.chmod(0o640)
    rows = [{"scene": f"s{i}", "value": i} for i in range(500)] + [{"scene": Unprintable()}]
    with pytest.raises(RuntimeError, match="cannot render"):
        export(rows, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no temp file left
    # A successful export replaces the file whole and keeps its permissions.
    export(rows[:-1], target)
    assert target.read_bytes() != before and (target.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_export_through_a_symlink_replaces_the_file_it_points_at(tmp_path):
    real = tmp_path / "real.json"
    export(ROWS, real)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    export([{"a": 1}], link)
    assert link.is_symlink() and json.loads(real.read_text()) == [{"a": 1}]


def test_names_that_are_not_utf8_are_written_readably(tmp_path):
    # A Latin-1 tar member name as Python carries it (surrogateescape).
    latin1 = b"caf\xe9/sn\xf8".decode("utf-8", "surrogateescape")
    rows = [{"scene_id": latin1, "note": "café", "ids": (latin1,)}]
    text = export(rows, tmp_path / "t.csv").read_text(encoding="utf-8")
    assert "caf\\xe9/sn\\xf8" in text and "café" in text
    data = json.loads(export(rows, tmp_path / "t.json").read_text(encoding="utf-8"))
    assert data == [{"scene_id": "caf\\xe9/sn\\xf8", "note": "café", "ids": ["caf\\xe9/sn\\xf8"]}]
    table = pq.read_table(export(rows, tmp_path / "t.parquet"))
    assert table.column("scene_id").to_pylist() == ["caf\\xe9/sn\\xf8"]
    # The rows themselves keep the exact name, for code that opens the tar again.
    assert to_rows(rows)[0]["scene_id"] == latin1


def test_display_text():
    from vinlens.export import display_text

    assert display_text("plain") == "plain" and display_text("Grüße 场景") == "Grüße 场景"
    assert display_text(b"\xff\xfeok".decode("utf-8", "surrogateescape")) == "\\xff\\xfeok"
    assert display_text("lone \ud800") == "lone \\ud800"
