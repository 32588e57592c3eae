"""``vinlens store make-demo`` and ``vinlens store info`` through the real command line entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vinlens.cli import main


def test_make_demo_then_info_prints_an_aligned_manifest_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo"
    assert (
        main(
            [
                "store",
                "make-demo",
                str(path),
                "--scenes",
                "2",
                "--snippets",
                "3",
                "--seed",
                "4",
                "--raw",
                str(tmp_path / "raw"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "samples              12" in out
    assert "missing_in_store" in out
    assert len(list((tmp_path / "raw").glob("*.tar"))) == 3

    assert main(["store", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "format        vin-offline-store v1" in out
    assert "scene_labels  true" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("shard  rows"))
    columns = [
        header.index(name)
        for name in ("rows", "block", "kind", "dtype", "shape", "optional", "bytes")
    ]
    block_rows = [line for line in lines if line.startswith("0000")]
    assert len(block_rows) == 2 * 9 - 1  # 2 shards x 9 blocks, last shard without candidate_ids
    rri = next(line for line in block_rows if " rri " in line)
    assert rri[columns[3] :].startswith("float32") and rri[columns[6] :].strip() == str(8 * 16 * 4)

    assert main(["store", "info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_samples"] == 12


def test_make_demo_refuses_an_existing_path_unless_replace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo"
    assert main(["store", "make-demo", str(path), "--unlabelled"]) == 0
    assert main(["store", "make-demo", str(path)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["store", "make-demo", str(path), "--replace", "--no-backbone"]) == 0
    capsys.readouterr()
    assert main(["store", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "backbone=no" in out and "scene_labels  true" in out


def test_info_on_a_broken_store_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo"
    assert main(["store", "make-demo", str(path)]) == 0
    (path / "manifest.json").write_text('{"format": "vin-offline-store", "version": 9}')
    assert main(["store", "info", str(path)]) == 1
    err = capsys.readouterr().err
    assert (
        str(path / "manifest.json") in err and "unsupported version 9" in err and "one of: 1" in err
    )


def test_a_directory_that_is_not_a_store_reads_naturally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "info", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vinlens: error: {tmp_path / 'manifest.json'}: manifest.json is missing")
    assert "\n" not in err
    # One level of parentheses at most: "(expected ...)" holds no "(...)" of its own.
    depth = deepest = 0
    for char in err:
        depth += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, depth)
    assert deepest <= 1, err


def test_info_table_right_aligns_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo"
    assert main(["store", "make-demo", str(path), "--candidates", "300"]) == 0
    capsys.readouterr()
    assert main(["store", "info", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith("shard  "))
    header = lines[header_at]
    end = header.index("bytes") + len("bytes")
    rows = lines[header_at + 2 :]
    rri = next(row for row in rows if " rri " in row)
    assert rri[:end].endswith(f"{8 * 300 * 4:,}")  # "9,600": separators, right-aligned
    rows_end = header.index("rows") + len("rows")
    assert all(row[:rows_end].endswith(" 8") for row in rows)
