"""A fresh clone works as the README says: setup, checks, CI, licence, one version."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest

import vinlens

REPO = Path(__file__).resolve().parents[1]


def test_commonjs_inside_the_repository_runs_as_commonjs():
    """JupyterLab's node helpers live in .venv inside the clone and use ``require``.

    Node takes a .js file's module type from the nearest package.json; the repository's
    must not declare ``"type": "module"`` or those helpers fail with "require is not
    defined in ES module scope" when Lab starts.
    """
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    package = json.loads((REPO / "package.json").read_text())
    assert package.get("type", "commonjs") == "commonjs"
    with tempfile.TemporaryDirectory(dir=REPO, prefix=".cjs-probe-") as tmp:
        probe = Path(tmp) / "lib" / "probe.js"
        probe.parent.mkdir()
        probe.write_text("const util = require('util');\nconsole.log(typeof util.format);\n")
        result = subprocess.run([node, str(probe)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "function"
    # The build scripts that are ES modules say so by their extension.
    for script in (REPO / "scripts").glob("*.js"):
        pytest.fail(f"{script} is ambiguous without a package type: name it .mjs or .cjs")


def test_one_version_source():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "src/vinlens/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)", vinlens.__version__)
    assert "version" not in json.loads((REPO / "package.json").read_text())


def test_licence_is_the_one_pyproject_names():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == {"text": "MIT"}
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def test_readme_keeps_two_commands_and_says_what_setup_does():
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    assert "apt" in readme and "sudo" in readme
    assert "~/.cache/vinlens/demo" in readme and "$VINLENS_DEMO_DIR" in readme


def test_ci_runs_the_readme_test_command_and_sets_everything_up():
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.MULTILINE)
    makefile = (REPO / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/test.sh" in test_recipe
    test_sh = (REPO / "scripts" / "test.sh").read_text()
    assert "bash scripts/setup.sh" in test_sh
    setup = (REPO / "scripts" / "setup.sh").read_text()
    torch_at = setup.index("torch==2.13.0")
    assert torch_at < setup.index('-e ".[dev]"')  # torch first, so pip keeps that build
    assert "npm ci" in setup
    assert "--no-install-recommends" in setup and "chromium" in setup


def test_make_check_is_the_fast_inner_loop():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    for tool in ("ruff check", "ruff format --check", "mypy", "tsc", "vitest", "pytest"):
        assert tool in recipe, tool
    assert "not e2e and not slow" in recipe
    assert "setup" not in recipe  # the inner loop never reinstalls anything
    hooks = (REPO / ".pre-commit-config.yaml").read_text()
    for hook in ("ruff-check", "ruff-format", "tsc"):
        assert hook in hooks, hook
