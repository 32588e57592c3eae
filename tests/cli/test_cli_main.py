"""The ``vinlens`` entry: one command table, light imports, one-line errors, ``--debug``."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vinlens.cli import COMMANDS, GROUPS, Command, Group, build_parser, describe_error, main
from vinlens.cli.table import format_table
from vinlens.store.synthetic import SyntheticDatasetRecord, write_synthetic_dataset

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("torch", "zarr", "numpy", "pandas", "pydantic", "msgpack", "matplotlib")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "vinlens.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> SyntheticDatasetRecord:
    return write_synthetic_dataset(tmp_path_factory.mktemp("cli-main"))


# --------------------------------------------------------------------------- registry


def test_every_registered_command_is_reachable_with_its_handler() -> None:
    parser = build_parser()
    sample_args = {
        "model": [],
        "store make-demo": ["x"],
        "store info": ["x"],
        "store stats": ["x"],
        "store coverage": ["x", "--raw", "y"],
        "store compare": ["x", "y"],
        "run show": ["x"],
        "run replay": ["x", "--step", "1", "--model", "m"],
        "run diff": ["x", "y"],
        "demo": [],
    }
    assert sorted(c.name for c in COMMANDS) == sorted(sample_args)
    for command in COMMANDS:
        args = parser.parse_args([*command.name.split(), *sample_args[command.name]])
        assert args.handler is command.run


def test_a_command_table_builds_nested_groups_and_refuses_unknown_groups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def hello(args: argparse.Namespace) -> int:
        print(f"hello {args.who}")
        return 0

    table = (
        Command(
            "tools greet",
            "say hello",
            "Say hello.",
            lambda p: p.add_argument("who"),
            hello,
        ),
    )
    parser = build_parser(table, (Group("tools", "tools", "Tools."),))
    args = parser.parse_args(["tools", "greet", "you"])
    assert args.handler(args) == 0 and capsys.readouterr().out == "hello you\n"
    args = parser.parse_args(["tools"])
    assert args.handler(args) == 2  # a bare group prints its help
    assert "greet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no group 'tools'"):
        build_parser(table, ())
    assert {g.name for g in GROUPS} == {"store", "run"}


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
    assert main(["store"]) == 2
    assert "coverage" in capsys.readouterr().out


# --------------------------------------------------------------------------- fast start


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["store", "stats", "--help"],
        ["model", "--help"],
        ["store", "stats", "/x", "--max-samples", "-1"],  # an argument error
        ["store", "coverage", "/x"],  # a missing required option
    ],
)
def test_help_and_argument_errors_import_no_heavy_library(argv: list[str]) -> None:
    probe = (
        "import sys\n"
        "from vinlens.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


# --------------------------------------------------------------------------- errors


def _one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("vinlens: error: "), err
    for needle in needles:
        assert needle in lines[0], err


def test_coverage_with_raw_being_a_file_is_one_line(
    dataset: SyntheticDatasetRecord, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "not-a-dir"
    afile.write_text("x")
    assert main(["store", "coverage", str(dataset.store.store_dir), "--raw", str(afile)]) == 1
    _one_line_error(capsys.readouterr().err, str(afile))


def test_tar_symlink_to_a_directory_is_one_line_or_listed(
    dataset: SyntheticDatasetRecord, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(dataset.raw.raw_dir, raw)
    (tmp_path / "adir").mkdir()
    (raw / "zz-dir.tar").symlink_to(tmp_path / "adir")
    code = main(["store", "coverage", str(dataset.store.store_dir), "--raw", str(raw)])
    out, err = capsys.readouterr()
    if code == 0:  # the engine may list it as unreadable instead of failing
        assert "zz-dir.tar" in out and err == ""
    else:
        assert code == 1
        _one_line_error(err, str(raw / "zz-dir.tar"))


def test_symlink_loops_are_one_line(
    dataset: SyntheticDatasetRecord, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for argv in (
        ["store", "info", str(loop)],
        ["store", "stats", str(loop)],
        ["store", "coverage", str(dataset.store.store_dir), "--raw", str(loop)],
    ):
        assert main(argv) == 1, argv
        _one_line_error(capsys.readouterr().err, str(loop))

    store = tmp_path / "store"
    shutil.copytree(dataset.store.store_dir, store)
    (store / "manifest.json").unlink()
    (store / "manifest.json").symlink_to(store / "manifest.json")
    assert main(["store", "info", str(store)]) == 1
    _one_line_error(capsys.readouterr().err, str(store / "manifest.json"))


def test_a_shard_that_is_a_file_is_one_line_or_listed(
    dataset: SyntheticDatasetRecord, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    shutil.copytree(dataset.store.store_dir, store)
    shard = sorted((store / "shards").iterdir())[1]
    shutil.rmtree(shard)
    shard.write_bytes(b"not a shard")
    for command in ("stats", "info"):
        code = main(["store", command, str(store), "--all"] if command == "stats" else
                    ["store", command, str(store)])  # fmt: skip
        out, err = capsys.readouterr()
        if command == "stats" and code == 0:
            assert "problems (most severe first)" in out and shard.name in out
        elif code != 0:
            assert code == 1
            _one_line_error(err, str(shard))
        assert "Traceback" not in err


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError):
        main(["--debug", "store", "info", str(loop)])
    with pytest.raises(OSError):
        main(["store", "info", str(loop), "--debug"])
    with pytest.raises(OSError):
        main(["store", "--debug", "info", str(loop)])
    plain, debug = _run("store", "info", str(loop)), _run("store", "info", str(loop), "--debug")
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    _one_line_error(plain.stderr, str(loop))
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr


def test_describe_error_names_paths_and_leaves_bugs_alone() -> None:
    assert describe_error(FileNotFoundError(2, "No such file or directory", "/a")) == (
        "/a: No such file or directory"
    )
    assert describe_error(OSError(18, "Invalid cross-device link", "/a", None, "/b")) == (
        "/a -> /b: Invalid cross-device link"
    )
    assert describe_error(ValueError("bad\n  value")) == "bad; value"
    assert describe_error(KeyError("bug")) is None
    assert describe_error(TypeError("bug")) is None


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_args: argparse.Namespace) -> int:
        raise KeyError("a bug, not a user error")

    table = (Command("boom", "h", "d", lambda p: None, broken),)
    monkeypatch.setattr("vinlens.cli.build_parser", lambda: build_parser(table, ()))
    with pytest.raises(KeyError):
        main(["boom"])


# --------------------------------------------------------------------------- one table style


def test_tables_right_align_numbers_with_thousands_separators() -> None:
    text = format_table(
        ("name", "count", "mean", "note"),
        [("a", 1234567, 0.5, "x"), ("bb", 3, None, "yy"), ("c", 12, 1e-5, 7)],
    )
    lines = text.splitlines()
    assert lines[0] == "name      count   mean  note"
    assert lines[2] == "a     1,234,567    0.5  x"
    assert lines[3] == "bb            3      -  yy"
    assert lines[4] == "c            12  1e-05  7"  # mixed text/number column stays left


def test_json_output_is_strict(dataset: SyntheticDatasetRecord) -> None:
    result = _run("store", "info", str(dataset.store.store_dir), "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["num_samples"] == dataset.store.num_samples


def test_nothing_outside_the_cli_package_imports_it() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+vinlens\.cli\b", re.MULTILINE)
    offenders = [
        str(path.relative_to(SRC))
        for path in (SRC / "vinlens").rglob("*.py")
        if "cli" not in path.relative_to(SRC / "vinlens").parts and pattern.search(path.read_text())
    ]
    assert offenders == []
    old_homes = ["cli_model.py", "store/cli.py", "store/cli_diagnostics.py", "demo/cli.py"]
    assert [p for p in old_homes if (SRC / "vinlens" / p).exists()] == []
